package mysqldialect

import (
	"context"
	"database/sql"
	"embed"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"time"

	gomysql "github.com/go-sql-driver/mysql"

	"github.com/opledger/opledger/dialects"
)

//go:embed migrations/*.sql
var migrationFiles embed.FS

var _ dialects.Schema = Dialect{}

// Migrations returns the ledger's MySQL/MariaDB migrations, serialised
// across processes by a named lock (GET_LOCK) per ledger table.
func (Dialect) Migrations() dialects.Migrations {
	sub, err := fs.Sub(migrationFiles, "migrations")
	if err != nil {
		panic(err) // the embedded folder always exists
	}
	return dialects.Migrations{
		FS:    sub,
		Goose: "mysql",
		Lock:  func(table string) dialects.SessionLocker { return newMySQLLocker(table) },
	}
}

// mysqlLockTimeout bounds how long the kit's migrations wait for another
// process migrating the same ledger table, as goose's own lockers do;
// mysqlLockPause is the pause after a GET_LOCK that failed with a
// transient error before it is asked again.
const (
	mysqlLockTimeout = 5 * time.Minute
	mysqlLockPause   = 50 * time.Millisecond
)

// mysqlLocker serialises the kit's migrations on MySQL, MariaDB and TiDB
// with a named user-level lock (GET_LOCK / RELEASE_LOCK), held by the
// session that the migrations run on.
//
// goose's own MySQL locker (lock.NewMySQLTableLocker) is deliberately not
// used: it keeps its lock in a table, "goose_lock" by default, which would
// appear in the user's schema next to the application's own goose tables
// and outlive the kit's Down. A named lock creates nothing, is released
// by the server if the session dies, and its name ("opledger:" and the
// ledger table, at most 57 of the 64 characters MySQL allows) is the
// kit's own, so it never blocks the application's migrations.
type mysqlLocker struct {
	name    string
	timeout time.Duration // mysqlLockTimeout; shorter in tests
}

func newMySQLLocker(table string) mysqlLocker {
	return mysqlLocker{name: "opledger:" + table, timeout: mysqlLockTimeout}
}

// SessionLock waits for the named lock on conn, at most five minutes or
// until ctx ends. It asks in one-second waits, so that a cancelled caller
// leaves no server-side wait behind for longer than that. A GET_LOCK that
// fails with a transient lock error (see [lockContention]: under
// contention TiDB answers "pessimistic lock retry limit reached" instead
// of 0) is asked again, within the same bound.
func (l mysqlLocker) SessionLock(ctx context.Context, conn *sql.Conn) error {
	query := "SELECT GET_LOCK(" + l.literal() + ", 1)"
	return l.wait(ctx, func(ctx context.Context) (sql.NullInt64, error) {
		var got sql.NullInt64
		err := conn.QueryRowContext(ctx, query).Scan(&got)
		return got, err
	})
}

// literal returns the lock's name as an SQL expression of its exact
// bytes, whatever the session's sql_mode: the lock's statements are sent
// whole, without arguments, so that the driver sends them as plain
// queries, never as prepared statements.
//
// TiDB folds GET_LOCK and RELEASE_LOCK of constant arguments while it
// plans the statement, and it plans a prepared statement again when
// another session's DDL changed the schema since it was prepared (as
// concurrent migrations do): the function then runs twice. A
// RELEASE_LOCK run twice releases the lock and answers 0, "not held"
// (seen as "migration unlock ...: the lock was not held by this
// session" once migration 00005 made TiDB's migrations run DDL while
// others waited for the lock), and a GET_LOCK run twice takes the lock
// twice, so that one RELEASE_LOCK would leave it held. A plain query is
// planned once.
func (l mysqlLocker) literal() string {
	return "CONVERT(X'" + hex.EncodeToString([]byte(l.name)) + "' USING utf8mb4)"
}

// wait is SessionLock's loop over getLock, one GET_LOCK each.
func (l mysqlLocker) wait(ctx context.Context, getLock func(context.Context) (sql.NullInt64, error)) error {
	deadline := time.Now().Add(l.timeout)
	for {
		got, err := getLock(ctx)
		switch {
		case err != nil && !lockContention(err):
			return fmt.Errorf("migration lock %q: %w", l.name, err)
		case err == nil && got.Valid && got.Int64 == 1:
			return nil
		case err == nil && !got.Valid:
			return fmt.Errorf("migration lock %q: GET_LOCK returned NULL", l.name)
		}
		if cerr := ctx.Err(); cerr != nil {
			return fmt.Errorf("migration lock %q: %w", l.name, cerr)
		}
		if time.Now().After(deadline) {
			if err != nil {
				return fmt.Errorf("migration lock %q: not granted within %v: %w", l.name, l.timeout, err)
			}
			return fmt.Errorf("migration lock %q: not granted within %v (another process is migrating this ledger table)", l.name, l.timeout)
		}
		if err != nil {
			// A transient error comes back at once: pause before asking
			// again.
			pause := time.NewTimer(mysqlLockPause)
			select {
			case <-ctx.Done():
				pause.Stop()
			case <-pause.C:
			}
		}
	}
}

// lockContention reports whether err, from GET_LOCK, is a lock conflict
// that a later GET_LOCK may not meet: one the dialect classifies as a
// serialization failure (TiDB's "pessimistic lock retry limit reached",
// its write conflicts), a deadlock or a lock wait timeout, or TiDB's
// GET_LOCK timing out with an unknown error ("lock wait timeout", code
// 1105, not 1205) instead of answering 0, as it does when the holder runs
// DDL while it waits.
func lockContention(err error) bool {
	switch (Dialect{}).Classify(err) {
	case dialects.ClassSerialization, dialects.ClassDeadlock, dialects.ClassLockTimeout:
		return true
	}
	var me *gomysql.MySQLError
	return errors.As(err, &me) && me != nil && me.Number == erUnknownError && me.Message == tidbLockWaitTimeout
}

// tidbLockWaitTimeout is the message of the unknown error (1105) TiDB's
// GET_LOCK answers when its wait times out while the schema changes.
const tidbLockWaitTimeout = "lock wait timeout"

// SessionUnlock releases the named lock on conn, as a plain query (see
// [mysqlLocker.literal]).
func (l mysqlLocker) SessionUnlock(ctx context.Context, conn *sql.Conn) error {
	var released sql.NullInt64
	if err := conn.QueryRowContext(ctx, "SELECT RELEASE_LOCK("+l.literal()+")").Scan(&released); err != nil {
		return fmt.Errorf("migration unlock %q: %w", l.name, err)
	}
	if !released.Valid || released.Int64 != 1 {
		return errors.New("migration unlock " + l.name + ": the lock was not held by this session")
	}
	return nil
}
