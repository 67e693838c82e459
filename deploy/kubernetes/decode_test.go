package kubernetes

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/yaml"
)

// kinds are the API types a manifest here may hold. A document of any other
// kind fails the test until its type is added, so nothing is left unchecked.
var kinds = map[string]func() any{
	"v1/Namespace":      func() any { return new(corev1.Namespace) },
	"v1/ServiceAccount": func() any { return new(corev1.ServiceAccount) },
	"v1/Pod":            func() any { return new(corev1.Pod) },
	"apps/v1/DaemonSet": func() any { return new(appsv1.DaemonSet) },
}

// object is one manifest document, decoded.
type object struct {
	where string // file:document
	obj   any
}

// loadManifests decodes every YAML document under dir strictly.
func loadManifests(t *testing.T, dir string) []object {
	t.Helper()
	var objs []object
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || !(strings.HasSuffix(path, ".yaml") || strings.HasSuffix(path, ".yml")) {
			return err
		}
		data, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		docs, err := decodeStream(data)
		for i, o := range docs {
			objs = append(objs, object{where: fmt.Sprintf("%s (document %d)", path, i+1), obj: o})
		}
		if err != nil {
			return fmt.Errorf("%s: %w", path, err)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return objs
}

// decodeStream decodes each document of a multi-document YAML stream into its
// API type. Documents with nothing but comments are skipped.
func decodeStream(data []byte) ([]any, error) {
	r := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(data)))
	var objs []any
	for n := 1; ; n++ {
		doc, err := r.Read()
		if errors.Is(err, io.EOF) {
			return objs, nil
		}
		if err != nil {
			return objs, fmt.Errorf("document %d: %w", n, err)
		}
		obj, err := decodeStrict(doc)
		if err != nil {
			return objs, fmt.Errorf("document %d: %w", n, err)
		}
		if obj != nil {
			objs = append(objs, obj)
		}
	}
}

// decodeStrict decodes one document into the type its apiVersion and kind
// name: an unknown or duplicated field fails, and so does a field spelled
// with the wrong case, which encoding/json alone would accept.
func decodeStrict(doc []byte) (any, error) {
	src, err := yaml.YAMLToJSON(doc)
	if err != nil {
		return nil, err
	}
	if string(bytes.TrimSpace(src)) == "null" {
		return nil, nil
	}
	var tm struct{ APIVersion, Kind string }
	if err := json.Unmarshal(src, &tm); err != nil {
		return nil, err
	}
	newObj, ok := kinds[tm.APIVersion+"/"+tm.Kind]
	if !ok {
		return nil, fmt.Errorf("apiVersion %q kind %q: not a type this test knows (add it to kinds)", tm.APIVersion, tm.Kind)
	}
	obj := newObj()
	if err := yaml.UnmarshalStrict(doc, obj); err != nil {
		return nil, err
	}
	back, err := json.Marshal(obj)
	if err != nil {
		return nil, err
	}
	var a, b any
	if err := json.Unmarshal(src, &a); err != nil {
		return nil, err
	}
	if err := json.Unmarshal(back, &b); err != nil {
		return nil, err
	}
	if err := sameCase(a, b, ""); err != nil {
		return nil, err
	}
	return obj, nil
}

// sameCase reports a key of src that the API type spells differently: it is
// absent from the round trip but present there under other case. (A key
// absent altogether is a zero value omitempty dropped; strict decoding
// already refused unknown ones.)
func sameCase(src, back any, path string) error {
	switch s := src.(type) {
	case map[string]any:
		b, _ := back.(map[string]any)
		for _, k := range slices.Sorted(maps.Keys(s)) {
			bv, ok := b[k]
			if !ok {
				for bk := range b {
					if strings.EqualFold(bk, k) {
						return fmt.Errorf("%s%s: the API spells it %q", path, k, bk)
					}
				}
				continue
			}
			if err := sameCase(s[k], bv, path+k+"."); err != nil {
				return err
			}
		}
	case []any:
		b, _ := back.([]any)
		for i := range s {
			if i < len(b) {
				if err := sameCase(s[i], b[i], fmt.Sprintf("%s%d.", path, i)); err != nil {
					return err
				}
			}
		}
	}
	return nil
}

// TestDecodeStrict: the decoder refuses each kind of typo a manifest can have,
// and takes multi-document streams with comment-only documents.
func TestDecodeStrict(t *testing.T) {
	const head = "apiVersion: v1\nkind: Pod\nmetadata:\n  name: p\nspec:\n"
	tests := []struct {
		name, doc string
		objs      int
		err       string // "" for success
	}{
		{"valid", head + "  hostNetwork: true\n", 1, ""},
		{"unknown field", head + "  hostNetwrok: true\n", 0, `unknown field "hostNetwrok"`},
		{"wrong case", head + "  HostNetwork: true\n", 0, `spec.HostNetwork: the API spells it "hostNetwork"`},
		{"wrong case nested", head + "  containers:\n  - name: c\n    Image: x\n", 0, `the API spells it "image"`},
		{"duplicate field", head + "  hostNetwork: true\n  hostNetwork: false\n", 0, "already set"},
		{"wrong type", head + "  hostNetwork: [1]\n", 0, "cannot unmarshal"},
		{"unknown kind", "apiVersion: v1\nkind: Podd\n", 0, `kind "Podd"`},
		{"two documents and a comment-only one", head + "---\n# nothing\n---\n" + head, 2, ""},
		{"error in the second document", head + "---\n" + head + "  bogus: 1\n", 1, "document 2"},
	}
	for _, tt := range tests {
		objs, err := decodeStream([]byte(tt.doc))
		switch {
		case tt.err == "" && err != nil:
			t.Errorf("%s: %v", tt.name, err)
		case tt.err != "" && (err == nil || !strings.Contains(err.Error(), tt.err)):
			t.Errorf("%s: error %v, want one with %q", tt.name, err, tt.err)
		case len(objs) != tt.objs:
			t.Errorf("%s: %d objects, want %d", tt.name, len(objs), tt.objs)
		}
	}
}
