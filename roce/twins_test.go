package roce

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/goroce/goroce/internal/core/cq"
	"github.com/goroce/goroce/internal/core/srq"
	"github.com/goroce/goroce/internal/core/transport"
)

// twinPairs are the verbs types users read and the engine forms convert.go turns
// them into.
var twinPairs = []struct{ user, engine any }{
	{SGE{}, srq.SGE{}},
	{RecvWR{}, srq.RecvWR{}},
	{SRQAttr{}, srq.Attr{}},
	{WC{}, cq.WorkCompletion{}},
	{SendWR{}, transport.SendWR{}},
	{AddressVector{}, transport.AddressVector{}},
	{QPCap{}, transport.QPCap{}},
	{QPAttr{}, transport.QPAttr{}},
	{QPInfo{}, transport.QPInfo{}},
	{MWBindWR{}, transport.MWBindWR{}},
	{FlushWR{}, transport.FlushWR{}},
}

// TestVerbsTypesAreTheirEngineTwins checks what makes convert.go's reinterpretation
// sound: each verbs type and its engine form have the same size and alignment and
// the same fields, in order, at the same offsets, of the same type or of twin types
// (through pointers, slices and structs).
func TestVerbsTypesAreTheirEngineTwins(t *testing.T) {
	for _, p := range twinPairs {
		u, e := reflect.TypeOf(p.user), reflect.TypeOf(p.engine)
		t.Run(u.Name(), func(t *testing.T) {
			if why := twinMismatch(u, e); why != "" {
				t.Fatalf("roce.%s and %v differ: %s", u.Name(), e, why)
			}
		})
	}
	// The check itself tells a renamed, a moved and a retyped field apart.
	type a struct {
		X uint32
		Y []SGE
	}
	type renamed struct {
		Z uint32
		Y []SGE
	}
	type retyped struct {
		X uint32
		Y []WC
	}
	type moved struct {
		Y []SGE
		X uint32
	}
	for _, bad := range []any{renamed{}, retyped{}, moved{}} {
		if twinMismatch(reflect.TypeOf(a{}), reflect.TypeOf(bad)) == "" {
			t.Errorf("%T passes as a twin of a", bad)
		}
	}
}

func twinMismatch(u, e reflect.Type) string {
	if u == e {
		return ""
	}
	if u.Kind() != e.Kind() || u.Size() != e.Size() || u.Align() != e.Align() {
		return fmt.Sprintf("%v (%v, %d bytes) is not %v (%v, %d bytes)", u, u.Kind(), u.Size(), e, e.Kind(), e.Size())
	}
	switch u.Kind() {
	case reflect.Pointer, reflect.Slice:
		return twinMismatch(u.Elem(), e.Elem())
	case reflect.Struct:
		if u.NumField() != e.NumField() {
			return fmt.Sprintf("%d fields, %d fields", u.NumField(), e.NumField())
		}
		for i := 0; i < u.NumField(); i++ {
			fu, fe := u.Field(i), e.Field(i)
			if fu.Name != fe.Name || fu.Offset != fe.Offset {
				return fmt.Sprintf("field %d is %s at %d, %s at %d", i, fu.Name, fu.Offset, fe.Name, fe.Offset)
			}
			if why := twinMismatch(fu.Type, fe.Type); why != "" {
				return fu.Name + ": " + why
			}
		}
		return ""
	}
	return fmt.Sprintf("%v is not %v", u, e)
}

// TestVerbsTypesShowTheirFields: `go doc ./roce <Type>` shows the fields of every
// value type a user fills in or reads, each with its doc comment, because roce
// declares them (not aliases of lower packages' types).
func TestVerbsTypesShowTheirFields(t *testing.T) {
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	fset := token.NewFileSet()
	specs := map[string]*ast.TypeSpec{}
	for _, name := range files {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, name, nil, parser.ParseComments)
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range f.Decls {
			if g, ok := d.(*ast.GenDecl); ok && g.Tok == token.TYPE {
				for _, s := range g.Specs {
					ts := s.(*ast.TypeSpec)
					specs[ts.Name.Name] = ts
				}
			}
		}
	}
	names := []string{"QPInitAttr", "AsyncEvent", "DeviceAttr", "PortAttr", "Limits", "SRQInitAttr"}
	for _, p := range twinPairs {
		names = append(names, reflect.TypeOf(p.user).Name())
	}
	for _, name := range names {
		ts := specs[name]
		if ts == nil || ts.Assign.IsValid() {
			t.Errorf("%s is not a type roce declares (an alias shows no fields)", name)
			continue
		}
		st, ok := ts.Type.(*ast.StructType)
		if !ok {
			t.Errorf("%s is not a struct", name)
			continue
		}
		for _, f := range st.Fields.List {
			if f.Doc == nil && f.Comment == nil {
				t.Errorf("%s.%s has no doc comment", name, f.Names[0].Name)
			}
		}
	}
}
