package policy_test

import (
	"fmt"

	"google.golang.org/grpc/codes"

	"github.com/opledger/opledger/policy"
)

// Look a method up in the catalog and decide what to do after an attempt
// failed. The service config of a channel is generated and checked by the
// policy/serviceconfig package.
func Example() {
	cat, err := policy.NewCatalog(
		policy.MethodPolicy{FullMethod: "/shop.v1.Orders/Get", Kind: policy.KindNoSideEffects},
		policy.MethodPolicy{FullMethod: "/shop.v1.Orders/Create", Kind: policy.KindKeyed, DurableLedger: true},
		policy.MethodPolicy{FullMethod: "/shop.v1.Orders/Upload", Kind: policy.KindNonIdempotent, Shape: policy.ShapeClientStream},
	)
	if err != nil {
		panic(err)
	}
	sent := policy.Evidence{Sent: true, HasKey: true}
	for _, m := range []string{"/shop.v1.Orders/Get", "/shop.v1.Orders/Create", "/shop.v1.Orders/Upload"} {
		p, _ := cat.Lookup(m)
		fmt.Println(p.Method(), policy.Eligible(p, sent, codes.Unavailable))
	}
	// Output:
	// Get retry (idempotent)
	// Create resolve-first (may-have-run)
	// Upload do-not-retry (non-idempotent)
}

// Decide what to do after a keyed mutation's attempt timed out.
func ExampleEligible() {
	create := policy.MethodPolicy{FullMethod: "/shop.v1.Orders/Create", Kind: policy.KindKeyed, DurableLedger: true}
	fmt.Println(policy.Eligible(create, policy.Evidence{Sent: true, HasKey: true}, codes.DeadlineExceeded))
	fmt.Println(policy.Eligible(create, policy.Evidence{Sent: false, HasKey: true}, codes.Unavailable))
	fmt.Println(policy.Eligible(create, policy.Evidence{Sent: true}, codes.Unavailable))
	// A unary call whose response headers arrived without the message:
	// the server committed and the answer was lost, so resolve.
	fmt.Println(policy.Eligible(create, policy.Evidence{HeadersReceived: true, HasKey: true}, codes.Unavailable))
	// Output:
	// resolve-first (may-have-run)
	// retry (not-executed)
	// do-not-retry (no-key)
	// resolve-first (may-have-run)
}

// A budget funded by requests: Deposit per call, TryWithdraw per retry.
func ExampleBudget() {
	b, err := policy.NewBudget(policy.BudgetSettings{Percent: 0.1, NoMinRetries: true})
	if err != nil {
		panic(err)
	}
	for i := 0; i < 50; i++ {
		b.Deposit()
	}
	retries := 0
	for b.TryWithdraw() {
		retries++
	}
	fmt.Println(retries)
	// Output: 5
}
