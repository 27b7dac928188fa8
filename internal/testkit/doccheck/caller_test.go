package doccheck

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// trusted is the caller function that any client can forge unless a
// gateway overwrites its header.
const trusted = "CallerFromTrustedHeader"

// The markers of a section of the docs that shows a gateway in front of
// the service, and the warning such a section must hold.
const (
	gatewayBegin   = "<!-- trusted-gateway:begin -->"
	gatewayEnd     = "<!-- trusted-gateway:end -->"
	gatewayWarning = "> **Warning:**"
)

// markdownDocs returns README.md and every .md file under docs/.
func markdownDocs(t *testing.T) []string {
	t.Helper()
	docs := []string{filepath.Join(root, "README.md")}
	err := filepath.WalkDir(filepath.Join(root, "docs"), func(p string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() && strings.HasSuffix(p, ".md") {
			docs = append(docs, p)
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return docs
}

// gatewaySections returns the line ranges [begin, end] (1-based) of the
// marked gateway sections of a markdown file, and a problem with the
// markers or a section that lacks the warning.
func gatewaySections(src string) (spans [][2]int, problems []string) {
	lines := strings.Split(src, "\n")
	start := 0
	for i, l := range lines {
		switch strings.TrimSpace(l) {
		case gatewayBegin:
			if start != 0 {
				problems = append(problems, "line "+strconv.Itoa(i+1)+": "+gatewayBegin+" inside another gateway section")
			}
			start = i + 1
		case gatewayEnd:
			if start == 0 {
				problems = append(problems, "line "+strconv.Itoa(i+1)+": "+gatewayEnd+" without its begin")
				continue
			}
			body := strings.Join(lines[start:i], "\n")
			if !strings.Contains(body, "\n"+gatewayWarning) && !strings.HasPrefix(body, gatewayWarning) {
				problems = append(problems, "line "+strconv.Itoa(start)+": a gateway section without a line starting "+gatewayWarning)
			}
			spans = append(spans, [2]int{start, i + 1})
			start = 0
		}
	}
	if start != 0 {
		problems = append(problems, "line "+strconv.Itoa(start)+": "+gatewayBegin+" without its end")
	}
	return spans, problems
}

// TestTrustedHeaderOnlyBehindAGateway: the docs teach a caller that a
// client cannot choose. No Go snippet of README.md or docs/ uses
// CallerFromTrustedHeader outside a section marked as one that shows the
// gateway (between <!-- trusted-gateway:begin --> and
// <!-- trusted-gateway:end -->), and every such section holds the
// warning; no code block in a Go doc comment uses it; no Go file outside
// grpcint and httpint calls it but a test; and of the Example functions
// (which godoc shows) only those named for a gateway do.
func TestTrustedHeaderOnlyBehindAGateway(t *testing.T) {
	for _, doc := range markdownDocs(t) {
		b, err := os.ReadFile(doc)
		if err != nil {
			t.Fatal(err)
		}
		rel, _ := filepath.Rel(root, doc)
		spans, problems := gatewaySections(string(b))
		for _, p := range problems {
			t.Errorf("%s: %s", rel, p)
		}
		blocks, lines := snippets(string(b))
		for i, blk := range blocks {
			if !strings.Contains(blk, trusted) {
				continue
			}
			inside := false
			for _, s := range spans {
				inside = inside || (lines[i] > s[0] && lines[i] < s[1])
			}
			if !inside {
				t.Errorf("%s:%d: this snippet uses %s outside a section that shows the gateway in front of the service "+
					"(%s … %s, with a line starting %q): any client can set the header. Show CallerFromPrincipal or CallerFromPeerCertificate:\n%s",
					rel, lines[i], trusted, gatewayBegin, gatewayEnd, gatewayWarning, blk)
			}
		}
	}

	fset := token.NewFileSet()
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (d.Name() == ".git" || d.Name() == "testdata") {
			return filepath.SkipDir
		}
		if d.IsDir() || !strings.HasSuffix(p, ".go") {
			return nil
		}
		rel, _ := filepath.Rel(root, p)
		if rel == filepath.Join("internal", "testkit", "doccheck", "caller_test.go") {
			return nil
		}
		src, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		if !strings.Contains(string(src), trusted) {
			return nil
		}
		f, err := parser.ParseFile(fset, p, src, parser.ParseComments)
		if err != nil {
			return err
		}
		for _, cg := range f.Comments {
			for _, c := range cg.List {
				for _, l := range strings.Split(c.Text, "\n") {
					if (strings.HasPrefix(l, "//\t") || strings.HasPrefix(l, "//  ")) && strings.Contains(l, trusted) {
						t.Errorf("%s:%d: a code block in a doc comment uses %s: show CallerFromPrincipal or CallerFromPeerCertificate",
							rel, fset.Position(c.Pos()).Line, trusted)
					}
				}
			}
		}
		test := strings.HasSuffix(p, "_test.go")
		own := strings.HasPrefix(rel, "grpcint"+string(filepath.Separator)) || strings.HasPrefix(rel, "httpint"+string(filepath.Separator))
		ast.Inspect(f, func(n ast.Node) bool {
			switch n := n.(type) {
			case *ast.FuncDecl:
				if test && strings.HasPrefix(n.Name.Name, "Example") && !strings.Contains(n.Name.Name, "Gateway") && uses(n) {
					t.Errorf("%s:%d: %s uses %s; an Example shows a caller a client cannot choose, or is named for the gateway it shows (Example…Gateway)",
						rel, fset.Position(n.Pos()).Line, n.Name.Name, trusted)
				}
			case *ast.SelectorExpr:
				if n.Sel.Name == trusted && !test && !own {
					t.Errorf("%s:%d: %s outside grpcint and httpint: take the caller from authentication (CallerFromPrincipal, CallerFromPeerCertificate)",
						rel, fset.Position(n.Pos()).Line, trusted)
				}
			}
			return true
		})
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// uses reports whether fn refers to CallerFromTrustedHeader.
func uses(fn *ast.FuncDecl) bool {
	found := false
	ast.Inspect(fn, func(n ast.Node) bool {
		if id, ok := n.(*ast.Ident); ok && id.Name == trusted {
			found = true
		}
		return !found
	})
	return found
}

// TestGatewaySections: the markers are read as the check above needs.
func TestGatewaySections(t *testing.T) {
	ok := "a\n" + gatewayBegin + "\n" + gatewayWarning + " only behind it.\n```go\nx\n```\n" + gatewayEnd + "\nb\n"
	spans, problems := gatewaySections(ok)
	if len(problems) != 0 || len(spans) != 1 || spans[0] != [2]int{2, 7} {
		t.Fatalf("%v %v", spans, problems)
	}
	for _, bad := range []string{
		gatewayBegin + "\nno warning\n" + gatewayEnd + "\n",
		gatewayBegin + "\n" + gatewayWarning + "\n",
		gatewayEnd + "\n",
		gatewayBegin + "\n" + gatewayBegin + "\n" + gatewayWarning + "\n" + gatewayEnd + "\n",
	} {
		if _, problems := gatewaySections(bad); len(problems) == 0 {
			t.Errorf("accepted:\n%s", bad)
		}
	}
}
