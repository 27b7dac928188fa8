package keyed

// Stats are the counters of a keyed server: grpcint.Server's, connectint.Server's and httpint.Middleware's. Every keyed call counts in one of
// Executed, Replayed, Refused and Failed, by its outcome's kind; every
// resolve request in Resolves.
type Stats struct {
	// Executed counts calls whose handler ran and committed (KindExecuted).
	Executed int64
	// Replayed counts calls answered with a stored answer (KindReplayed).
	Replayed int64
	// Resolves counts resolve requests, whatever they found.
	Resolves int64
	// Refused counts calls refused without the handler (KindRefused).
	Refused int64
	// Failed counts calls that committed nothing or whose commit is
	// unknown (KindFailed).
	Failed int64
}

// ClientStats are the counters of a keyed client: grpcint.Client's and
// connectint.Client's, read with their Stats.
type ClientStats struct {
	// Calls is the number of logical calls through the interceptor.
	Calls int64
	// Attempts is the number of attempts sent, resolves included (grpcint:
	// those that reached the transport, as its stats handler sees them,
	// grpc-go's own retries on a service-config-owned channel included).
	Attempts int64
	// Retries is the number of times the interceptor ran a call again.
	Retries int64
	// Resolves is the number of resolve requests the interceptor sent.
	Resolves int64
	// Resolved is the number of calls whose outcome a resolve returned.
	Resolved int64
	// Replayed is the number of successful calls whose response was a
	// stored outcome (the replay marker).
	Replayed int64
	// BudgetRefusals is the number of retries the budget refused.
	BudgetRefusals int64
	// Ambiguous is the number of keyed calls that returned an error whose
	// outcome the client could not learn ([CallOutcomeUnknown]).
	Ambiguous int64
}
