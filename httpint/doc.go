// Package httpint makes keyed HTTP mutations safe to retry with the same
// operation ledger as grpcint: a net/http middleware with the semantics
// of the IETF HTTPAPI draft "The Idempotency-Key HTTP Header Field".
// Create it with [New] (or [NewFor] for a transaction API other than
// database/sql); it takes package keyed's server options
// (keyed.WithLockWait, keyed.WithClaimAtCommit, keyed.WithRetryOwner, the
// telemetry) with this package's own ([WithMaxRequestBody],
// [WithReplayHeaders], …) in one list.
//
//	idem, err := httpint.New(db, store, httpint.CallerFromPrincipal(principalOf),
//		[]string{"POST /transfers", "PUT /orders/{id}"})
//	...
//	http.ListenAndServe(addr, authenticate(idem.Handler(mux))) // or r.Use(authenticate, idem.Handler)
//
// The caller comes from authentication, never from something the client
// merely sends: CallerFromPrincipal takes the principal your
// authentication middleware (authenticate, in front of this one) put in
// the request's context, CallerFromPeerCertificate a verified TLS client
// certificate. CallerFromTrustedHeader is only for a service that no
// client can reach except through a gateway that overwrites the header.
//
// Which routes are keyed is configured, as "METHOD /pattern" in
// ServeMux's syntax; every other request passes through untouched. For a
// keyed route the middleware identifies the caller (401 without one),
// reads the Idempotency-Key header, a structured-field string (400 when
// it is missing or malformed), reads and fingerprints the request
// (method, path, query, body; 413 for a body over the limit, before
// anything is claimed) and runs the handler inside txmiddleware, with the
// transaction in the request's context (txmiddleware.TxFromContext) and
// the response buffered. A response with a status below 400, or a final
// error status (by default 4xx but 401, 408, 425 and 429), is stored with
// the claim in the same transaction; any other status, and a panic, roll
// back and store nothing, so a retry runs the handler again.
//
// A retry with the same key gets the stored status, the allow-listed
// headers (DefaultReplayHeaders; never Set-Cookie unless configured) and
// the body, with Idempotent-Replayed: true and Idempotency-Replayed: true
// (Stripe's name, and the name of the gRPC and connect marker). The same
// key with another request is 422; a request while another with the key
// is in flight past the wait bound is 409 with Retry-After.
// Idempotency-Resolve: 1 (or true) asks for the stored response without
// running the handler (404 when nothing was committed); any other value
// is 400. Every answer of the middleware's own is an RFC 9457 problem
// with a stable type URI; Renderings is the one table of them, and
// docs/http.md prints it.
//
// A key is honoured for the ledger's window from its birth (its UUIDv7
// time, or the Idempotency-Key-First-Sent header), and a key born before
// it is refused as expired (422); WithRouteWindow gives a route a shorter
// window of its own, or has it refuse keys that carry no birth, as a
// grpcint or connectint method's catalog policy does.
//
// The identity of a keyed request is the caller, the route ("PUT
// /orders/{id}", not the path) and the SHA-256 of the key, so a key on
// /orders/1 and /orders/2 is one operation with two different requests
// (422), never two operations.
//
// A stored response is a ledger.Result with Code the status, TypeName
// "opledger.httpint.Response" and Response the allow-listed header fields (sorted by
// name) and the body, length-prefixed: the same response always stores
// the same bytes. See docs/http.md.
package httpint
