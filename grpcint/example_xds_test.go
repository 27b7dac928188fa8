package grpcint_test

import (
	"errors"
	"fmt"
	"log"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/opledger/opledger/grpcint"
	"github.com/opledger/opledger/internal/testkit/wallet"
	"github.com/opledger/opledger/policy"
)

// A proxyless channel (xds:///) whose retries belong to the mesh, that is,
// to the control plane's retry policy: with WithTarget, DialOptions leave
// grpc-go's retries on for it (without it they are off, as for the other
// owners). The application imports google.golang.org/grpc/xds to register
// the xds resolver. The owner service-config cannot work on such a
// channel: the xDS resolver replaces its service config.
func ExampleWithTarget() {
	cat, err := wallet.Catalog()
	if err != nil {
		log.Fatal(err)
	}
	client, err := grpcint.NewClient(cat, policy.OwnerMesh, grpcint.WithTarget("xds:///wallet"))
	if err != nil {
		log.Fatal(err)
	}
	opts, err := client.DialOptions() // no grpc.WithDisableRetry: the control plane's retry policy is the mesh's
	if err != nil {
		log.Fatal(err)
	}
	conn, err := grpc.NewClient("xds:///wallet", append(opts, grpc.WithTransportCredentials(insecure.NewCredentials()))...)
	if err != nil {
		log.Fatal(err)
	}
	defer conn.Close()

	_, err = grpcint.NewClient(cat, policy.OwnerServiceConfig, grpcint.WithTarget("xds:///wallet"))
	fmt.Println("service-config on xds:", errors.Is(err, grpcint.ErrInvalidConfig))
	// Output:
	// service-config on xds: true
}
