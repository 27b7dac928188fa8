package methodname

import (
	"errors"
	"regexp"
	"strings"
	"testing"
)

// grammar is the package comment's grammar as a regular expression, the
// oracle for the tests and the fuzz target.
var grammar = regexp.MustCompile(`^/[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*/[A-Za-z_][A-Za-z0-9_]*$`)

func TestMethodNameSplit(t *testing.T) {
	good := []struct{ full, service, method string }{
		{"/shop.v1.Orders/Create", "shop.v1.Orders", "Create"},
		{"/Svc/M", "Svc", "M"},
		{"/a.b.c.D_e/F1", "a.b.c.D_e", "F1"},
		{"/_x._y/_z", "_x._y", "_z"},
		{"/a/b", "a", "b"},
		{"/" + strings.Repeat("s", MaxLen-3) + "/m", strings.Repeat("s", MaxLen-3), "m"}, // exactly MaxLen bytes
	}
	for _, g := range good {
		svc, m, err := Split(g.full)
		if err != nil || svc != g.service || m != g.method {
			t.Errorf("Split(%q) = %q, %q, %v; want %q, %q", g.full, svc, m, err, g.service, g.method)
		}
		if err := Check(g.full); err != nil {
			t.Errorf("Check(%q) = %v", g.full, err)
		}
		if !grammar.MatchString(g.full) {
			t.Errorf("oracle rejects %q", g.full)
		}
	}
	bad := []struct {
		full string
		want error
	}{
		{"", ErrForm},
		{"/", ErrForm},
		{"//", ErrForm},
		{"a.B/Get", ErrForm},
		{"/a.B", ErrForm},
		{"/a.B/", ErrForm},
		{"//Get", ErrForm},
		{"/a/", ErrForm},
		{"/a..B/Get", ErrService},
		{"/.a.B/Get", ErrService},
		{"/a.B./Get", ErrService},
		{"/1a.B/Get", ErrService},
		{"/a.1B/Get", ErrService},
		{"/a-b.C/Get", ErrService},
		{"/a.B/Get/x", ErrMethod},
		{"/a.B/G-t", ErrMethod},
		{"/a.B/1Get", ErrMethod},
		{"/pay.Payments/Trans fer", ErrMethod},
		{"/a.B/Gét", ErrMethod},
		{"/a.B/Get\n", ErrMethod},
		{"/" + strings.Repeat("s", MaxLen-2) + "/m", ErrTooLong}, // MaxLen+1 bytes
		{strings.Repeat("/", MaxLen+1), ErrTooLong},
	}
	for _, b := range bad {
		svc, m, err := Split(b.full)
		if !errors.Is(err, b.want) || svc != "" || m != "" {
			t.Errorf("Split(%.40q) = %q, %q, %v; want error %v", b.full, svc, m, err, b.want)
		}
		if err := Check(b.full); !errors.Is(err, b.want) {
			t.Errorf("Check(%.40q) = %v; want %v", b.full, err, b.want)
		}
		if len(b.full) <= MaxLen && grammar.MatchString(b.full) {
			t.Errorf("oracle accepts %q", b.full)
		}
	}
}

func TestMethodNameIdent(t *testing.T) {
	for _, s := range []string{"a", "_", "A1", "snake_case", "_0"} {
		if !IsIdent(s) {
			t.Errorf("IsIdent(%q) = false", s)
		}
	}
	for _, s := range []string{"", "1a", "a.b", "a-b", "a b", "é", "a/b"} {
		if IsIdent(s) {
			t.Errorf("IsIdent(%q) = true", s)
		}
	}
	for _, s := range []string{"a", "a.b", "pkg.v1.Svc", "_._"} {
		if !IsServiceName(s) {
			t.Errorf("IsServiceName(%q) = false", s)
		}
	}
	for _, s := range []string{"", ".", "a.", ".a", "a..b", "a.1b", "a/b"} {
		if IsServiceName(s) {
			t.Errorf("IsServiceName(%q) = true", s)
		}
	}
}

// FuzzSplit checks Split against the grammar's regular expression: it
// never panics, accepts exactly the names of at most MaxLen bytes that
// match, returns parts that rebuild the name, and otherwise returns one of
// the package's errors and no parts.
func FuzzSplit(f *testing.F) {
	for _, s := range []string{
		"", "/", "//", "/a/b", "/shop.v1.Orders/Create", "/a..b/c", "/a.b/c/d", "/a.b/", "a.b/c",
		"/1a/b", "/a/b\x00", "/\xff/\xfe", "/" + strings.Repeat("a", MaxLen-3) + "/b", "/" + strings.Repeat("a", MaxLen) + "/b",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, full string) {
		svc, m, err := Split(full)
		want := len(full) <= MaxLen && grammar.MatchString(full)
		if err != nil {
			if want {
				t.Fatalf("Split(%q) rejects a name of the grammar: %v", full, err)
			}
			if !errors.Is(err, ErrTooLong) && !errors.Is(err, ErrForm) && !errors.Is(err, ErrService) && !errors.Is(err, ErrMethod) {
				t.Fatalf("Split(%q): unexpected error %v", full, err)
			}
			if svc != "" || m != "" {
				t.Fatalf("Split(%q) returned parts %q, %q with an error", full, svc, m)
			}
			if (len(full) > MaxLen) != errors.Is(err, ErrTooLong) {
				t.Fatalf("Split(%q): length %d, error %v", full, len(full), err)
			}
			return
		}
		if !want {
			t.Fatalf("Split(%q) accepts a name outside the grammar", full)
		}
		if "/"+svc+"/"+m != full || !IsServiceName(svc) || !IsIdent(m) {
			t.Fatalf("Split(%q) = %q, %q: parts do not rebuild the name", full, svc, m)
		}
	})
}
