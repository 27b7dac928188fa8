package keyed_test

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/opledger/opledger/keyed"
)

func TestParseDeclaration(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		in   string
		want keyed.Declaration
		err  bool
	}{
		{in: "application", want: keyed.Declaration{Owner: keyed.OwnerApplication}},
		{in: " Service-Config ", want: keyed.Declaration{Owner: keyed.OwnerServiceConfig}},
		{in: "mesh;xds", want: keyed.Declaration{Owner: keyed.OwnerMesh, XDS: true}},
		{in: "mesh; xds=?1", want: keyed.Declaration{Owner: keyed.OwnerMesh, XDS: true}},
		{in: "mesh;xds=?0", want: keyed.Declaration{Owner: keyed.OwnerMesh}},
		{in: "none;later=1;xds", want: keyed.Declaration{Owner: keyed.OwnerNone, XDS: true}},
		{in: "application;later", want: keyed.Declaration{Owner: keyed.OwnerApplication}},
		{in: "", err: true},
		{in: "app", err: true}, // policy's alias is not a header value
		{in: "mesh;", err: true},
		{in: "mesh;XDS", err: true},
		{in: "mesh;xds=1", err: true},
		{in: "mesh,application", err: true},
		{in: "mesh;" + strings.Repeat("a", 200), err: true},
	} {
		got, err := keyed.ParseDeclaration(tc.in)
		switch {
		case tc.err && !errors.Is(err, keyed.ErrRetryHeader):
			t.Errorf("ParseDeclaration(%q) = %+v, %v; want an ErrRetryHeader", tc.in, got, err)
		case !tc.err && (err != nil || got != tc.want):
			t.Errorf("ParseDeclaration(%q) = %+v, %v; want %+v", tc.in, got, err, tc.want)
		}
		if err == nil {
			if back, err := keyed.ParseDeclaration(got.String()); err != nil || back != got {
				t.Errorf("%+v: String %q parses as %+v, %v", got, got.String(), back, err)
			}
		}
	}
}

func TestParseAttemptCount(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]int{"0": 0, "1": 1, " 3 ": 3, "007": 7, "1048576": 1 << 20} {
		if got, err := keyed.ParseAttemptCount(in); err != nil || got != want {
			t.Errorf("ParseAttemptCount(%q) = %d, %v; want %d", in, got, err, want)
		}
	}
	for _, in := range []string{"", " ", "-1", "+1", "1.0", "0x10", "1048577", "99999999999", "1 2", "２"} {
		if got, err := keyed.ParseAttemptCount(in); !errors.Is(err, keyed.ErrRetryHeader) {
			t.Errorf("ParseAttemptCount(%q) = %d, %v; want an ErrRetryHeader", in, got, err)
		}
	}
}

// judged renders a judgement as "owner/from layer:attempt[!] …" (! for a
// second owner).
func judged(j keyed.RetryJudgement) string {
	s := fmt.Sprintf("%s/%s", j.Owner, j.From)
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
		h          keyed.RetryHeaders
		configured keyed.Owner
		safe       bool
		want       string
	}{
		{"first attempt everywhere", keyed.RetryHeaders{Owner: vals("application"), Attempt: vals("1"), EnvoyAttempt: vals("1")}, "", true,
			"application/declared"},
		{"the application's own retry", keyed.RetryHeaders{Owner: vals("application"), Attempt: vals("3")}, "", true,
			"application/declared application:3"},
		{"grpc-go's retry under the application", keyed.RetryHeaders{Owner: vals("application"), Attempt: vals("1"), PreviousAttempts: vals("2")}, "", true,
			"application/declared service-config:3!"},
		{"the service config's own", keyed.RetryHeaders{Owner: vals("service-config"), PreviousAttempts: vals("1")}, "", true,
			"service-config/declared service-config:2"},
		{"the mesh under the service config", keyed.RetryHeaders{Owner: vals("service-config"), EnvoyAttempt: vals("2")}, "", true,
			"service-config/declared mesh:2!"},
		{"the mesh's own", keyed.RetryHeaders{Owner: vals("mesh"), EnvoyAttempt: vals("3")}, "", false,
			"mesh/declared mesh:3"},
		{"proxyless xDS retries are the mesh's", keyed.RetryHeaders{Owner: vals("mesh;xds"), PreviousAttempts: vals("1")}, "", true,
			"mesh/declared/xds mesh:2"},
		{"xDS under the application", keyed.RetryHeaders{Owner: vals("application;xds"), Attempt: vals("1"), PreviousAttempts: vals("3")}, "", true,
			"application/declared/xds mesh:4!"},
		{"xDS and a sidecar", keyed.RetryHeaders{Owner: vals("mesh;xds"), PreviousAttempts: vals("1"), EnvoyAttempt: vals("2")}, "", true,
			"mesh/declared/xds mesh:2 mesh:2!"},
		{"anything under none", keyed.RetryHeaders{Owner: vals("none"), Attempt: vals("2"), EnvoyAttempt: vals("2")}, "", true,
			"none/declared application:2! mesh:2!"},
		{"the declaration wins over the server's", keyed.RetryHeaders{Owner: vals("mesh"), EnvoyAttempt: vals("2")}, keyed.OwnerApplication, true,
			"mesh/declared mesh:2"},
		{"the server's owner", keyed.RetryHeaders{EnvoyAttempt: vals("2")}, keyed.OwnerApplication, true,
			"application/server mesh:2!"},
		{"an unreadable declaration is none", keyed.RetryHeaders{Owner: vals("mesh", "bogus"), EnvoyAttempt: vals("2")}, keyed.OwnerServiceConfig, true,
			"service-config/server mesh:2!"},
		{"the last value counts", keyed.RetryHeaders{Owner: vals("none", "mesh"), EnvoyAttempt: vals("5", "1")}, "", true,
			"mesh/declared"},
		{"the catalog: one layer, a safe method", keyed.RetryHeaders{EnvoyAttempt: vals("2")}, "", true,
			"/catalog mesh:2"},
		{"the catalog: an unsafe method", keyed.RetryHeaders{PreviousAttempts: vals("1")}, "", false,
			"/catalog service-config:2!"},
		{"the catalog: two layers", keyed.RetryHeaders{Attempt: vals("2"), EnvoyAttempt: vals("2")}, "", true,
			"/catalog application:2! mesh:2!"},
		{"unreadable counts are absent", keyed.RetryHeaders{Owner: vals("none"), Attempt: vals("two"), PreviousAttempts: vals("-1")}, "", true,
			"none/declared"},
	} {
		if got := judged(keyed.JudgeRetries(tc.h, tc.configured, tc.safe)); got != tc.want {
			t.Errorf("%s: %s, want %s", tc.name, got, tc.want)
		}
	}
}
