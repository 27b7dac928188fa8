package mesh

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/opledger/opledger/policy"
)

// fuzzSeeds adds every sample file and a few fragments.
func fuzzSeeds(f *testing.F, xds bool) {
	files, err := filepath.Glob(filepath.Join("testdata", "*"))
	if err != nil {
		f.Fatal(err)
	}
	for _, p := range files {
		if b, err := os.ReadFile(p); err == nil && (strings.HasPrefix(filepath.Base(p), "xds-") == xds || !xds) {
			f.Add(b)
		}
	}
	for _, s := range []string{"", "---", "{}", "[]", "null", "- a\n- b", "@type: x", "apiVersion: v1\nkind: List\nitems: [[], {}]",
		`{"virtual_hosts":[{"routes":[{"match":{"safe_regex":{"regex":"("}}}]}]}`, "a: &a [*a, *a]", "\xff\xfe"} {
		f.Add([]byte(s))
	}
}

// fuzzCheck reads data and checks it against the test catalog with every
// owner; nothing may panic, every finding must be on one line.
func fuzzCheck(t *testing.T, data []byte, xds bool) {
	var c Config
	if xds {
		c.AddXDS("fuzz", data)
	} else {
		c.AddMesh("fuzz", data)
	}
	cat := testCatalog(t)
	for _, owner := range []policy.RetryOwner{policy.OwnerApplication, policy.OwnerServiceConfig, policy.OwnerMesh, policy.OwnerNone} {
		rep, err := Check(&c, cat, Options{Owner: owner, Target: "xds:///orders"})
		if err != nil {
			t.Fatal(err)
		}
		for _, f := range rep.Findings {
			if s := f.String(); strings.ContainsAny(s, "\n\r") {
				t.Fatalf("finding spans lines: %q", s)
			}
		}
		if len(rep.Methods) != cat.Len() {
			t.Fatalf("%d method reports for %d methods", len(rep.Methods), cat.Len())
		}
	}
}

func FuzzAddMesh(f *testing.F) {
	fuzzSeeds(f, false)
	f.Fuzz(func(t *testing.T, data []byte) { fuzzCheck(t, data, false) })
}

func FuzzAddXDS(f *testing.F) {
	fuzzSeeds(f, true)
	f.Fuzz(func(t *testing.T, data []byte) { fuzzCheck(t, data, true) })
}
