package mysql

import (
	"context"
	"database/sql"
	"embed"
	"errors"
	"fmt"
	"io/fs"
	"time"

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
// process migrating the same ledger table, as goose's own lockers do.
const mysqlLockTimeout = 5 * time.Minute

// mysqlLocker serialises the kit's migrations on MySQL and MariaDB with a
// named user-level lock (GET_LOCK / RELEASE_LOCK), held by the session
// that goose runs the migrations on.
//
// goose's own MySQL locker (lock.NewMySQLTableLocker) is deliberately not
// used: it keeps its lock in a table, "goose_lock" by default, which would
// appear in the user's schema next to the application's own goose tables
// and outlive the kit's Down. A named lock creates nothing, is released
// by the server if the session dies, and its name ("opledger:" and the
// ledger table, at most 57 of the 64 characters MySQL allows) is the
// kit's own, so it never blocks the application's migrations.
type mysqlLocker struct{ name string }

func newMySQLLocker(table string) mysqlLocker { return mysqlLocker{name: "opledger:" + table} }

// SessionLock waits for the named lock on conn, at most mysqlLockTimeout
// or until ctx ends. It asks in one-second waits, so that a cancelled
// caller leaves no server-side wait behind for longer than that.
func (l mysqlLocker) SessionLock(ctx context.Context, conn *sql.Conn) error {
	deadline := time.Now().Add(mysqlLockTimeout)
	for {
		var got sql.NullInt64
		if err := conn.QueryRowContext(ctx, "SELECT GET_LOCK(?, 1)", l.name).Scan(&got); err != nil {
			return fmt.Errorf("migration lock %q: %w", l.name, err)
		}
		if got.Valid && got.Int64 == 1 {
			return nil
		}
		if !got.Valid {
			return fmt.Errorf("migration lock %q: GET_LOCK returned NULL", l.name)
		}
		if err := ctx.Err(); err != nil {
			return fmt.Errorf("migration lock %q: %w", l.name, err)
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("migration lock %q: not granted within %v (another process is migrating this ledger table)", l.name, mysqlLockTimeout)
		}
	}
}

// SessionUnlock releases the named lock on conn.
func (l mysqlLocker) SessionUnlock(ctx context.Context, conn *sql.Conn) error {
	var released sql.NullInt64
	if err := conn.QueryRowContext(ctx, "SELECT RELEASE_LOCK(?)", l.name).Scan(&released); err != nil {
		return fmt.Errorf("migration unlock %q: %w", l.name, err)
	}
	if !released.Valid || released.Int64 != 1 {
		return errors.New("migration unlock " + l.name + ": the lock was not held by this session")
	}
	return nil
}
