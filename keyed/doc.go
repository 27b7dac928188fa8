// Package keyed is what a user of the kit names whatever the transport:
// a fresh key with [NewKey], a keyed call's key for the calls it makes
// with [DownstreamKey], the transactions of a server with [SQL], and the
// one classification of what a keyed call can end with ([Outcome]).
//
// Each [Outcome] has a stable name (its String: the opledger.outcome of
// the metrics, the end of the HTTP problem type), an ErrorInfo reason,
// what it says about the key's operation ([Committed]) and what the
// caller may do next ([Next]: stop, retry, resolve). grpcint, connectint
// and httpint render every outcome (gRPC codes and ErrorInfo; HTTP
// statuses, problem types and Retry-After; connect codes and ErrorInfo
// details), and their CallInfo, metrics, logs and documents use its names.
//
// The package imports neither grpc-go nor net/http nor connect-go: the
// transports import it. Its client options take policy's retry owner,
// budget and backoff, and policy names gRPC status codes, so grpc-go's
// codes package is all of grpc-go it links. See
// docs/adr/0003-keyed-call-core.md.
package keyed
