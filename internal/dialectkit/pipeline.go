package dialectkit

import "time"

// Pipeliner is implemented by dialects whose ledger statements can be sent
// to the database in one round trip with the BEGIN before them or the
// COMMIT after them, on a driver that pipelines (pgx: package pgxledger).
// Sent with COMMIT, a statement's outcome cannot be checked before the
// COMMIT runs, so these forms fail, aborting the transaction, wherever the
// ledger would otherwise have looked at what the statement did and not
// committed: the ledger's pipelined Complete and Record (internal/txledger's Store's
// CompleteCommit and RecordCommit). The claim sent with BEGIN is the plain
// [dialects.Queries.Insert], read back after a conflict with [dialects.Queries.Select].
//
// It is optional: check for it with a type assertion. Implementations are
// stateless and safe for concurrent use.
type Pipeliner interface {
	// PipelineQueries returns the pipelined forms for the given (already
	// validated, unquoted) table, with Record bounding its lock waits to
	// about wait when wait is positive (as [StatementBounder] does for Record; zero
	// leaves the database's own bound). ok is false when the dialect cannot
	// build them for wait.
	PipelineQueries(table string, wait time.Duration) (q PipelineQueries, ok bool)
	// NotPending reports whether err is the failure of
	// PipelineQueries.Complete for an entry that was not pending (the
	// statement completed no entry).
	NotPending(err error) bool
}

// PipelineQueries holds the SQL of the ledger's pipelined statements.
type PipelineQueries struct {
	// Complete stores the result of an acquired entry, as
	// [dialects.Queries.Complete] (same arguments), and fails, with an error for
	// which [Pipeliner.NotPending] reports true, unless it completed
	// exactly one entry.
	Complete string
	// CompleteHour, when positive, is the offset in Complete at which the
	// completion's own WHERE ends: where the ledger puts [HourOfBirth]'s
	// range for a dialect whose [BirthQueries].PruneByHour is set, as it
	// does for the completion run on its own.
	CompleteHour int
	// Record inserts a completed entry, as [RecordQueries.Insert] (its
	// arguments without now), and fails with an error classified as
	// [dialects.ClassUniqueViolation] when the identity exists, whether its entry
	// is live or expired: it never inserts nothing without failing.
	Record string
	// DeleteExpired deletes the entry of one identity when it has expired.
	// Args: id, now. The ledger runs it outside any transaction after a
	// pipelined Record found the entry expired, before the unit runs again.
	DeleteExpired string
}
