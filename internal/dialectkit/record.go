package dialectkit

// RecordQuerier is implemented by dialects that record a completed entry
// first, in one statement: the ledger's Record (claim at commit), run as
// the last statement of a transaction whose work has already run. A
// dialect without it still supports Record: the ledger then claims and
// completes, two statements. (ledger.Recorder is the ledger's side: a
// ledger that offers Record.)
type RecordQuerier interface {
	// RecordQueries returns the SQL of Record for the given (already
	// validated, unquoted) table name.
	RecordQueries(table string) RecordQueries
}

// RecordQueries holds the SQL of the ledger's Record. After a conflict
// the ledger reads the entry with [dialects.Queries.Select] (unless Record
// returned it) and, when it has expired and Insert does not take it over
// itself, runs TakeOver.
type RecordQueries struct {
	// Insert inserts a completed entry. Args: id, caller, method,
	// request_fp, code, response, response_type, created_at, completed_at,
	// expires_at, born_at, and now when TakesOver is set. A conflict on id with a live entry must either
	// affect zero rows or fail with an error classified as
	// [dialects.ClassUniqueViolation] that leaves the transaction usable. When
	// TakesOver is set, a conflict with an entry whose expires_at <= now
	// must replace it (every column but id, caller, method and born_at)
	// and count as one affected row, unless the inserted born_at is not 0
	// (a key with a known birth is never taken over: the ledger refuses it
	// as expired after reading the entry).
	Insert string
	// TakesOver says that Insert replaces an expired entry itself.
	TakesOver bool
	// TakeOver replaces an expired entry with a completed one. Args:
	// request_fp, code, response, response_type, created_at, completed_at,
	// expires_at, id, now. It must only match when the stored
	// expires_at <= now.
	TakeOver string
}
