package pgdialect

import (
	"context"
	"database/sql"
	"fmt"
	"strconv"
	"time"

	"github.com/opledger/opledger/dialects"
	"github.com/opledger/opledger/internal/dialectkit"
	"github.com/opledger/opledger/internal/dialectkit/units"
)

var (
	_ dialects.LockWaiter         = Dialect{}
	_ dialectkit.StatementBounder = Dialect{}
)

// BoundedQueries returns the ledger's SQL for table with the claim
// statements (Insert, Claim, TakeOver) setting lock_timeout to d (rounded
// up to milliseconds) for the rest of the transaction, inside the
// statement and before it can wait: set_config('lock_timeout', '<ms>',
// true) in a CTE. The setting is transaction-scoped like SET LOCAL (safe
// behind PgBouncer in transaction mode) and costs no statement of its
// own; from the claim on it bounds the caller's later statements in the
// transaction too, as [Dialect.BeginBounded] does. ok is false for a d
// that is not positive.
func (d Dialect) BoundedQueries(table string, wait time.Duration) (dialects.Queries, bool) {
	if wait <= 0 {
		return dialects.Queries{}, false
	}
	return d.queries(table, strconv.FormatInt(units.Millis(wait), 10)), true
}

// BoundedRecordQueries returns the SQL of the ledger's Record for table
// with Insert and TakeOver setting lock_timeout to d (rounded up to
// milliseconds) for the rest of the transaction, inside the statement and
// before it can wait, as [Dialect.BoundedQueries] does for a claim. ok is
// false for a d that is not positive.
func (d Dialect) BoundedRecordQueries(table string, wait time.Duration) (dialectkit.RecordQueries, bool) {
	if wait <= 0 {
		return dialectkit.RecordQueries{}, false
	}
	return d.recordQueries(table, strconv.FormatInt(units.Millis(wait), 10)), true
}

// BeginBounded begins a transaction and sets lock_timeout for it alone
// (SET LOCAL lock_timeout = <ms>, d rounded up to milliseconds). A claim
// that waits longer than d on an uncommitted duplicate fails with 55P03,
// and PostgreSQL aborts the transaction. The setting ends with the
// transaction, so it is safe behind PgBouncer in transaction mode and
// release has nothing to undo.
//
// The value is an integer formatted here, so the statement carries no
// parameters: drivers send it in one round trip, where lib/pq sends a
// parameterised one in two (docs/benchmarks.md).
func (Dialect) BeginBounded(ctx context.Context, db *sql.DB, opts *sql.TxOptions, d time.Duration) (*sql.Tx, func(), error) {
	if d <= 0 {
		return nil, nil, fmt.Errorf("postgres: lock wait bound %v is not positive", d)
	}
	if db == nil {
		return nil, nil, fmt.Errorf("postgres: begin bounded: nil database")
	}
	tx, err := db.BeginTx(ctx, opts)
	if err != nil {
		return nil, nil, err
	}
	if _, err := tx.ExecContext(ctx, "SET LOCAL lock_timeout = "+strconv.FormatInt(units.Millis(d), 10)); err != nil {
		_ = tx.Rollback()
		return nil, nil, err
	}
	return tx, func() {}, nil
}
