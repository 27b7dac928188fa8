package dialects

import (
	"context"
	"database/sql"
	"fmt"
	"time"
)

// LockWaitScope says where a [LockWaiter] sets its wait bound, and so when
// a caller must call BoundLockWait and whether it must restore anything.
type LockWaitScope int

const (
	// LockWaitTransaction: the bound is a transaction-scoped setting (for
	// example PostgreSQL's SET LOCAL lock_timeout). BoundLockWait runs on
	// the *sql.Tx right after BEGIN, and the setting ends with the
	// transaction; restore is nil.
	LockWaitTransaction LockWaitScope = iota + 1
	// LockWaitSession: the bound is a setting of the connection (SQLite's
	// busy_timeout, which BEGIN IMMEDIATE already obeys; MySQL's
	// innodb_lock_wait_timeout). BoundLockWait runs on the *sql.Conn before
	// BEGIN, and the caller must call restore on the same connection after
	// the transaction ends and before the connection goes back to the pool.
	LockWaitSession
)

// String returns "transaction" or "session".
func (s LockWaitScope) String() string {
	switch s {
	case LockWaitTransaction:
		return "transaction"
	case LockWaitSession:
		return "session"
	}
	return fmt.Sprintf("LockWaitScope(%d)", int(s))
}

// Execer is what a [LockWaiter] runs its statements on: a *sql.Tx for
// [LockWaitTransaction], a *sql.Conn for [LockWaitSession].
type Execer interface {
	ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
}

var (
	_ Execer = (*sql.Tx)(nil)
	_ Execer = (*sql.Conn)(nil)
)

// LockWaiter is implemented by dialects that can bound how long a
// statement waits for a lock that another transaction holds: the wait of a
// claim on an uncommitted duplicate. Past the bound, the waiting statement
// fails with an error the dialect classifies as [ClassLockTimeout], which
// the ledger reports as ErrInProgress.
//
// It is optional: check for it with a type assertion. Implementations are
// stateless and safe for concurrent use.
type LockWaiter interface {
	// LockWaitScope says where BoundLockWait sets the bound.
	LockWaitScope() LockWaitScope
	// BoundLockWait bounds lock waits of the statements that follow on ex
	// to d, rounded up to the database's resolution (milliseconds for
	// PostgreSQL and SQLite, whole seconds for MySQL). d must be positive.
	// ex is the transaction (LockWaitTransaction) or the connection before
	// BEGIN (LockWaitSession). The bound applies to every statement of the
	// transaction, the caller's own included.
	//
	// restore puts the connection's previous setting back; it is nil when
	// there is nothing to restore. When restore fails the connection must
	// not be reused with the bound still set: discard it (for example by
	// returning driver.ErrBadConn from (*sql.Conn).Raw).
	BoundLockWait(ctx context.Context, ex Execer, d time.Duration) (restore func(context.Context) error, err error)
}

// Millis returns d in whole milliseconds, rounded up, at least 1: the
// resolution of PostgreSQL's lock_timeout and SQLite's busy_timeout.
func Millis(d time.Duration) int64 {
	ms := int64((d + time.Millisecond - 1) / time.Millisecond)
	if ms < 1 {
		ms = 1
	}
	return ms
}
