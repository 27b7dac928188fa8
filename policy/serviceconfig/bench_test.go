package serviceconfig

import (
	"testing"

	"github.com/opledger/opledger/policy"
)

func BenchmarkValidate(b *testing.B) {
	c := testCatalog(b)
	js := []byte(`{"methodConfig":[{"name":[{"service":"shop.v1.Orders","method":"Get"},{"service":"shop.v1.Orders","method":"Put"}],` + goodRetry + `}],"retryThrottling":{"maxTokens":10,"tokenRatio":0.1}}`)
	b.ReportAllocs()
	for i := 0; i < b.N; i++ {
		if _, err := Validate(js, c, policy.OwnerServiceConfig); err != nil {
			b.Fatal(err)
		}
	}
}
