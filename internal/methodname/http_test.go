package methodname

import (
	"errors"
	"regexp"
	"strings"
	"testing"
)

// httpGrammar is the HTTP route grammar as a regular expression, the
// oracle for the tests and the fuzz target (the verb's length is checked
// apart).
var httpGrammar = regexp.MustCompile(`^([A-Z][A-Z0-9_-]*) (/[\x21-\x7e]*)$`)

func httpOracle(op string) bool {
	m := httpGrammar.FindStringSubmatch(op)
	return len(op) <= MaxLen && m != nil && len(m[1]) <= MaxVerbLen
}

func TestSplitHTTP(t *testing.T) {
	good := []struct{ op, verb, route string }{
		{"POST /transfers", "POST", "/transfers"},
		{"PUT /orders/{id}", "PUT", "/orders/{id}"},
		{"PATCH /a/{rest...}", "PATCH", "/a/{rest...}"},
		{"POST /{$}", "POST", "/{$}"},
		{"M-SEARCH /", "M-SEARCH", "/"},
		{"X_1 /a%20b", "X_1", "/a%20b"},
		{strings.Repeat("A", MaxVerbLen) + " /", strings.Repeat("A", MaxVerbLen), "/"},
		{"POST /" + strings.Repeat("r", MaxLen-6), "POST", "/" + strings.Repeat("r", MaxLen-6)}, // exactly MaxLen
	}
	for _, g := range good {
		verb, route, err := SplitHTTP(g.op)
		if err != nil || verb != g.verb || route != g.route {
			t.Errorf("SplitHTTP(%q) = %q, %q, %v; want %q, %q", g.op, verb, route, err, g.verb, g.route)
		}
		if err := CheckOperation(g.op); err != nil {
			t.Errorf("CheckOperation(%q) = %v", g.op, err)
		}
		if !httpOracle(g.op) {
			t.Errorf("oracle rejects %q", g.op)
		}
	}
	bad := []struct {
		op   string
		want error
	}{
		{"", ErrHTTPForm},
		{"POST", ErrHTTPForm},
		{"POST ", ErrHTTPForm},
		{" /a", ErrHTTPForm},
		{"POST transfers", ErrHTTPForm},
		{"POST  /a", ErrHTTPForm},
		{"post /a", ErrVerb},
		{"1POST /a", ErrVerb},
		{"-X /a", ErrVerb},
		{"PO.ST /a", ErrVerb},
		{"PÖST /a", ErrVerb},
		{"POST/ /a", ErrVerb},
		{strings.Repeat("A", MaxVerbLen+1) + " /", ErrVerb},
		{"POST /a b", ErrRoute},
		{"POST /a\tb", ErrRoute},
		{"POST /a\x00", ErrRoute},
		{"POST /é", ErrRoute},
		{"POST /a\x7f", ErrRoute},
		{"POST /" + strings.Repeat("r", MaxLen-5), ErrTooLong}, // MaxLen+1
	}
	for _, b := range bad {
		verb, route, err := SplitHTTP(b.op)
		if !errors.Is(err, b.want) || verb != "" || route != "" {
			t.Errorf("SplitHTTP(%.40q) = %q, %q, %v; want %v", b.op, verb, route, err, b.want)
		}
		if httpOracle(b.op) {
			t.Errorf("oracle accepts %q", b.op)
		}
	}
	// The two forms do not overlap: a gRPC name is never an HTTP route.
	for _, s := range []string{"/a.B/C", "/Svc/M"} {
		if CheckHTTP(s) == nil || CheckOperation(s) != nil {
			t.Errorf("%q: CheckHTTP accepts it or CheckOperation refuses it", s)
		}
	}
	if err := CheckOperation("/a.B/"); !errors.Is(err, ErrForm) {
		t.Errorf("CheckOperation of a bad gRPC name: %v, want ErrForm", err)
	}
}

// FuzzSplitHTTP checks SplitHTTP against the grammar's regular
// expression, as FuzzSplit does for gRPC names, and that no string is
// accepted as both forms.
func FuzzSplitHTTP(f *testing.F) {
	for _, s := range []string{
		"", "POST /", "POST /a/{id}", "post /a", "POST  /a", "POST /a b", "M-SEARCH /x", "/a.B/C",
		"POST /\x7f", "A /" + strings.Repeat("r", MaxLen-3), strings.Repeat("A", MaxVerbLen+1) + " /",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, op string) {
		verb, route, err := SplitHTTP(op)
		want := httpOracle(op)
		if err != nil {
			if want {
				t.Fatalf("SplitHTTP(%q) rejects a route of the grammar: %v", op, err)
			}
			if !errors.Is(err, ErrTooLong) && !errors.Is(err, ErrHTTPForm) && !errors.Is(err, ErrVerb) && !errors.Is(err, ErrRoute) {
				t.Fatalf("SplitHTTP(%q): unexpected error %v", op, err)
			}
			if verb != "" || route != "" {
				t.Fatalf("SplitHTTP(%q) returned parts with an error", op)
			}
			return
		}
		if !want {
			t.Fatalf("SplitHTTP(%q) accepts a route outside the grammar", op)
		}
		if verb+" "+route != op {
			t.Fatalf("SplitHTTP(%q) = %q, %q: parts do not rebuild the name", op, verb, route)
		}
		if Check(op) == nil {
			t.Fatalf("%q is both an HTTP route and a gRPC name", op)
		}
	})
}
