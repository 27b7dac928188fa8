package ledger_test

import (
	"encoding/hex"
	"errors"
	"strings"
	"testing"

	"github.com/opledger/opledger/internal/testkit/testdb"
	"github.com/opledger/opledger/internal/txledger"
	"github.com/opledger/opledger/ledger"
)

func TestNewIdentityValidation(t *testing.T) {
	long := strings.Repeat("k", 256)
	bad := []struct{ name, caller, method, key, field string }{
		{"empty caller", "", method, "k", "caller"},
		{"long caller", strings.Repeat("c", 513), method, "k", "caller"},
		{"invalid utf8 caller", "a\xffb", method, "k", "caller"},
		{"control in caller", "a\x00b", method, "k", "caller"},
		{"newline in caller", "a\nb", method, "k", "caller"},
		{"no slash", "c", "pay.v1.Payments/Transfer", "k", "method"},
		{"no method", "c", "/pay.v1.Payments/", "k", "method"},
		{"no service", "c", "//Transfer", "k", "method"},
		{"bad service", "c", "/pay..Payments/Transfer", "k", "method"},
		{"extra slash", "c", "/pay.Payments/Trans/fer", "k", "method"},
		{"space", "c", "/pay.Payments/Trans fer", "k", "method"},
		{"lower-case HTTP method", "c", "post /transfers", "k", "method"},
		{"HTTP route without slash", "c", "POST transfers", "k", "method"},
		{"HTTP route with a space", "c", "POST /a b", "k", "method"},
		{"HTTP method alone", "c", "POST", "k", "method"},
		{"empty key", "c", method, "", "key"},
		{"long key", "c", method, long, "key"},
		{"control in key", "c", method, "secret\x01key", "key"},
		{"non-ascii key", "c", method, "sécret", "key"},
	}
	for _, tc := range bad {
		t.Run(tc.name, func(t *testing.T) {
			_, err := ledger.NewIdentity(tc.caller, tc.method, tc.key)
			field, _, ok := txledger.InputError(err)
			if !errors.Is(err, ledger.ErrInvalid) || !ok || field != tc.field {
				t.Fatalf("got %v, want an InputError on %s", err, tc.field)
			}
			if tc.key != "" && len(tc.key) > 3 && strings.Contains(err.Error(), tc.key) {
				t.Fatalf("error %q contains the key", err)
			}
		})
	}
	good := []struct{ caller, method, key string }{
		{"spiffe://prod/ns/pay/sa/api", method, "0a6f2c8e-3b1d-4e55-9c0f-7f1d2a3b4c5d"},
		{"租户", "/Svc/M", "k"},
		{strings.Repeat("c", 512), "/a.b.c.D_e/F1", strings.Repeat("~", 255)},
		{"header:alice", "POST /transfers", "k"},
		{"header:alice", "PATCH /orders/{id}/items/{rest...}", "k"},
	}
	for _, g := range good {
		if _, err := ledger.NewIdentity(g.caller, g.method, g.key); err != nil {
			t.Errorf("NewIdentity(%q, %q, …): %v", g.caller, g.method, err)
		}
	}
}

func TestIdentityPartsAreSeparated(t *testing.T) {
	// Moving bytes between parts must change the identity.
	a := testdb.ID(t, "ab", "/c.D/E", "k")
	b := testdb.ID(t, "a", "/c.D/E", "k")
	c := testdb.ID(t, "ab", "/c.D/E", "k2")
	d := testdb.ID(t, "ab", "/c.D/F", "k")
	h := testdb.ID(t, "ab", "POST /c/{d}", "k")
	ids := map[[32]byte]bool{a.ID(): true, b.ID(): true, c.ID(): true, d.ID(): true, h.ID(): true}
	if len(ids) != 5 {
		t.Fatal("distinct triples share an id")
	}
	if a.ID() != testdb.ID(t, "ab", "/c.D/E", "k").ID() {
		t.Fatal("identity is not deterministic")
	}
	if strings.Contains(a.String(), "k ") || a.Caller() != "ab" || a.Method() != "/c.D/E" {
		t.Fatalf("accessors: %q", a.String())
	}
	var zero ledger.Identity
	if !zero.IsZero() || zero.String() == "" {
		t.Fatal("zero identity")
	}
}

func FuzzNewIdentity(f *testing.F) {
	f.Add("tenant", "/pkg.Svc/Method", "key-1")
	f.Add("", "/", "")
	f.Add("a\x00", "//x", "\x7f")
	f.Add("spiffe://x", "/a.b/c/d", strings.Repeat("z", 300))
	f.Add("header:alice", "POST /orders/{id}", "8e03978e-40d5-43e8-bc93-6894a57f9324")
	f.Add("c", "post /x", "k")
	f.Add("c", "POST /a b", "k")
	f.Fuzz(func(t *testing.T, caller, method, key string) {
		id, err := ledger.NewIdentity(caller, method, key)
		if err != nil {
			if !errors.Is(err, ledger.ErrInvalid) {
				t.Fatalf("error does not wrap ErrInvalid: %v", err)
			}
			if len(key) >= 8 && strings.Contains(err.Error(), key) {
				t.Fatalf("error contains the key: %v", err)
			}
			return
		}
		if id.IsZero() || id.Caller() != caller || id.Method() != method {
			t.Fatalf("accepted identity lost a part: %v", id)
		}
		if err := txledger.CheckMethod(method); err != nil {
			t.Fatalf("accepted method fails CheckMethod: %v", err)
		}
		// Either form, never both: a gRPC name starts with "/", an HTTP
		// route with a capital letter, a space and "/".
		verb, route, isHTTP := strings.Cut(method, " ")
		if isHTTP == strings.HasPrefix(method, "/") || isHTTP && (verb == "" || verb[0] < 'A' || verb[0] > 'Z' || !strings.HasPrefix(route, "/")) {
			t.Fatalf("accepted method %q is neither form", method)
		}
		// String is the caller, the method and a prefix of the id: nothing
		// of the key (which may also be a substring of the method: the
		// form is checked, not the key's absence).
		idb := id.ID()
		if want := caller + " " + method + " " + hex.EncodeToString(idb[:6]); id.String() != want {
			t.Fatalf("String %q, want %q", id.String(), want)
		}
	})
}
