package doccheck

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"path/filepath"
	"sort"
	"strings"
	"testing"
)

// maxFuncLines is the longest a library function may be, from its func
// line to its closing brace.
const maxFuncLines = 60

// longFuncAllowed are library functions allowed over maxFuncLines. It is
// empty: every long function has been split into named steps. A function
// put here needs a reason next to its entry, and leaves the list when it
// is split (the test fails for an entry that is no longer long). Keys are
// "dir/file.go:Func" (methods as "Type.Method").
var longFuncAllowed = map[string]bool{}

// libraryFile reports whether a module file (slash-separated, relative to
// the module root) is held to the rule: library code (not a test, not
// under cmd/ or examples/ (commands and runnable examples), not in
// internal/testkit (what only tests import) or internal/harness (what the
// chaos and demo commands and the tests run)), and the chaos harness
// (cmd/opledger/internal/chaos), whose run was split into named steps when it
// left cmd/opledger and is kept so.
func libraryFile(rel string) bool {
	if !strings.HasSuffix(rel, ".go") || strings.HasSuffix(rel, "_test.go") {
		return false
	}
	if strings.HasPrefix(rel, "cmd/opledger/internal/chaos/") {
		return true
	}
	for _, skip := range []string{"cmd/", "examples/", "bench/", "internal/testkit/", "internal/harness/"} {
		if strings.HasPrefix(rel, skip) {
			return false
		}
	}
	return true
}

// longFuncs returns every library function longer than maxFuncLines, as
// "dir/file.go:Func" with its length.
func longFuncs(t *testing.T) map[string]int {
	t.Helper()
	out := map[string]int{}
	fset := token.NewFileSet()
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (d.Name() == ".git" || d.Name() == "testdata") {
			return filepath.SkipDir
		}
		rel, _ := filepath.Rel(root, p)
		rel = filepath.ToSlash(rel)
		if d.IsDir() || !libraryFile(rel) {
			return nil
		}
		f, err := parser.ParseFile(fset, p, nil, parser.SkipObjectResolution)
		if err != nil {
			return err
		}
		if f.Name.Name == "main" {
			return nil
		}
		for _, decl := range f.Decls {
			fd, ok := decl.(*ast.FuncDecl)
			if !ok || fd.Body == nil {
				continue
			}
			n := fset.Position(fd.End()).Line - fset.Position(fd.Pos()).Line + 1
			if n > maxFuncLines {
				out[rel+":"+funcName(fd)] = n
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func funcName(fd *ast.FuncDecl) string {
	if fd.Recv != nil {
		if r := recvType(fd.Recv); r != "" {
			return r + "." + fd.Name.Name
		}
	}
	return fd.Name.Name
}

// recvType is the name of a method's receiver type, without its pointer
// or type parameters; "" when it has none.
func recvType(recv *ast.FieldList) string {
	if len(recv.List) == 0 {
		return ""
	}
	return typeName(recv.List[0].Type)
}

// typeName is the name of a type declared in the package that typ
// names, or points to, without its type arguments: "" for any other type
// (another package's, a literal type).
func typeName(typ ast.Expr) string {
	if st, ok := typ.(*ast.StarExpr); ok {
		typ = st.X
	}
	switch x := typ.(type) {
	case *ast.IndexExpr:
		typ = x.X
	case *ast.IndexListExpr:
		typ = x.X
	}
	if id, ok := typ.(*ast.Ident); ok {
		return id.Name
	}
	return ""
}

// TestNoLongLibraryFunctions: no library function is over 60 lines, so
// that each reads in one screen; the long ones are split into named steps.
func TestNoLongLibraryFunctions(t *testing.T) {
	long := longFuncs(t)
	var bad []string
	for name, n := range long {
		if !longFuncAllowed[name] {
			bad = append(bad, fmt.Sprintf("%s: %d lines", name, n))
		}
	}
	sort.Strings(bad)
	for _, b := range bad {
		t.Errorf("library function over %d lines (split it into named steps): %s", maxFuncLines, b)
	}
	for name := range longFuncAllowed {
		if _, ok := long[name]; !ok {
			t.Errorf("%s is on the allowlist of long functions but is not over %d lines: take it off", name, maxFuncLines)
		}
	}
}
