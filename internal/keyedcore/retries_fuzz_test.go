package keyedcore_test

import (
	"errors"
	"testing"

	"github.com/opledger/opledger/internal/keyedcore"
	"github.com/opledger/opledger/policy"
)

// FuzzParseDeclaration: any opledger-retry-owner value parses to a valid
// owner whose String parses back to the same declaration, or fails with
// ErrRetryHeader; it never panics.
func FuzzParseDeclaration(f *testing.F) {
	for _, s := range []string{"application", "service-config", "mesh;xds", "none;xds=?0", "Mesh ; a=b ; xds", "mesh;", ";xds", "mesh;xds=\"x;y\""} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, v string) {
		d, err := keyedcore.ParseDeclaration(v)
		if err != nil {
			if !errors.Is(err, keyedcore.ErrRetryHeader) {
				t.Fatalf("%q: error %v is not an ErrRetryHeader", v, err)
			}
			return
		}
		if !d.Owner.Valid() {
			t.Fatalf("%q: owner %q", v, d.Owner)
		}
		if back, err := keyedcore.ParseDeclaration(d.String()); err != nil || back != d {
			t.Fatalf("%q: %+v prints %q, which parses as %+v, %v", v, d, d.String(), back, err)
		}
	})
}

// FuzzParseAttemptCount: any count header value parses to a number in
// [0, 2^20] or fails with ErrRetryHeader; JudgeRetries on it never panics
// and marks only retried layers.
func FuzzParseAttemptCount(f *testing.F) {
	for _, s := range []string{"0", "1", "2", " 7 ", "1048576", "1048577", "-1", "1e3", ""} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, v string) {
		n, err := keyedcore.ParseAttemptCount(v)
		switch {
		case err != nil && !errors.Is(err, keyedcore.ErrRetryHeader):
			t.Fatalf("%q: error %v is not an ErrRetryHeader", v, err)
		case err == nil && (n < 0 || n > 1<<20):
			t.Fatalf("%q: %d out of range", v, n)
		}
		j := keyedcore.JudgeRetries(keyedcore.RetryHeaders{Owner: []string{v}, Attempt: []string{v}, EnvoyAttempt: []string{v}, PreviousAttempts: []string{v}}, policy.OwnerMesh, true)
		for _, r := range j.Retries {
			if r.Attempt < 2 {
				t.Fatalf("%q: %+v is not a retry", v, r)
			}
		}
	})
}
