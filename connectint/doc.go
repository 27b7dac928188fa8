// Package connectint is the kit for connect-go (connectrpc.com/connect v1):
// a rendering of package keyed's core for services and clients built on
// connect-go, which serves the Connect, gRPC and gRPC-Web protocols from
// plain net/http handlers and never retries on its own. Create the server
// side with [NewServer] (or [NewServerFor] for a transaction API other
// than database/sql) and the client side with [NewClient]; both take
// package keyed's options (keyed.WithLockWait, keyed.WithMaxAttempts, …).
//
// The server side ([Server], its [Server.Interceptor]) runs each keyed
// unary procedure of the method catalog inside one transaction with its
// ledger claim, replays the stored response to every retry with the same
// Idempotency-Key header (on every protocol), or, without the header, the
// same AIP-155 request_id in the request, answers resolve requests and
// renders every outcome as a connect.Code with an ErrorInfo detail.
//
// The client side ([Client], its [Client.Interceptor], which
// [Client.ClientOptions] installs on a connect client) owns the retries
// of a connect client: one key per logical call of a keyed procedure
// (filled into an empty AIP-155 request_id of a copy of the message),
// eligibility × evidence × status, a budget, backoff and the server's
// pushback, resolve before running a call whose outcome is unknown again,
// derived downstream keys, and a keyed.CallInfo on every error of a keyed
// call (the same retry loop as grpcint's client).
//
// A procedure served by connect-go and the gRPC method of the same name
// are one identity: its stored answers are in the protobuf forms
// grpcint stores, so a call made through grpc-go and retried through a connect
// client (or the other way round) replays, as long as both servers share
// the ledger and fingerprint the caller alike.
//
// The package is the only one of the kit that links connect-go; it imports
// neither grpcint nor httpint. See docs/connect.md.
package connectint
