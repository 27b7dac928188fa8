// Package payments is the example service of opledger: a payments
// service whose Transfer method is a keyed mutation, served with the
// grpcint server interceptor and called through a channel whose retries
// have one owner.
//
// The Transfer handler writes through the transaction it finds in its
// context (grpcint.TxFromContext), so the transfer row and the ledger
// claim commit together: a retried Transfer, however often and by
// whomever, records one transfer.
//
// Dial builds the client side: a channel with one retry owner (see
// grpcint.DialOptions).
//
// The caller of every call comes from authentication, never from a name
// the client sends: Tokens issues bearer tokens, checks them in front of
// the kit (its interceptor and middleware), and puts each token's
// principal in the context, where grpcint.CallerFromPrincipal(Principal)
// and httpint.CallerFromPrincipal(Principal) find it. The scenario and
// `opledger chaos` authenticate their clients this way.
//
// The same Transfer is served over HTTP too (HTTPHandler, TransferRoute),
// behind the httpint middleware on the same ledger, and called through
// HTTPClient, which owns the retries of its requests and resolves a lost
// answer before anything else.
//
// The package also holds the fault injector and the scenario that
// `opledger demo` runs: transfers whose requests fail before they are
// sent, whose responses are dropped after the server committed or are
// delayed, then a phase of total outage; it counts duplicate and lost
// effects in the business table.
package payments
