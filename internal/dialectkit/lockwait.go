package dialectkit

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"time"

	"github.com/opledger/opledger/dialects"
)

// StatementBounder is implemented by dialects that can bound the lock
// waits of the ledger's own statements inside those statements, so that a
// bounded claim or Record costs no statement of its own (no SET before it,
// nothing to restore after it). The ledger uses it for
// ClaimRequest.LockWait and reports it through ledger.LockWaitBounder;
// txmiddleware then prefers it to [dialects.LockWaiter].
//
// It is optional: check for it with a type assertion. Implementations are
// stateless and safe for concurrent use.
type StatementBounder interface {
	// BoundedQueries returns the ledger's SQL for table (see
	// [dialects.Dialect.Queries]) with every statement of a claim (Insert or
	// Claim, and TakeOver) bounding its own lock waits to about d, rounded
	// up as for [dialects.LockWaiter.BeginBounded]; the bound must end with the
	// transaction at the latest (so that it never reaches the next
	// transaction on a pooled connection). ok is false when the dialect
	// cannot bound lock waits this way; d must be positive.
	BoundedQueries(table string, d time.Duration) (q dialects.Queries, ok bool)
	// BoundedRecordQueries does the same for the SQL of Record (see
	// [RecordQuerier]): every statement that can wait on another
	// transaction's entry (Insert, and TakeOver). A dialect without
	// RecordQuerier returns ok false.
	BoundedRecordQueries(table string, d time.Duration) (q RecordQueries, ok bool)
}

// SessionSetting changes a setting of conn's session and returns how to put
// it back on the same connection. See [BeginOnConn].
type SessionSetting func(ctx context.Context, conn *sql.Conn) (restore func(context.Context) error, err error)

// restoreTimeout bounds a restore run after the caller's context ended.
const restoreTimeout = 5 * time.Second

// BeginOnConn is the procedure for a lock-wait bound that is a setting of
// the session rather than of the transaction (MySQL's
// innodb_lock_wait_timeout, SQLite's busy_timeout), for dialects to build
// [dialects.LockWaiter.BeginBounded] on: it takes a connection of its own from db,
// applies set to it, and begins the transaction there. The returned
// release function, to be called once the transaction has ended, runs
// set's restore on the same connection (within five seconds, even if ctx
// has ended) and returns the connection to the pool; when the setting
// cannot be restored, the connection is closed instead, so that no other
// caller gets it with the bound still set.
func BeginOnConn(ctx context.Context, db *sql.DB, opts *sql.TxOptions, set SessionSetting) (*sql.Tx, func(), error) {
	if db == nil || set == nil {
		return nil, nil, errors.New("dialects: begin on conn: nil database or setting")
	}
	conn, err := db.Conn(ctx)
	if err != nil {
		return nil, nil, err
	}
	restore, err := set(ctx, conn)
	if err != nil {
		discard(conn)
		return nil, nil, err
	}
	release := func() {
		if restore != nil {
			rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), restoreTimeout)
			rerr := restore(rctx)
			cancel()
			if rerr != nil {
				discard(conn)
				return
			}
		}
		_ = conn.Close()
	}
	tx, err := conn.BeginTx(ctx, opts)
	if err != nil {
		release()
		return nil, nil, err
	}
	return tx, release, nil
}

// discard closes conn instead of returning it to the pool: database/sql
// drops a connection whose Raw function returns driver.ErrBadConn.
func discard(conn *sql.Conn) {
	_ = conn.Raw(func(any) error { return driver.ErrBadConn })
	_ = conn.Close()
}
