package apisurface

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"go/parser"
	"go/token"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
)

// File is where the surface is kept, relative to the repository's root.
const File = "api/opledger.txt"

// All lists the surface of every public package of the modules under root.
func All(root string) ([]Line, error) {
	pkgs, err := Packages(root)
	if err != nil {
		return nil, err
	}
	var all []Line
	for _, ip := range sortedKeys(pkgs) {
		lines, err := Of(ip, pkgs[ip])
		if err != nil {
			return nil, err
		}
		all = append(all, lines...)
	}
	return all, nil
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

func render(lines []Line) []byte {
	var b bytes.Buffer
	for _, l := range lines {
		b.WriteString(l.String())
		b.WriteByte('\n')
	}
	return b.Bytes()
}

// Write rewrites the surface file under root.
func Write(root string, lines []Line) error {
	p := filepath.Join(root, File)
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		return err
	}
	return os.WriteFile(p, render(lines), 0o644)
}

// ErrDiffers is returned by Check when the code's surface differs from
// the file.
var ErrDiffers = errors.New("the exported surface differs from " + File + " (review the change, then run go run ./internal/apisurface/cmd/apisurface -write)")

// Check compares lines with the surface file under root and returns an
// error naming every line added or removed.
func Check(root string, lines []Line) error {
	data, err := os.ReadFile(filepath.Join(root, File))
	if err != nil {
		return err
	}
	want := map[string]bool{}
	for _, l := range strings.Split(strings.TrimSpace(string(data)), "\n") {
		if l != "" {
			want[l] = true
		}
	}
	have := map[string]bool{}
	for _, l := range lines {
		have[l.String()] = true
	}
	var diff []string
	for _, l := range sortedKeys(have) {
		if !want[l] {
			diff = append(diff, "+ "+l)
		}
	}
	for _, l := range sortedKeys(want) {
		if !have[l] {
			diff = append(diff, "- "+l)
		}
	}
	if len(diff) == 0 {
		return nil
	}
	return fmt.Errorf("%w:\n%s", ErrDiffers, strings.Join(diff, "\n"))
}

// Counts returns the number of counted names of each package.
func Counts(lines []Line) map[string]int {
	n := map[string]int{}
	for _, l := range lines {
		if _, ok := n[l.Pkg]; !ok {
			n[l.Pkg] = 0
		}
		if l.Counted {
			n[l.Pkg]++
		}
	}
	return n
}

// PrintCounts writes the counted names per package and their total.
func PrintCounts(w io.Writer, lines []Line) {
	n := Counts(lines)
	total := 0
	bw := bufio.NewWriter(w)
	for _, p := range sortedKeys(n) {
		fmt.Fprintf(bw, "%5d %s\n", n[p], p)
		total += n[p]
	}
	fmt.Fprintf(bw, "%5d in %d packages\n", total, len(n))
	_ = bw.Flush()
}

// Closure returns the given packages and every package of pkgs that they
// import in turn (non-test files only), read from the sources.
func Closure(pkgs map[string]string, start ...string) ([]string, error) {
	seen := map[string]bool{}
	var visit func(ip string) error
	visit = func(ip string) error {
		if seen[ip] {
			return nil
		}
		dir, ok := pkgs[ip]
		if !ok {
			return nil
		}
		seen[ip] = true
		imports, err := importsOf(dir)
		if err != nil {
			return err
		}
		for _, imp := range imports {
			if err := visit(imp); err != nil {
				return err
			}
		}
		return nil
	}
	for _, s := range start {
		if _, ok := pkgs[s]; !ok {
			return nil, fmt.Errorf("no public package %s", s)
		}
		if err := visit(s); err != nil {
			return nil, err
		}
	}
	return sortedKeys(seen), nil
}

// importsOf lists the imports of the non-test files in dir. Imports of
// internal packages are followed too, so that a public package reached
// only through an internal one is counted.
func importsOf(dir string) ([]string, error) {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	fset := token.NewFileSet()
	var out []string
	for _, e := range ents {
		if !goSource(e.Name()) {
			continue
		}
		f, err := parser.ParseFile(fset, filepath.Join(dir, e.Name()), nil, parser.ImportsOnly)
		if err != nil {
			return nil, err
		}
		for _, imp := range f.Imports {
			p, _ := strconv.Unquote(imp.Path.Value)
			out = append(out, p)
		}
	}
	return out, nil
}

// Service lists the packages a service on PostgreSQL and grpc-go imports.
var Service = []string{
	"github.com/opledger/opledger/ledger",
	"github.com/opledger/opledger/dialects/postgres",
	"github.com/opledger/opledger/migrations",
	"github.com/opledger/opledger/txmiddleware",
	"github.com/opledger/opledger/grpcint",
	"github.com/opledger/opledger/policy",
}

// ServiceCount returns the counted names of the public packages a service
// on PostgreSQL and grpc-go links: those of Service and every public
// package of the kit they import in turn.
func ServiceCount(root string, lines []Line) (int, []string, error) {
	pkgs, err := Packages(root)
	if err != nil {
		return 0, nil, err
	}
	// Internal packages are followed too: a public package they import is
	// linked all the same.
	all, err := allPackages(root)
	if err != nil {
		return 0, nil, err
	}
	reach, err := Closure(all, Service...)
	if err != nil {
		return 0, nil, err
	}
	n := Counts(lines)
	total := 0
	var linked []string
	for _, p := range reach {
		if _, public := pkgs[p]; public {
			total += n[p]
			linked = append(linked, p)
		}
	}
	return total, linked, nil
}
