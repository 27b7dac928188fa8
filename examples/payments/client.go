package payments

import (
	"google.golang.org/grpc"

	"github.com/opledger/opledger/grpcint"
	"github.com/opledger/opledger/keyed"
	"github.com/opledger/opledger/policy"
)

// Dial is the example's client side: a channel to target whose retries
// belong to owner, with the kit's client (one idempotency key per
// logical Transfer, and for policy.OwnerApplication eligibility, budget,
// backoff and resolve). extra holds the transport credentials and any
// other dial options; they come after the kit's. Close the connection
// when done; read the counters with the returned Client's Stats.
func Dial(target string, owner policy.RetryOwner, kitOpts []keyed.ClientOption, extra ...grpc.DialOption) (*grpc.ClientConn, *grpcint.Client, error) {
	cat, err := Catalog()
	if err != nil {
		return nil, nil, err
	}
	client, err := grpcint.NewClient(cat, owner, kitOpts...)
	if err != nil {
		return nil, nil, err
	}
	opts, err := client.DialOptions()
	if err != nil {
		return nil, nil, err
	}
	conn, err := grpc.NewClient(target, append(opts, extra...)...)
	if err != nil {
		return nil, nil, err
	}
	return conn, client, nil
}
