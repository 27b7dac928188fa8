package grpcint_test

import (
	"fmt"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/opledger/opledger/examples/payments/paymentspb"
	"github.com/opledger/opledger/grpcint"
)

// The request fingerprint depends only on the message's content, not on
// how it was built.
func ExampleRequestFingerprint() {
	a := &paymentspb.TransferRequest{FromAccount: "a", ToAccount: "b", AmountCents: 100}
	b := &paymentspb.TransferRequest{AmountCents: 100, ToAccount: "b", FromAccount: "a"}
	c := &paymentspb.TransferRequest{FromAccount: "a", ToAccount: "b", AmountCents: 101}
	fa, _ := grpcint.RequestFingerprint(a)
	fb, _ := grpcint.RequestFingerprint(b)
	fc, _ := grpcint.RequestFingerprint(c)
	fmt.Println(fa == fb, fa == fc)
	_, err := grpcint.RequestFingerprint("not a message")
	fmt.Println(err != nil)
	// Output:
	// true false
	// true
}

// A client reads the kit's stable reason to decide what to do.
func ExampleReasonOf() {
	err := status.Error(codes.Internal, "no details") // not from the kit
	fmt.Printf("%q\n", grpcint.ReasonOf(err))
	// A status from the server interceptor carries an ErrorInfo:
	// ReasonOf(err) == grpcint.ReasonKeyReused means "use a new key".

	// Output:
	// ""
}
