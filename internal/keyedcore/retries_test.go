package keyedcore_test

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/opledger/opledger/internal/keyedcore"
	"github.com/opledger/opledger/policy"
)

func TestParseDeclaration(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		in   string
		want keyedcore.Declaration
		err  bool
	}{
		{in: "application", want: keyedcore.Declaration{Owner: policy.OwnerApplication}},
		{in: " Service-Config ", want: keyedcore.Declaration{Owner: policy.OwnerServiceConfig}},
		{in: "mesh;xds", want: keyedcore.Declaration{Owner: policy.OwnerMesh, XDS: true}},
		{in: "mesh; xds=?1", want: keyedcore.Declaration{Owner: policy.OwnerMesh, XDS: true}},
		{in: "mesh;xds=?0", want: keyedcore.Declaration{Owner: policy.OwnerMesh}},
		{in: "none;later=1;xds", want: keyedcore.Declaration{Owner: policy.OwnerNone, XDS: true}},
		{in: "application;later", want: keyedcore.Declaration{Owner: policy.OwnerApplication}},
		{in: "", err: true},
		{in: "app", err: true}, // policy's alias is not a header value
		{in: "mesh;", err: true},
		{in: "mesh;XDS", err: true},
		{in: "mesh;xds=1", err: true},
		{in: "mesh,application", err: true},
		{in: "mesh;" + strings.Repeat("a", 200), err: true},
	} {
		got, err := keyedcore.ParseDeclaration(tc.in)
		switch {
		case tc.err && !errors.Is(err, keyedcore.ErrRetryHeader):
			t.Errorf("ParseDeclaration(%q) = %+v, %v; want an ErrRetryHeader", tc.in, got, err)
		case !tc.err && (err != nil || got != tc.want):
			t.Errorf("ParseDeclaration(%q) = %+v, %v; want %+v", tc.in, got, err, tc.want)
		}
		if err == nil {
			if back, err := keyedcore.ParseDeclaration(got.String()); err != nil || back != got {
				t.Errorf("%+v: String %q parses as %+v, %v", got, got.String(), back, err)
			}
		}
	}
}

func TestParseAttemptCount(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]int{"0": 0, "1": 1, " 3 ": 3, "007": 7, "1048576": 1 << 20} {
		if got, err := keyedcore.ParseAttemptCount(in); err != nil || got != want {
			t.Errorf("ParseAttemptCount(%q) = %d, %v; want %d", in, got, err, want)
		}
	}
	for _, in := range []string{"", " ", "-1", "+1", "1.0", "0x10", "1048577", "99999999999", "1 2", "２"} {
		if got, err := keyedcore.ParseAttemptCount(in); !errors.Is(err, keyedcore.ErrRetryHeader) {
			t.Errorf("ParseAttemptCount(%q) = %d, %v; want an ErrRetryHeader", in, got, err)
		}
	}
}

// judged renders a judgement as "owner/from layer:attempt[!] …" (! for a
// second owner).
func judged(j keyedcore.RetryJudgement) string {
	owner := ""
	if j.Owner.Valid() {
		owner = j.Owner.String()
	}
	s := fmt.Sprintf("%s/%s", owner, j.From)
	if j.XDS {
		s += "/xds"
	}
	for _, r := range j.Retries {
		s += fmt.Sprintf(" %s:%d", r.Layer, r.Attempt)
		if r.SecondOwner {
			s += "!"
		}
	}
	return s
}

func TestJudgeRetries(t *testing.T) {
	t.Parallel()
	vals := func(v ...string) []string { return v }
	for _, tc := range []struct {
		name       string
		h          keyedcore.RetryHeaders
		configured policy.RetryOwner
		safe       bool
		want       string
	}{
		{"first attempt everywhere", keyedcore.RetryHeaders{Owner: vals("application"), Attempt: vals("1"), EnvoyAttempt: vals("1")}, 0, true,
			"application/declared"},
		{"the application's own retry", keyedcore.RetryHeaders{Owner: vals("application"), Attempt: vals("3")}, 0, true,
			"application/declared application:3"},
		{"grpc-go's retry under the application", keyedcore.RetryHeaders{Owner: vals("application"), Attempt: vals("1"), PreviousAttempts: vals("2")}, 0, true,
			"application/declared service-config:3!"},
		{"the service config's own", keyedcore.RetryHeaders{Owner: vals("service-config"), PreviousAttempts: vals("1")}, 0, true,
			"service-config/declared service-config:2"},
		{"the mesh under the service config", keyedcore.RetryHeaders{Owner: vals("service-config"), EnvoyAttempt: vals("2")}, 0, true,
			"service-config/declared mesh:2!"},
		{"the mesh's own", keyedcore.RetryHeaders{Owner: vals("mesh"), EnvoyAttempt: vals("3")}, 0, false,
			"mesh/declared mesh:3"},
		{"proxyless xDS retries are the mesh's", keyedcore.RetryHeaders{Owner: vals("mesh;xds"), PreviousAttempts: vals("1")}, 0, true,
			"mesh/declared/xds mesh:2"},
		{"xDS under the application", keyedcore.RetryHeaders{Owner: vals("application;xds"), Attempt: vals("1"), PreviousAttempts: vals("3")}, 0, true,
			"application/declared/xds mesh:4!"},
		{"xDS and a sidecar", keyedcore.RetryHeaders{Owner: vals("mesh;xds"), PreviousAttempts: vals("1"), EnvoyAttempt: vals("2")}, 0, true,
			"mesh/declared/xds mesh:2 mesh:2!"},
		{"anything under none", keyedcore.RetryHeaders{Owner: vals("none"), Attempt: vals("2"), EnvoyAttempt: vals("2")}, 0, true,
			"none/declared application:2! mesh:2!"},
		{"the declaration wins over the server's", keyedcore.RetryHeaders{Owner: vals("mesh"), EnvoyAttempt: vals("2")}, policy.OwnerApplication, true,
			"mesh/declared mesh:2"},
		{"the server's owner", keyedcore.RetryHeaders{EnvoyAttempt: vals("2")}, policy.OwnerApplication, true,
			"application/server mesh:2!"},
		{"an unreadable declaration is none", keyedcore.RetryHeaders{Owner: vals("mesh", "bogus"), EnvoyAttempt: vals("2")}, policy.OwnerServiceConfig, true,
			"service-config/server mesh:2!"},
		{"the last value counts", keyedcore.RetryHeaders{Owner: vals("none", "mesh"), EnvoyAttempt: vals("5", "1")}, 0, true,
			"mesh/declared"},
		{"the catalog: one layer, a safe method", keyedcore.RetryHeaders{EnvoyAttempt: vals("2")}, 0, true,
			"/catalog mesh:2"},
		{"the catalog: an unsafe method", keyedcore.RetryHeaders{PreviousAttempts: vals("1")}, 0, false,
			"/catalog service-config:2!"},
		{"the catalog: two layers", keyedcore.RetryHeaders{Attempt: vals("2"), EnvoyAttempt: vals("2")}, 0, true,
			"/catalog application:2! mesh:2!"},
		{"unreadable counts are absent", keyedcore.RetryHeaders{Owner: vals("none"), Attempt: vals("two"), PreviousAttempts: vals("-1")}, 0, true,
			"none/declared"},
	} {
		j := keyedcore.JudgeRetries(tc.h, tc.configured, tc.safe)
		if got := judged(j); got != tc.want {
			t.Errorf("%s: %s, want %s", tc.name, got, tc.want)
		}
		// The answer's header names each second owner's layer once, in
		// order.
		var second []string
		for _, f := range strings.Fields(tc.want)[1:] {
			if l, _, _ := strings.Cut(f, ":"); strings.HasSuffix(f, "!") && !slices.Contains(second, l) {
				second = append(second, l)
			}
		}
		if got := j.SecondOwners(); got != strings.Join(second, ", ") {
			t.Errorf("%s: SecondOwners %q, want %q", tc.name, got, strings.Join(second, ", "))
		}
	}
}
