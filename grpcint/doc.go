// Package grpcint joins the operation ledger and the retry policy to
// gRPC: a mutation retried by anyone, any number of times, takes effect
// once. Create the server side with [NewServer] (or [NewServerFor] for a
// transaction API other than database/sql) and the client side with
// [NewClient]; both take package keyed's options (keyed.WithLockWait,
// keyed.WithMaxAttempts, …) with this package's own ([WithTarget],
// [WithServiceConfigJSON], [WithRetrySettings]) in one list.
//
// Server side, a [Server] (its [Server.UnaryServerInterceptor]) runs each
// keyed unary method's handler inside one transaction with its ledger
// claim (package txmiddleware); the handler writes through the
// transaction it finds with txmiddleware.TxFromContext (with
// NewServerFor, the transaction API's own function, such as
// pgxledger.TxFromContext). The key comes from the
// idempotency-key header or, without one, from the request's AIP-155
// request_id field, the caller from a CallerFunc (an mTLS
// certificate, an authenticated principal, or a header set by a trusted
// gateway), the request fingerprint from the deterministic protobuf
// encoding. A retry replays the stored response or final error, marked
// with the trailer idempotency-replayed: true; a resolve request
// (idempotency-resolve: 1 or true; any other value is refused) returns the stored outcome, NOT_FOUND or
// ABORTED without running the handler. Every refusal has a distinct code
// and an ErrorInfo detail with a stable reason ([ReasonOf]), the reason
// of one of package keyed's outcomes.
//
// Client side, a [Client] gives a channel exactly one retry owner
// ([Client.DialOptions]): for policy.OwnerApplication the kit's retrying
// interceptor with policy eligibility, a retry budget, backoff with server
// pushback, resolve-before-retry for keyed calls whose outcome is unknown,
// and a stats.Handler that tells each attempt whether its request went
// out and whether response headers came back; for
// policy.OwnerServiceConfig the generated service config; for the mesh
// and nobody, retries off. Each logical call of a keyed method carries one
// key on every attempt, in the request's AIP-155 request_id too when its
// message has an empty one (filled in a copy of the request).
//
// A keyed handler that calls another service gives the call a key derived
// from its own operation (keyed.DownstreamKey, or the client option
// keyed.WithDownstreamKeys): the same on every retry, so a chain of keyed
// services behaves as one; see docs/beyond-the-transaction.md.
//
// The package keeps no global state and logs nothing. The raw key never
// appears in an error, a status message or the ledger. See docs/grpc.md.
package grpcint
