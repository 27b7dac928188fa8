package sqlitedialect

import (
	"context"
	"database/sql"
	"embed"
	"fmt"
	"io/fs"
	"time"

	"github.com/opledger/opledger/dialects"
	"github.com/opledger/opledger/internal/dialectkit"
)

//go:embed migrations/*.sql
var migrationFiles embed.FS

var (
	_ dialects.Schema      = Dialect{}
	_ dialectkit.Described = Dialect{}
)

// Migrations returns the ledger's SQLite migrations, serialised across
// connections and processes by the database's write lock: the migration's
// connection holds one IMMEDIATE transaction for the whole migration, in
// which each of goose's transactions runs as a savepoint (see
// dialects.Migrations.LockIsTransaction). A migration is then also all or
// nothing: another connection sees the version table and the tables
// before it or after it, never in between.
func (Dialect) Migrations() dialects.Migrations {
	sub, err := fs.Sub(migrationFiles, "migrations")
	if err != nil {
		panic(err) // the embedded folder always exists
	}
	return dialects.Migrations{
		FS:                sub,
		Goose:             "sqlite3",
		Lock:              func(string) dialects.SessionLocker { return writeLock{} },
		LockIsTransaction: true,
	}
}

// Migration lock timing: BEGIN IMMEDIATE is tried without waiting (so that
// a cancelled context ends the wait at once), every writeLockPause, for
// writeLockTimeout in all.
const (
	writeLockTimeout = 5 * time.Minute
	writeLockPause   = 20 * time.Millisecond
)

// writeLock is the SQLite migration lock: an IMMEDIATE transaction, the
// database's one write lock, open on the migration's connection until
// SessionUnlock commits it.
type writeLock struct{}

// SessionLock begins the IMMEDIATE transaction on conn. It tries with the
// connection's busy_timeout set to 0 (and put back afterwards); a try that
// meets another writer is repeated after a pause, for five minutes in all
// or until ctx ends.
func (writeLock) SessionLock(ctx context.Context, conn *sql.Conn) error {
	var prev int64
	if err := conn.QueryRowContext(ctx, "PRAGMA busy_timeout").Scan(&prev); err != nil {
		return fmt.Errorf("sqlite: migration lock: %w", err)
	}
	if err := setBusyTimeout(ctx, conn, 0); err != nil {
		return fmt.Errorf("sqlite: migration lock: %w", err)
	}
	defer setBusyTimeout(context.WithoutCancel(ctx), conn, prev)
	deadline := time.Now().Add(writeLockTimeout)
	for {
		_, err := conn.ExecContext(ctx, "BEGIN IMMEDIATE")
		switch {
		case err == nil:
			return nil
		case (Dialect{}).Classify(err) != dialects.ClassLockTimeout:
			return fmt.Errorf("sqlite: migration lock: %w", err)
		case ctx.Err() != nil:
			return fmt.Errorf("sqlite: migration lock: %w", ctx.Err())
		case time.Now().After(deadline):
			return fmt.Errorf("sqlite: migration lock not granted within %v (another connection is writing): %w", writeLockTimeout, err)
		}
		pause := time.NewTimer(writeLockPause)
		select {
		case <-ctx.Done():
			pause.Stop()
		case <-pause.C:
		}
	}
}

// SessionUnlock commits the transaction SessionLock began: the migrations
// applied in it (each a savepoint) become visible together. If COMMIT
// fails, the transaction is rolled back.
func (writeLock) SessionUnlock(ctx context.Context, conn *sql.Conn) error {
	if _, err := conn.ExecContext(ctx, "COMMIT"); err != nil {
		_, _ = conn.ExecContext(ctx, "ROLLBACK")
		return fmt.Errorf("sqlite: migration unlock: %w", err)
	}
	return nil
}

// Traits: the default isolation level only (SQLite transactions are
// serializable), and serial writers, with the write lock taken at BEGIN
// when the pool is opened with [DSN].
func (Dialect) Traits() dialectkit.Traits { return dialectkit.Traits{SerialWriters: true} }
