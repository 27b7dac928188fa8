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
// *sql.Tx), as SET LOCAL does, in one round trip:
// SELECT set_config('lock_timeout', $1, true). A claim that waits longer
// than d on an uncommitted duplicate fails with 55P03, and PostgreSQL
// aborts the transaction. The setting ends with the transaction, so there
// is nothing to restore. Outside a transaction block it would have no
// effect; call it only on a *sql.Tx.
func (Dialect) BoundLockWait(ctx context.Context, ex dialects.Execer, d time.Duration) (func(context.Context) error, error) {
	if d <= 0 {
		return nil, errors.New("postgres: lock wait bound must be positive")
	}
	_, err := ex.ExecContext(ctx, `SELECT set_config('lock_timeout', $1, true)`, strconv.FormatInt(dialects.Millis(d), 10)+"ms")
	return nil, err
}
