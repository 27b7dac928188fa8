package mesh

import (
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/opledger/opledger/policy"
)

// TestGeneratedXDS: the RouteConfiguration GenerateXDS writes, Check
// accepts for the owner mesh on the xds:/// channel: no finding, the
// retryable methods make 2 attempts (one retry: the bound a proxyless
// channel has), the others 1; with more retries the same routes have no
// budget, and for the owner application they are a second owner.
func TestGeneratedXDS(t *testing.T) {
	t.Parallel()
	cat := testCatalog(t)
	js, err := GenerateXDS(cat, XDSOptions{Name: "orders", Cluster: "orders-cluster"})
	if err != nil {
		t.Fatal(err)
	}
	var c Config
	c.AddXDS("orders-routes.json", js)
	rep, err := Check(&c, cat, Options{Owner: policy.OwnerMesh, Target: "xds:///orders"})
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Findings) != 0 || !rep.XDS {
		t.Fatalf("findings %v (xds %v)\n%s", rep.Findings, rep.XDS, js)
	}
	for _, m := range []string{get, put, pay} {
		wantAttempts(t, rep, m, map[Layer]string{layerXDS: "2", "total": "2"})
	}
	for _, m := range []string{create, refund} {
		wantAttempts(t, rep, m, map[Layer]string{layerXDS: "1", "total": "1"})
	}
	for _, want := range []string{`"name": "orders"`, `"domains": [`, `"path": "/shop.v1.Orders/Pay"`, `"numRetries": 1`,
		`"retryOn": "unavailable"`, `"prefix": "/"`, `"cluster": "orders-cluster"`} {
		if !strings.Contains(string(js), want) {
			t.Errorf("no %s in\n%s", want, js)
		}
	}

	rep, err = Check(&c, cat, Options{Owner: policy.OwnerApplication, Target: "xds:///orders"})
	if err != nil {
		t.Fatal(err)
	}
	wantFindings(t, rep, "second-owner "+get+" @xds", "second-owner "+pay+" @xds", "second-owner "+put+" @xds")

	var more Config
	more.AddXDS("more.json", []byte(strings.ReplaceAll(string(js), `"numRetries": 1`, `"numRetries": 2`)))
	rep, err = Check(&more, cat, Options{Owner: policy.OwnerMesh, Target: "xds:///orders"})
	if err != nil {
		t.Fatal(err)
	}
	if got := keys(rep.Findings); !slices.Equal(got, []string{"no-budget " + get + " @xds", "no-budget " + pay + " @xds", "no-budget " + put + " @xds"}) {
		t.Errorf("two retries: findings %q", got)
	}

	for _, bad := range []XDSOptions{{}, {Name: "orders"}, {Cluster: "c"}, {Name: "or ders", Cluster: "c"}, {Name: "orders", Cluster: "c", RouteConfiguration: "a/b"}} {
		if _, err := GenerateXDS(cat, bad); !errors.Is(err, policy.ErrInvalidConfig) {
			t.Errorf("GenerateXDS(%+v): %v, want ErrInvalidConfig", bad, err)
		}
	}
}
