package mesh_test

import (
	"fmt"
	"log"

	"github.com/opledger/opledger/policy"
	"github.com/opledger/opledger/policy/mesh"
)

// An Istio mesh in which nobody configured retries, on a channel whose
// retry owner is the application: Istio's default retries every method
// twice, so a read the application retries up to 5 times becomes 15
// requests, and the non-idempotent Create is retried on conditions under
// which it may have run.
func ExampleCheck() {
	cat, err := policy.NewCatalog(
		policy.MethodPolicy{FullMethod: "/shop.v1.Orders/Get", Kind: policy.KindNoSideEffects},
		policy.MethodPolicy{FullMethod: "/shop.v1.Orders/Create"}, // non-idempotent
	)
	if err != nil {
		log.Fatal(err)
	}
	var cfg mesh.Config
	cfg.AddMesh("istio.yaml", []byte(`
apiVersion: networking.istio.io/v1
kind: DestinationRule
metadata: {name: orders, namespace: shop}
spec:
  host: orders
`))
	rep, err := mesh.Check(&cfg, cat, mesh.Options{Owner: policy.OwnerApplication})
	if err != nil {
		log.Fatal(err)
	}
	for _, f := range rep.Findings {
		fmt.Println(f.Kind, f.Method, f.Conditions)
	}
	for _, m := range rep.Methods {
		fmt.Println(m.Method, "becomes", m.Amplification, "requests")
	}
	// Output:
	// second-owner /shop.v1.Orders/Create [connect-failure refused-stream unavailable cancelled]
	// retry-non-idempotent /shop.v1.Orders/Create [unavailable cancelled]
	// no-budget /shop.v1.Orders/Create []
	// second-owner /shop.v1.Orders/Get [connect-failure refused-stream unavailable cancelled]
	// no-budget /shop.v1.Orders/Get []
	// /shop.v1.Orders/Create becomes 3 requests
	// /shop.v1.Orders/Get becomes 15 requests
}

// The mesh side for a channel whose retry owner is the mesh: Istio retries
// the read, the non-idempotent Create and any method not in the catalog not
// at all, under a retry budget.
func ExampleGenerateIstio() {
	cat, err := policy.NewCatalog(
		policy.MethodPolicy{FullMethod: "/shop.v1.Orders/Get", Kind: policy.KindNoSideEffects},
		policy.MethodPolicy{FullMethod: "/shop.v1.Orders/Create"},
	)
	if err != nil {
		log.Fatal(err)
	}
	yaml, err := mesh.GenerateIstio(cat, mesh.GenerateOptions{Host: "orders.shop"})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Print(string(yaml))
	// Output:
	// # Istio retries for orders.shop.svc.cluster.local, whose channels' retry owner is the mesh (opledger policy generate --mesh istio).
	// # Only the retryable methods retry; every other route sets attempts: 0, which switches off Istio's default.
	// apiVersion: networking.istio.io/v1
	// kind: VirtualService
	// metadata:
	//   name: orders
	//   namespace: shop
	// spec:
	//   hosts:
	//   - orders.shop.svc.cluster.local
	//   http:
	//   - match:
	//     - uri:
	//         exact: /shop.v1.Orders/Create
	//     name: shop-v1-orders-create
	//     retries:
	//       attempts: 0
	//     route:
	//     - destination:
	//         host: orders.shop.svc.cluster.local
	//   - match:
	//     - uri:
	//         exact: /shop.v1.Orders/Get
	//     name: shop-v1-orders-get
	//     retries:
	//       attempts: 2
	//       retryOn: connect-failure,refused-stream,unavailable
	//     route:
	//     - destination:
	//         host: orders.shop.svc.cluster.local
	//   - name: not-in-the-catalog
	//     retries:
	//       attempts: 0
	//     route:
	//     - destination:
	//         host: orders.shop.svc.cluster.local
	// ---
	// apiVersion: networking.istio.io/v1
	// kind: DestinationRule
	// metadata:
	//   name: orders-retry-budget
	//   namespace: shop
	// spec:
	//   host: orders.shop.svc.cluster.local
	//   trafficPolicy:
	//     retryBudget:
	//       minRetryConcurrency: 3
	//       percent: 10
}
