package mysqldialect

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strconv"
	"time"

	gomysql "github.com/go-sql-driver/mysql"

	"github.com/opledger/opledger/dialects"
	"github.com/opledger/opledger/internal/dialectkit"
)

var (
	_ dialects.LockWaiter  = Dialect{}
	_ dialectkit.Sessions  = Dialect{}
	_ dialectkit.Described = Dialect{}
)

// maxLockWaitSeconds is the largest innodb_lock_wait_timeout MySQL and
// MariaDB accept; TiDB accepts at most maxTiDBLockWaitSeconds.
const (
	maxLockWaitSeconds     = 1073741824
	maxTiDBLockWaitSeconds = 3600
)

// lockWaitSeconds returns d as innodb_lock_wait_timeout takes it: whole
// seconds, rounded up, at least 1 and at most 1073741824.
func lockWaitSeconds(d time.Duration) int64 {
	s := int64((d + time.Second - 1) / time.Second)
	switch {
	case d > time.Duration(maxLockWaitSeconds)*time.Second || s > maxLockWaitSeconds:
		return maxLockWaitSeconds
	case s < 1:
		return 1
	}
	return s
}

// tidbLockWaitSeconds is lockWaitSeconds within TiDB's range, at most
// 3600.
func tidbLockWaitSeconds(d time.Duration) int64 {
	return min(lockWaitSeconds(d), maxTiDBLockWaitSeconds)
}

// BeginBounded sets innodb_lock_wait_timeout to d in whole seconds
// (rounded up; on TiDB at most 3600) on a connection of its own and
// begins the transaction there; release sets the session's previous value
// back, or discards the connection when it cannot. On MySQL and MariaDB
// that is one statement before BEGIN (SET @opledger_prev_lock_wait =
// @@SESSION.innodb_lock_wait_timeout, SESSION innodb_lock_wait_timeout =
// <s>) and one after the transaction. InnoDB's bound is a
// session variable (SET SESSION inside a transaction would outlive it all
// the same). A statement that waits longer fails with 1205, classified
// [dialects.ClassLockTimeout]; it rolls back only that statement.
//
// On TiDB it also sets tidb_txn_mode = 'pessimistic' for the transaction
// (and back afterwards), so that a claim in it is checked at the INSERT
// whatever the server's default mode (see [NewTiDB]).
func (d Dialect) BeginBounded(ctx context.Context, db *sql.DB, opts *sql.TxOptions, wait time.Duration) (*sql.Tx, func(), error) {
	if wait <= 0 {
		return nil, nil, fmt.Errorf("mysql: lock wait bound %v is not positive", wait)
	}
	if !d.tidb {
		// One statement keeps the session's value in a user variable and
		// sets the bound (assignments run left to right); one statement
		// puts the value back: two in all, no read of its own.
		set := "SET " + prevLockWaitVar + " = @@SESSION.innodb_lock_wait_timeout, SESSION innodb_lock_wait_timeout = " +
			strconv.FormatInt(lockWaitSeconds(wait), 10)
		return dialectkit.BeginOnConn(ctx, db, opts, func(ctx context.Context, conn *sql.Conn) (func(context.Context) error, error) {
			if _, err := conn.ExecContext(ctx, set); err != nil {
				return nil, fmt.Errorf("mysql: set innodb_lock_wait_timeout: %w", err)
			}
			return func(ctx context.Context) error {
				if _, err := conn.ExecContext(ctx, restoreLockWait); err != nil {
					return fmt.Errorf("mysql: restore innodb_lock_wait_timeout: %w", err)
				}
				return nil
			}, nil
		})
	}
	seconds := tidbLockWaitSeconds(wait)
	return dialectkit.BeginOnConn(ctx, db, opts, func(ctx context.Context, conn *sql.Conn) (func(context.Context) error, error) {
		var prev int64
		var mode string
		if err := conn.QueryRowContext(ctx, "SELECT @@SESSION.innodb_lock_wait_timeout, @@SESSION.tidb_txn_mode").Scan(&prev, &mode); err != nil {
			return nil, fmt.Errorf("mysql: read innodb_lock_wait_timeout and tidb_txn_mode: %w", err)
		}
		if !isPlainWord(mode) {
			return nil, fmt.Errorf("mysql: unexpected tidb_txn_mode %q", truncate(mode))
		}
		if err := setTiDBSession(ctx, conn, seconds, pessimistic); err != nil {
			return nil, err
		}
		return func(ctx context.Context) error { return setTiDBSession(ctx, conn, prev, mode) }, nil
	})
}

// prevLockWaitVar is the user variable in which BeginBounded keeps the
// session's innodb_lock_wait_timeout while the bound is set; the restore
// sets it back to NULL.
const (
	prevLockWaitVar = "@opledger_prev_lock_wait"
	restoreLockWait = "SET SESSION innodb_lock_wait_timeout = " + prevLockWaitVar + ", " + prevLockWaitVar + " = NULL"
)

// setTiDBSession sets TiDB's lock wait bound and transaction mode in one
// statement. mode is a plain word (checked by the caller, or a constant).
func setTiDBSession(ctx context.Context, conn *sql.Conn, seconds int64, mode string) error {
	q := "SET SESSION innodb_lock_wait_timeout = " + strconv.FormatInt(seconds, 10) + ", SESSION tidb_txn_mode = '" + mode + "'"
	if _, err := conn.ExecContext(ctx, q); err != nil {
		return fmt.Errorf("mysql: set innodb_lock_wait_timeout and tidb_txn_mode: %w", err)
	}
	return nil
}

// isPlainWord reports whether s is empty or lower-case ASCII letters, as
// every tidb_txn_mode value is: safe to put back between quotes.
func isPlainWord(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < 'a' || s[i] > 'z' {
			return false
		}
	}
	return true
}

// Traits: REPEATABLE READ (InnoDB's and TiDB's default) and READ
// COMMITTED.
func (Dialect) Traits() dialectkit.Traits {
	return dialectkit.Traits{IsolationLevels: []sql.IsolationLevel{sql.LevelRepeatableRead, sql.LevelReadCommitted}}
}

// SessionID returns the connection id (CONNECTION_ID()).
func (Dialect) SessionID(ctx context.Context, tx *sql.Tx) (int64, error) {
	var id int64
	err := tx.QueryRowContext(ctx, "SELECT CONNECTION_ID()").Scan(&id)
	return id, err
}

// Lock-wait views: MariaDB and MySQL 5.7 have
// information_schema.INNODB_LOCK_WAITS; MySQL 8 moved it to
// performance_schema.data_lock_waits.
const (
	blockedByMariaDB = `SELECT COUNT(DISTINCT w.requesting_trx_id) FROM information_schema.INNODB_LOCK_WAITS w ` +
		`JOIN information_schema.INNODB_TRX b ON b.trx_id = w.blocking_trx_id WHERE b.trx_mysql_thread_id = ?`
	blockedByMySQL8 = `SELECT COUNT(DISTINCT w.REQUESTING_ENGINE_TRANSACTION_ID) FROM performance_schema.data_lock_waits w ` +
		`JOIN information_schema.INNODB_TRX b ON b.trx_id = w.BLOCKING_ENGINE_TRANSACTION_ID WHERE b.trx_mysql_thread_id = ?`
	erUnknownTable = 1109 // ER_UNKNOWN_TABLE
	// TiDB: DATA_LOCK_WAITS holds who waits (TRX_ID) for whom
	// (CURRENT_HOLDING_TRX_ID); TIDB_TRX maps a transaction to its session.
	blockedByTiDB = `SELECT COUNT(DISTINCT w.TRX_ID) FROM information_schema.DATA_LOCK_WAITS w ` +
		`JOIN information_schema.TIDB_TRX b ON b.ID = w.CURRENT_HOLDING_TRX_ID WHERE b.SESSION_ID = ?`
)

// InnoDB serves INNODB_TRX and INNODB_LOCK_WAITS from a cache that the
// server refreshes only for a read that comes more than 100 ms after the
// previous read by anyone: polled faster, from one process or from
// several, the view never changes again. BlockedBy therefore reads it under
// a named lock that serialises the kit's readers on the server, after
// viewIdle without a read. The name holds a character no ledger table name
// has, so it never meets a migration lock ("opledger:" and the table).
const (
	viewLock        = "opledger/innodb-lock-view"
	viewLockSeconds = 30
	viewIdle        = 110 * time.Millisecond
)

// BlockedBy counts the lock waits on locks that connection id's
// transaction holds (the user needs the PROCESS privilege).
//
// On MySQL and MariaDB it reads InnoDB's views; each call takes at least
// 110 ms, and waits while another BlockedBy on the server reads (see
// above). On TiDB it reads information_schema.DATA_LOCK_WAITS (the
// pessimistic lock waits TiKV reports) joined with TIDB_TRX (the
// transactions of the TiDB server the query reaches, so behind a load
// balancer it can miss a holder on another TiDB server and count 0).
func (d Dialect) BlockedBy(ctx context.Context, db *sql.DB, id int64) (int, error) {
	if d.tidb {
		var n int
		err := db.QueryRowContext(ctx, blockedByTiDB, id).Scan(&n)
		return n, err
	}
	conn, err := db.Conn(ctx)
	if err != nil {
		return 0, err
	}
	defer conn.Close()
	var got sql.NullInt64
	if err := conn.QueryRowContext(ctx, "SELECT GET_LOCK(?, ?)", viewLock, viewLockSeconds).Scan(&got); err != nil {
		return 0, fmt.Errorf("mysql: lock the lock-wait view: %w", err)
	}
	if !got.Valid || got.Int64 != 1 {
		return 0, fmt.Errorf("mysql: lock the lock-wait view: not granted within %d s", viewLockSeconds)
	}
	defer conn.ExecContext(context.WithoutCancel(ctx), "DO RELEASE_LOCK(?)", viewLock)
	idle := time.NewTimer(viewIdle)
	select {
	case <-ctx.Done():
		idle.Stop()
		return 0, ctx.Err()
	case <-idle.C:
	}
	var n int
	err = conn.QueryRowContext(ctx, blockedByMariaDB, id).Scan(&n)
	var me *gomysql.MySQLError
	if errors.As(err, &me) && me.Number == erUnknownTable {
		err = conn.QueryRowContext(ctx, blockedByMySQL8, id).Scan(&n)
	}
	return n, err
}

// Kill ends connection id with KILL (the user needs CONNECTION_ADMIN or
// SUPER, or to own the connection).
func (Dialect) Kill(ctx context.Context, db *sql.DB, id int64) error {
	_, err := db.ExecContext(ctx, "KILL "+strconv.FormatInt(id, 10))
	return err
}
