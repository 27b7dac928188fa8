package dialects

import (
	"context"
	"database/sql"
	"io/fs"
)

// Schema is implemented by dialects that ship the ledger's table as goose
// SQL migrations, which package migrations runs (and exports for other
// migration tools). A dialect without it can still be used with a table
// the user creates.
type Schema interface {
	// Migrations returns the dialect's migrations.
	Migrations() Migrations
}

// Migrations are a dialect's migrations of the ledger's table.
type Migrations struct {
	// FS holds the migration files at its root, named NNNNN_name.sql in
	// goose's format (-- +goose Up / -- +goose Down sections). Each file
	// is a text/template: {{.Table}} is the quoted ledger table and
	// {{.Ident "suffix"}} the quoted name "<table>_suffix" (for indexes
	// and constraints), both quoted with the dialect's QuoteIdent.
	FS fs.FS
	// Goose is goose's name for the database ("postgres", "mysql",
	// "sqlite3", …): how goose writes its version table.
	Goose string
	// Lock, when not nil, returns the session lock that serialises
	// migrations of the given ledger table across processes. Package
	// migrations takes it on a connection before goose reads or creates
	// anything (the version table included), runs goose on that same
	// session, and releases it afterwards. Nil migrates without a lock.
	Lock func(table string) SessionLocker
	// LockIsTransaction says that the lock is a transaction that
	// SessionLock begins on the session and SessionUnlock commits
	// (SQLite's IMMEDIATE transaction, the database's write lock): package
	// migrations then runs each of goose's transactions inside it as a
	// savepoint (SAVEPOINT, RELEASE, ROLLBACK TO), so the migration stays
	// under the lock from its first statement to its last.
	LockIsTransaction bool
}

// SessionLocker is a lock held by one database session, as goose's
// lock.SessionLocker: SessionLock waits for it (bounded, and ending with
// ctx), SessionUnlock releases it. A session that dies releases it too.
type SessionLocker interface {
	SessionLock(ctx context.Context, conn *sql.Conn) error
	SessionUnlock(ctx context.Context, conn *sql.Conn) error
}
