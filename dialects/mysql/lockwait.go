package mysql

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/opledger/opledger/dialects"
)

var _ dialects.LockWaiter = Dialect{}

// maxLockWaitSeconds is the largest innodb_lock_wait_timeout MySQL and
// MariaDB accept.
const maxLockWaitSeconds = 1073741824

// LockWaitScope returns [dialects.LockWaitSession]: InnoDB's lock wait
// bound, innodb_lock_wait_timeout, is a session variable. (SET SESSION
// inside a transaction would work too, but it would outlive the
// transaction on the pooled connection all the same, so it needs the
// restore either way.)
func (Dialect) LockWaitScope() dialects.LockWaitScope { return dialects.LockWaitSession }

// LockWaitSeconds returns d as innodb_lock_wait_timeout takes it: whole
// seconds, rounded up, at least 1 and at most 1073741824.
func LockWaitSeconds(d time.Duration) int64 {
	s := int64((d + time.Second - 1) / time.Second)
	switch {
	case d > time.Duration(maxLockWaitSeconds)*time.Second || s > maxLockWaitSeconds:
		return maxLockWaitSeconds
	case s < 1:
		return 1
	}
	return s
}

// BoundLockWait sets innodb_lock_wait_timeout on the connection ex to d in
// whole seconds (see [LockWaitSeconds]) and returns a restore function
// that sets the session's previous value back. Call it on the *sql.Conn
// before BEGIN and call restore on the same connection after the
// transaction has ended. A statement that waits longer fails with 1205,
// classified [dialects.ClassLockTimeout]; it rolls back only that
// statement.
func (Dialect) BoundLockWait(ctx context.Context, ex dialects.Execer, d time.Duration) (func(context.Context) error, error) {
	if ex == nil {
		return nil, errors.New("mysql: bound lock wait: nil connection")
	}
	if d <= 0 {
		return nil, fmt.Errorf("mysql: bound lock wait: duration %v is not positive", d)
	}
	var prev int64
	if err := ex.QueryRowContext(ctx, "SELECT @@SESSION.innodb_lock_wait_timeout").Scan(&prev); err != nil {
		return nil, fmt.Errorf("mysql: read innodb_lock_wait_timeout: %w", err)
	}
	if _, err := ex.ExecContext(ctx, "SET SESSION innodb_lock_wait_timeout = "+strconv.FormatInt(LockWaitSeconds(d), 10)); err != nil {
		return nil, fmt.Errorf("mysql: set innodb_lock_wait_timeout: %w", err)
	}
	restore := func(ctx context.Context) error {
		if _, err := ex.ExecContext(ctx, "SET SESSION innodb_lock_wait_timeout = "+strconv.FormatInt(prev, 10)); err != nil {
			return fmt.Errorf("mysql: restore innodb_lock_wait_timeout: %w", err)
		}
		return nil
	}
	return restore, nil
}
