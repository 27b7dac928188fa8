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
