package connectpay_test

import (
	"slices"
	"testing"

	"github.com/opledger/opledger/connectint"
	"github.com/opledger/opledger/examples/payments"
	"github.com/opledger/opledger/examples/payments/paymentspb"
)

// TestCatalogFromSpecs: connect's Specs of the example's services, read by
// connectint, give the catalog payments.Catalog reads from payments.proto's
// descriptors, where (opledger.v1.keyed) declares the keyed methods.
func TestCatalogFromSpecs(t *testing.T) {
	t.Parallel()
	want, err := payments.Catalog()
	if err != nil {
		t.Fatal(err)
	}
	svcs := paymentspb.File_payments_proto.Services()
	fromSpecs, err := connectint.CatalogFromSpecs(append(connectint.ServiceSpecs(svcs.ByName("Payments")),
		connectint.ServiceSpecs(svcs.ByName("Fraud"))...)...)
	if err != nil {
		t.Fatal(err)
	}
	if got := fromSpecs.Methods(); !slices.Equal(got, want.Methods()) {
		t.Errorf("catalog from connect Specs %+v\nwant %+v", got, want.Methods())
	}
}
