package postgres

import (
	"context"
	"errors"
	"strconv"
	"time"

	"github.com/opledger/opledger/dialects"
)

var _ dialects.LockWaiter = Dialect{}

// LockWaitScope returns dialects.LockWaitTransaction: the bound is
// PostgreSQL's lock_timeout set for the current transaction only.
func (Dialect) LockWaitScope() dialects.LockWaitScope { return dialects.LockWaitTransaction }

// BoundLockWait sets lock_timeout for the rest of the transaction ex (a
// *sql.Tx) with SET LOCAL lock_timeout = <ms>. A claim that waits longer
// than d on an uncommitted duplicate fails with 55P03, and PostgreSQL
// aborts the transaction. The setting ends with the transaction, so there
// is nothing to restore. Outside a transaction block it would have no
// effect; call it only on a *sql.Tx.
//
// The value is an integer formatted here, so the statement carries no
// parameters: drivers send it in one round trip (lib/pq sends a
// parameterised statement such as set_config('lock_timeout', $1, true) in
// two, measured at about 200µs against 70µs for one).
func (Dialect) BoundLockWait(ctx context.Context, ex dialects.Execer, d time.Duration) (func(context.Context) error, error) {
	if d <= 0 {
		return nil, errors.New("postgres: lock wait bound must be positive")
	}
	_, err := ex.ExecContext(ctx, "SET LOCAL lock_timeout = "+strconv.FormatInt(dialects.Millis(d), 10))
	return nil, err
}
