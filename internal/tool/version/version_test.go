package version

import (
	"bytes"
	"runtime/debug"
	"strings"
	"testing"
)

func TestFromBuildInfo(t *testing.T) {
	settings := func(kv ...string) []debug.BuildSetting {
		var s []debug.BuildSetting
		for i := 0; i < len(kv); i += 2 {
			s = append(s, debug.BuildSetting{Key: kv[i], Value: kv[i+1]})
		}
		return s
	}
	const rev = "fe26727a1b2c3d4e5f60718293a4b5c6d7e8f901"
	for _, tt := range []struct {
		name       string
		bi         debug.BuildInfo
		short, str string
	}{
		{"tagged release", debug.BuildInfo{GoVersion: "go1.26.8", Main: debug.Module{Path: "github.com/goroce/goroce", Version: "v0.9.0"},
			Settings: settings("vcs.revision", rev, "vcs.time", "2026-11-24T17:07:00Z", "vcs.modified", "false")},
			"v0.9.0", "v0.9.0 (revision " + rev + ", committed 2026-11-24T17:07:00Z) go1.26.8"},
		{"pseudo-version, dirty", debug.BuildInfo{GoVersion: "go1.26.8", Main: debug.Module{Version: "v0.0.0-20261124170700-fe26727a1b2c+dirty"},
			Settings: settings("vcs.revision", rev, "vcs.modified", "true")},
			"v0.0.0-20261124170700-fe26727a1b2c+dirty", "v0.0.0-20261124170700-fe26727a1b2c+dirty (revision " + rev + ", modified) go1.26.8"},
		{"devel with a revision", debug.BuildInfo{GoVersion: "go1.26.8", Main: debug.Module{Version: "(devel)"},
			Settings: settings("vcs.revision", rev, "vcs.modified", "true")},
			"devel-fe26727a1b2c-dirty", "devel-fe26727a1b2c-dirty (revision " + rev + ", modified) go1.26.8"},
		{"go run, no vcs", debug.BuildInfo{GoVersion: "go1.26.8", Main: debug.Module{Version: "(devel)"}},
			"devel", "devel go1.26.8"},
		{"empty version", debug.BuildInfo{GoVersion: "go1.26.8"}, "devel", "devel go1.26.8"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			i := fromBuildInfo(&tt.bi)
			if got := i.Short(); got != tt.short {
				t.Errorf("Short() = %q, want %q", got, tt.short)
			}
			if got := i.String(); got != tt.str {
				t.Errorf("String() = %q, want %q", got, tt.str)
			}
		})
	}
}

func TestGetAndPrint(t *testing.T) {
	i := Get()
	if !strings.HasPrefix(i.GoVersion, "go") || i.Version == "" {
		t.Errorf("Get() = %+v", i)
	}
	var b bytes.Buffer
	Print(&b, "roce-tool")
	if !strings.HasPrefix(b.String(), "roce-tool "+i.Short()+" ") || !strings.HasSuffix(b.String(), i.GoVersion+"\n") {
		t.Errorf("Print wrote %q", b.String())
	}
}

func TestRequested(t *testing.T) {
	for _, tt := range []struct {
		args []string
		want bool
	}{
		{nil, false},
		{[]string{"-version"}, true},
		{[]string{"rc", "--version"}, true},
		{[]string{"-d", "lo", "-version"}, true},
		{[]string{"--", "-version"}, false},
		{[]string{"-v"}, false},
		{[]string{"--versions"}, false},
	} {
		if got := Requested(tt.args); got != tt.want {
			t.Errorf("Requested(%q) = %v, want %v", tt.args, got, tt.want)
		}
	}
}
