package mesh

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/opledger/opledger/policy"
)

// testCatalog is shop.v1.Orders: Get (no side effects), Put (idempotent),
// Create (non-idempotent), Pay (keyed, with a ledger), Refund (keyed,
// without one).
func testCatalog(t testing.TB) *policy.Catalog {
	t.Helper()
	cat, err := policy.NewCatalog(
		policy.MethodPolicy{FullMethod: "/shop.v1.Orders/Get", Kind: policy.KindNoSideEffects},
		policy.MethodPolicy{FullMethod: "/shop.v1.Orders/Put", Kind: policy.KindIdempotent},
		policy.MethodPolicy{FullMethod: "/shop.v1.Orders/Create", Kind: policy.KindNonIdempotent},
		policy.MethodPolicy{FullMethod: "/shop.v1.Orders/Pay", Kind: policy.KindKeyed, DurableLedger: true},
		policy.MethodPolicy{FullMethod: "/shop.v1.Orders/Refund", Kind: policy.KindKeyed},
	)
	if err != nil {
		t.Fatal(err)
	}
	return cat
}

// load reads testdata files into a Config; a name starting with "xds:" is
// read with AddXDS.
func load(t testing.TB, names ...string) *Config {
	t.Helper()
	var c Config
	for _, n := range names {
		xds := strings.HasPrefix(n, "xds:")
		n = strings.TrimPrefix(n, "xds:")
		data, err := os.ReadFile(filepath.Join("testdata", n))
		if err != nil {
			t.Fatal(err)
		}
		if xds {
			c.AddXDS(n, data)
		} else {
			c.AddMesh(n, data)
		}
	}
	return &c
}

func check(t testing.TB, c *Config, opts Options) *Report {
	t.Helper()
	rep, err := Check(c, testCatalog(t), opts)
	if err != nil {
		t.Fatal(err)
	}
	return rep
}

// key is what the tests compare a finding by.
func key(f Finding) string {
	s := string(f.Kind)
	if f.Method != "" {
		s += " " + f.Method
	}
	if f.Layer != "" {
		s += " @" + string(f.Layer)
	}
	return s
}

func keys(fs []Finding) []string {
	out := make([]string, len(fs))
	for i, f := range fs {
		out[i] = key(f)
	}
	return out
}

// attempts returns a method's attempts per layer, and its amplification.
func attempts(rep *Report, method string) map[Layer]string {
	for _, m := range rep.Methods {
		if m.Method == method {
			out := map[Layer]string{"total": m.Amplification.String()}
			for _, l := range m.Layers {
				out[l.Layer] = l.Attempts.String()
			}
			return out
		}
	}
	return nil
}
