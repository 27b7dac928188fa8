package policy_test

import (
	"fmt"

	"google.golang.org/grpc/codes"

	"github.com/opledger/opledger/policy"
)

// Generate the service config for a channel whose retries the service
// config owns, and check another config against the catalog.
func Example() {
	cat, err := policy.NewCatalog(
		policy.MethodPolicy{FullMethod: "/shop.v1.Orders/Get", Kind: policy.KindNoSideEffects},
		policy.MethodPolicy{FullMethod: "/shop.v1.Orders/Create", Kind: policy.KindKeyed, DurableLedger: true},
		policy.MethodPolicy{FullMethod: "/shop.v1.Orders/Upload", Kind: policy.KindNonIdempotent, Shape: policy.ShapeClientStream},
	)
	if err != nil {
		panic(err)
	}
	sc, err := policy.GenerateServiceConfig(cat, policy.OwnerServiceConfig, policy.RetrySettings{})
	if err != nil {
		panic(err)
	}
	js, _ := sc.JSON()
	fmt.Println(js) // pass to grpc.WithDefaultServiceConfig

	findings, _ := policy.Validate([]byte(`{"methodConfig":[{"name":[{"service":"shop.v1.Orders"}],
		"retryPolicy":{"maxAttempts":3,"initialBackoff":"0.1s","maxBackoff":"1s","backoffMultiplier":2,"retryableStatusCodes":["UNAVAILABLE"]}}]}`),
		cat, policy.OwnerServiceConfig)
	for _, f := range findings {
		fmt.Println(f.Kind, f.Name, f.Method)
	}
	// Output:
	// {"methodConfig":[{"name":[{"service":"shop.v1.Orders","method":"Get"}],"retryPolicy":{"maxAttempts":3,"initialBackoff":"0.1s","maxBackoff":"1s","backoffMultiplier":2,"retryableStatusCodes":["UNAVAILABLE"]}}],"retryThrottling":{"maxTokens":10,"tokenRatio":0.1}}
	// retry-non-idempotent /shop.v1.Orders/ /shop.v1.Orders/Upload
}

// Decide what to do after a keyed mutation's attempt timed out.
func ExampleEligible() {
	create := policy.MethodPolicy{FullMethod: "/shop.v1.Orders/Create", Kind: policy.KindKeyed, DurableLedger: true}
	fmt.Println(policy.Eligible(create, policy.Evidence{Sent: true, HasKey: true}, codes.DeadlineExceeded))
	fmt.Println(policy.Eligible(create, policy.Evidence{Sent: false, HasKey: true}, codes.Unavailable))
	fmt.Println(policy.Eligible(create, policy.Evidence{Sent: true}, codes.Unavailable))
	// Output:
	// resolve-first (may-have-run)
	// retry (not-executed)
	// do-not-retry (no-key)
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
