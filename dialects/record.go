package dialects

import "time"

// Recorder is implemented by dialects that record a completed entry
// first, in one statement: the ledger's Record (claim at commit), run as
// the last statement of a transaction whose work has already run. A
// dialect without it still supports Record: the ledger then claims and
// completes, two statements.
type Recorder interface {
	// RecordQueries returns the SQL of Record for the given (already
	// validated, unquoted) table name.
	RecordQueries(table string) RecordQueries
}

// RecordQueries holds the SQL of the ledger's Record. After a conflict
// the ledger reads the entry with [Queries.Select] (unless Record
// returned it) and, when it has
// expired and Insert does not take it over itself, runs TakeOver.
type RecordQueries struct {
	// Insert inserts a completed entry. Args: id, caller, method,
	// request_fp, code, response, response_type, created_at, completed_at,
	// expires_at, and now when TakesOver is set. A conflict on id with a live entry must either
	// affect zero rows or fail with an error classified as
	// [ClassUniqueViolation] that leaves the transaction usable. When
	// TakesOver is set, a conflict with an entry whose expires_at <= now
	// must replace it (every column but id, caller and method) and count
	// as one affected row.
	Insert string
	// TakesOver says that Insert replaces an expired entry itself.
	TakesOver bool
	// TakeOver replaces an expired entry with a completed one. Args:
	// request_fp, code, response, response_type, created_at, completed_at,
	// expires_at, id, now. It must only match when the stored
	// expires_at <= now.
	TakeOver string
}

// RecordBounder is implemented by dialects that can bound the lock waits
// of the ledger's Record inside Record's own statements, as
// [ClaimBounder] does for a claim: a bounded Record costs no statement of
// its own. The ledger uses it for ClaimRequest.LockWait in Record, and
// reports that it bounds lock waits only when a dialect with [Recorder]
// also implements it.
//
// It is optional: check for it with a type assertion. Implementations are
// stateless and safe for concurrent use.
type RecordBounder interface {
	// BoundedRecordQueries returns the SQL of Record for table (see
	// [Recorder.RecordQueries]) with every statement that can wait on
	// another transaction's entry (Insert or Record, and TakeOver) bounding its own
	// lock waits to about d, rounded up as for [LockWaiter.BeginBounded];
	// the bound must end with the transaction at the latest. ok is false
	// when the dialect cannot bound lock waits this way; d must be
	// positive.
	BoundedRecordQueries(table string, d time.Duration) (q RecordQueries, ok bool)
}
