package apisurface

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// root is the repository's root, seen from this package's directory.
var root = filepath.Join("..", "..")

// The v1 targets (issue 38): names in all public packages of the kit's
// library modules, and in the public packages a service on PostgreSQL and
// grpc-go links.
const (
	maxAll     = 650
	maxService = 350
)

func TestSurfaceIsTheFile(t *testing.T) {
	lines, err := All(root)
	if err != nil {
		t.Fatal(err)
	}
	if err := Check(root, lines); err != nil {
		t.Fatal(err)
	}
}

func TestSurfaceSize(t *testing.T) {
	lines, err := All(root)
	if err != nil {
		t.Fatal(err)
	}
	total := 0
	for _, n := range Counts(lines) {
		total += n
	}
	if total > maxAll {
		t.Errorf("%d exported names in the public packages, want at most %d", total, maxAll)
	}
	n, linked, err := ServiceCount(root, lines)
	if err != nil {
		t.Fatal(err)
	}
	if n > maxService {
		t.Errorf("a PostgreSQL + grpc-go service links %d exported names in %s, want at most %d",
			n, strings.Join(linked, ", "), maxService)
	}
}

func TestOfCountsWhatTheIssueCounts(t *testing.T) {
	dir := t.TempDir()
	src := `package p

// T is counted, its exported field is listed only.
type T struct{ A, b int }

func (T) M()  {}
func (T) m()  {}
func (*u) N() {}

type u struct{}

type I interface {
	X()
	y()
}

const A, B = 1, 2

var V, w int

func F(a, b int) (c string) { return "" }
`
	if err := writeFile(filepath.Join(dir, "p.go"), src); err != nil {
		t.Fatal(err)
	}
	lines, err := Of("p", dir)
	if err != nil {
		t.Fatal(err)
	}
	var counted, listed []string
	for _, l := range lines {
		if l.Counted {
			counted = append(counted, l.Text)
		} else {
			listed = append(listed, l.Text)
		}
	}
	want := []string{"const A", "const B", "func F(int, int) string", "method (T) M()",
		"type I interface { X, unexported }", "type I interface, X()", "type T struct", "var V int"}
	if strings.Join(counted, "|") != strings.Join(want, "|") {
		t.Errorf("counted:\n%s\nwant:\n%s", strings.Join(counted, "\n"), strings.Join(want, "\n"))
	}
	if strings.Join(listed, "|") != "type T struct, A int" {
		t.Errorf("listed only: %q", listed)
	}
}

func writeFile(name, data string) error { return os.WriteFile(name, []byte(data), 0o644) }
