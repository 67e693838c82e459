package roce

import (
	"go/ast"
	"go/parser"
	"go/token"
	"path/filepath"
	"strings"
	"testing"
)

// exportedNames returns the exported package-level names the non-test files
// matching glob declare, each with whether its declaration only names
// something of package verbs (an alias, a constant, a function calling it).
func exportedNames(t *testing.T, glob string) (names map[string]bool) {
	t.Helper()
	files, err := filepath.Glob(glob)
	if err != nil {
		t.Fatal(err)
	}
	names = map[string]bool{}
	fset := token.NewFileSet()
	for _, name := range files {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, name, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range f.Decls {
			switch d := d.(type) {
			case *ast.FuncDecl:
				if d.Recv == nil && d.Name.IsExported() {
					names[d.Name.Name] = d.Body != nil && len(d.Body.List) == 1 && namesVerbs(d.Body.List[0])
				}
			case *ast.GenDecl:
				for _, s := range d.Specs {
					switch s := s.(type) {
					case *ast.TypeSpec:
						if s.Name.IsExported() {
							names[s.Name.Name] = s.Assign.IsValid() && namesVerbs(s.Type)
						}
					case *ast.ValueSpec:
						for i, n := range s.Names {
							if n.IsExported() {
								names[n.Name] = i < len(s.Values) && namesVerbs(s.Values[i])
							}
						}
					}
				}
			}
		}
	}
	return names
}

// namesVerbs reports whether n refers to package verbs.
func namesVerbs(n ast.Node) bool {
	found := false
	ast.Inspect(n, func(n ast.Node) bool {
		if sel, ok := n.(*ast.SelectorExpr); ok {
			if id, ok := sel.X.(*ast.Ident); ok && id.Name == "verbs" {
				found = true
			}
		}
		return !found
	})
	return found
}

// TestEveryVerbsNameIsRoces: the verbs values are declared once, in
// internal/core/verbs, and a program sees them only through roce, so every
// exported name of that package must be one of roce's too, and roce's must
// name the verbs one (an alias), not declare the fact again.
func TestEveryVerbsNameIsRoces(t *testing.T) {
	verbs := exportedNames(t, "../internal/core/verbs/*.go")
	roce := exportedNames(t, "*.go")
	if len(verbs) < 100 {
		t.Fatalf("found only %d names in internal/core/verbs", len(verbs))
	}
	for n := range verbs {
		isAlias, ok := roce[n]
		switch {
		case !ok:
			t.Errorf("verbs.%s has no roce name: a program cannot reach it", n)
		case !isAlias:
			t.Errorf("roce.%s declares verbs.%s again instead of naming it", n, n)
		}
	}
}
