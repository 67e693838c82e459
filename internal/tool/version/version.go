// Package version says which build of goroce a binary is, from the module and
// VCS information the Go toolchain stamps into every binary
// (runtime/debug.ReadBuildInfo), so every tool's -version and roced's
// roce_build_info metric report the same facts.
//
// `go install ./cmd/...` from a git checkout stamps the main module's version
// (a tag, or a pseudo-version such as v0.0.0-20261124170700-fe26727a1b2c,
// +dirty when the tree has changes) and vcs.revision, vcs.time and
// vcs.modified. `go run`, tests and builds with -buildvcs=false stamp neither:
// the module version is then "(devel)" and the revision empty, which Get
// reports as they are rather than inventing a version.
package version

import (
	"fmt"
	"io"
	"runtime"
	"runtime/debug"
	"strings"
)

// Info is what the running binary says about its own build.
type Info struct {
	Path      string // main module path, e.g. github.com/goroce/goroce
	Version   string // main module version: a tag, a pseudo-version, or "(devel)"
	GoVersion string // the toolchain that built it, e.g. go1.26.8
	Revision  string // vcs.revision: the full commit hash; "" when not stamped
	Time      string // vcs.time: the commit time (RFC 3339); "" when not stamped
	Modified  bool   // vcs.modified: the tree had uncommitted changes
}

// Get reads the running binary's build information.
func Get() Info {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return Info{Version: "(devel)", GoVersion: runtime.Version()}
	}
	return fromBuildInfo(bi)
}

func fromBuildInfo(bi *debug.BuildInfo) Info {
	i := Info{Path: bi.Main.Path, Version: bi.Main.Version, GoVersion: bi.GoVersion}
	if i.Version == "" {
		i.Version = "(devel)"
	}
	if i.GoVersion == "" {
		i.GoVersion = runtime.Version()
	}
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			i.Revision = s.Value
		case "vcs.time":
			i.Time = s.Value
		case "vcs.modified":
			i.Modified = s.Value == "true"
		}
	}
	return i
}

// Short is the version in one word, for a metric label: the module version
// when the toolchain stamped one, else "devel" with the first 12 digits of the
// revision (and "-dirty" for a modified tree), else "devel".
func (i Info) Short() string {
	if i.Version != "" && i.Version != "(devel)" {
		return i.Version
	}
	if i.Revision == "" {
		return "devel"
	}
	s := "devel-" + i.Revision[:min(12, len(i.Revision))]
	if i.Modified {
		s += "-dirty"
	}
	return s
}

// String is the line -version prints after the program name: the version,
// then what the VCS stamp adds, then the Go version.
func (i Info) String() string {
	var b strings.Builder
	b.WriteString(i.Short())
	var vcs []string
	if i.Revision != "" {
		vcs = append(vcs, "revision "+i.Revision)
	}
	if i.Time != "" {
		vcs = append(vcs, "committed "+i.Time)
	}
	if i.Modified {
		vcs = append(vcs, "modified")
	}
	if len(vcs) > 0 {
		b.WriteString(" (" + strings.Join(vcs, ", ") + ")")
	}
	b.WriteString(" " + i.GoVersion)
	return b.String()
}

// Print writes "PROGRAM VERSION (...) GOVERSION" and a newline to w, what
// every goroce tool's -version prints.
func Print(w io.Writer, program string) {
	fmt.Fprintf(w, "%s %s\n", program, Get())
}

// Requested reports whether args ask for the version with -version or
// --version before any "--". Tools whose stock command line is getopt-style
// check this first, because getopt would read "-version" as bundled short
// options.
func Requested(args []string) bool {
	for _, a := range args {
		switch a {
		case "--":
			return false
		case "-version", "--version":
			return true
		}
	}
	return false
}
