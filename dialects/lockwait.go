package dialects

import (
	"context"
	"database/sql"
	"time"
)

// LockWaiter is implemented by dialects that can bound how long a
// statement waits for a lock that another transaction holds: the wait of a
// claim on an uncommitted duplicate. Past the bound, the waiting statement
// (or, on SQLite, BEGIN itself) fails with an error the dialect classifies
// as [ClassLockTimeout], which the ledger and txmiddleware report as
// ErrInProgress.
//
// It is optional: check for it with a type assertion. Implementations are
// stateless and safe for concurrent use.
type LockWaiter interface {
	// BeginBounded begins a transaction on db with opts in which every
	// lock wait, the caller's own statements included, ends after about
	// d (rounded up to the database's resolution: milliseconds for
	// PostgreSQL and SQLite, whole seconds for MySQL). d must be positive.
	//
	// release must be called once the transaction has ended (committed or
	// rolled back), also when it failed; it undoes any setting that
	// outlives the transaction and returns the connection to the pool, or
	// discards the connection when the setting cannot be undone. It is
	// never nil when err is nil. A bound that ends with the transaction
	// (PostgreSQL's SET LOCAL) is the safe kind behind a connection pooler
	// in transaction mode: prefer it where the database has one.
	BeginBounded(ctx context.Context, db *sql.DB, opts *sql.TxOptions, d time.Duration) (tx *sql.Tx, release func(), err error)
}
