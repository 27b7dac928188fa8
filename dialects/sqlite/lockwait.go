package sqlite

import (
	"context"
	"errors"
	"strconv"
	"time"

	"github.com/opledger/opledger/dialects"
)

var _ dialects.LockWaiter = Dialect{}

// LockWaitScope returns dialects.LockWaitSession: SQLite's busy_timeout is
// a setting of the connection, and with immediate transactions (see [DSN])
// the wait happens at BEGIN, so it must be set before BEGIN.
func (Dialect) LockWaitScope() dialects.LockWaitScope { return dialects.LockWaitSession }

// BoundLockWait sets PRAGMA busy_timeout on ex (a *sql.Conn, before BEGIN)
// to d and returns a restore func that puts the previous value back. With
// _txlock=immediate, a BEGIN that cannot take the write lock within d
// fails with SQLITE_BUSY (classified as a lock timeout). The busy timeout
// bounds every wait for the database's write lock, not only a wait on the
// same identity: SQLite has one writer at a time.
func (Dialect) BoundLockWait(ctx context.Context, ex dialects.Execer, d time.Duration) (func(context.Context) error, error) {
	if d <= 0 {
		return nil, errors.New("sqlite: lock wait bound must be positive")
	}
	var prev int64
	if err := ex.QueryRowContext(ctx, `PRAGMA busy_timeout`).Scan(&prev); err != nil {
		return nil, err
	}
	if err := setBusyTimeout(ctx, ex, dialects.Millis(d)); err != nil {
		return nil, err
	}
	return func(ctx context.Context) error { return setBusyTimeout(ctx, ex, prev) }, nil
}

// setBusyTimeout runs PRAGMA busy_timeout = ms. PRAGMA takes no bound
// parameters; ms is an integer formatted here.
func setBusyTimeout(ctx context.Context, ex dialects.Execer, ms int64) error {
	var got int64
	return ex.QueryRowContext(ctx, `PRAGMA busy_timeout = `+strconv.FormatInt(ms, 10)).Scan(&got)
}
