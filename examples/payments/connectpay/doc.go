// Package connectpay serves and calls the example payments service
// (package payments) over connect-go (connectrpc.com/connect), through
// package connectint: the Transfer procedure behind the kit's server
// interceptor, on the Connect protocol over HTTP/1.1 and on the gRPC
// protocol over h2c from one net/http server, and called through a
// connect client whose retries the kit's client interceptor owns.
//
// NewHandler is what protoc-gen-connect-go would generate for the
// Payments service, written by hand (as paymentspb's gRPC stubs are) so
// that building needs no protoc. Authenticate and ServerFaults are the
// connect fronts of payments.Tokens and payments.Faults; NewClient the
// example's client on both protocols; Wire runs payments.Scenario over
// it (opledger demo --transport connect).
//
// The package is separate from payments so that the example's gRPC-only
// users never link connect-go.
package connectpay
