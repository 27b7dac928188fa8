// Package keyed is the transport-neutral core of a keyed call: what grpcint,
// httpint and connect-go's interceptors share, written once.
//
// It owns:
//
//   - the one classification of what a keyed call can end with ([Outcome],
//     [Outcomes]): each outcome's stable name, its ErrorInfo reason, what it
//     says about the key's operation ([Committed]) and what the caller may do
//     next ([Next]: stop, retry, resolve). The transports render it (gRPC codes
//     and ErrorInfo; HTTP statuses, problem types and Retry-After; connect
//     codes and ErrorInfo details), and their metrics, logs, CallInfo and
//     documents use its names;
//   - the server side of a call ([Server], [Call]): the identity from caller,
//     method and key, the run in the ledger's transaction in either claim
//     order with the wait bound, the resolve, and the classification of every
//     error into an outcome, counted and recorded (spans, metrics, log
//     events) the same way for every transport;
//   - the seam through which a transport gets its transaction runners
//     ([Transactions], [Runner]): database/sql's is [SQL]; another
//     transaction API plugs in once, there, for every transport;
//   - the run-time judgement of who retried a request ([JudgeRetries],
//     [Server.Retries]): the transports read the retry headers (the
//     owner a client declares, the kit's attempt number, Envoy's attempt
//     count, grpc-go's previous attempts) as plain strings, and the core
//     reports a layer that is not the channel's owner.
//
// A transport reads a call (its caller, its key header, its request) and
// gives it to a Call:
//
//	ctx, call := srv.Begin(ctx, method, resolve)
//	id, refusal := call.Identify(caller, ok, keyHeaderValues, nil)
//	var ans keyed.Answer
//	switch {
//	case refusal.Outcome != 0:
//		ans = refusal
//	case resolve:
//		ans = call.Resolve(ctx, id)
//	default:
//		ans = call.Run(ctx, ledger.ClaimRequest{Identity: id, Fingerprint: fp}, work)
//	}
//	// render ans: its Outcome's row, its Result, its Err, its Detail
//	call.End(ctx, ans, renderingAttributes...)
//
// The client side, the retry and resolve loop of a keyed call, is in
// package keyed/retry; the protobuf encodings that gRPC and connect share
// (so that a call made through one and retried through the other replays)
// in package keyed/keyedproto.
//
// The package imports neither gRPC nor net/http nor connect-go: the
// transports import it. See docs/adr/0003-keyed-call-core.md.
package keyed
