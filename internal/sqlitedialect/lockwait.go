package sqlitedialect

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

var _ dialects.LockWaiter = Dialect{}

// BeginBounded sets PRAGMA busy_timeout to d on a connection of its own
// and begins the transaction there; release puts the previous value back.
// SQLite's busy_timeout is a setting of the connection and, with the
// immediate transactions of [DSN], the wait happens at BEGIN, so it is set
// before BEGIN: a BEGIN that cannot take the write lock within d fails
// with SQLITE_BUSY (classified as a lock timeout). The busy timeout bounds
// every wait for the database's write lock, not only a wait on the same
// identity: SQLite has one writer at a time.
func (Dialect) BeginBounded(ctx context.Context, db *sql.DB, opts *sql.TxOptions, d time.Duration) (*sql.Tx, func(), error) {
	if d <= 0 {
		return nil, nil, fmt.Errorf("sqlite: lock wait bound %v is not positive", d)
	}
	return dialectkit.BeginOnConn(ctx, db, opts, func(ctx context.Context, conn *sql.Conn) (func(context.Context) error, error) {
		var prev int64
		if err := conn.QueryRowContext(ctx, `PRAGMA busy_timeout`).Scan(&prev); err != nil {
			return nil, err
		}
		if err := setBusyTimeout(ctx, conn, units.Millis(d)); err != nil {
			return nil, err
		}
		return func(ctx context.Context) error { return setBusyTimeout(ctx, conn, prev) }, nil
	})
}

// setBusyTimeout runs PRAGMA busy_timeout = ms. PRAGMA takes no bound
// parameters; ms is an integer formatted here.
func setBusyTimeout(ctx context.Context, conn *sql.Conn, ms int64) error {
	var got int64
	return conn.QueryRowContext(ctx, `PRAGMA busy_timeout = `+strconv.FormatInt(ms, 10)).Scan(&got)
}
