package payments_test

import (
	"slices"
	"testing"

	"github.com/opledger/opledger/examples/payments"
	"github.com/opledger/opledger/examples/payments/paymentspb"
	"github.com/opledger/opledger/policy"
)

// TestCatalogFromTheProto: the example's catalog comes from
// payments.proto alone, where (opledger.v1.keyed) declares Transfer and
// Fraud.Check keyed (connectpay's TestCatalogFromSpecs: connect's Specs of
// the same services give the same catalog).
func TestCatalogFromTheProto(t *testing.T) {
	t.Parallel()
	c, err := payments.Catalog()
	if err != nil {
		t.Fatal(err)
	}
	want := []policy.MethodPolicy{
		{FullMethod: paymentspb.FraudCheckMethod, Kind: policy.KindKeyed, DurableLedger: true},
		{FullMethod: "/opledger.examples.payments.v1.Payments/GetTransfer", Kind: policy.KindNoSideEffects},
		{FullMethod: paymentspb.TransferMethod, Kind: policy.KindKeyed, DurableLedger: true},
	}
	if got := c.Methods(); !slices.Equal(got, want) {
		t.Errorf("catalog %+v\nwant %+v", got, want)
	}
}
