package dialectkit

import (
	"context"
	"database/sql"

	"github.com/opledger/opledger/dialects"
)

// Sessions is implemented by dialects whose database shows its sessions,
// who waits for whose locks, and can end a session. Tools that test a
// ledger use it to wait on the database's own view of a blocked claim
// instead of a timer, and to cut a connection in the middle of a
// transaction (the conformance suite's faults case).
//
// It is optional: check for it with a type assertion.
type Sessions interface {
	// SessionID returns the database's id of the session tx runs on
	// (PostgreSQL's backend pid, MySQL's connection id).
	SessionID(ctx context.Context, tx *sql.Tx) (int64, error)
	// BlockedBy returns how many sessions are waiting, right now, for a
	// lock that session id holds. db is any other connection.
	BlockedBy(ctx context.Context, db *sql.DB, id int64) (int, error)
	// Kill ends session id from another connection of db, as a crash or
	// a network cut would: its open transaction rolls back. The database
	// user needs the right to do so.
	Kill(ctx context.Context, db *sql.DB, id int64) error
}

// Described is implemented by dialects that tell testing tools how their
// database behaves under concurrency. The conformance suite derives its
// default capabilities from it.
type Described interface {
	// Traits returns the database's traits.
	Traits() Traits
}

// Traits describe how a database family behaves under concurrent claims.
type Traits struct {
	// IsolationLevels lists the isolation levels the database offers that
	// the ledger supports, the database's default first. Empty means
	// sql.LevelDefault only.
	IsolationLevels []sql.IsolationLevel
	// SerialWriters means one writer at a time, the write lock taken when
	// a transaction begins (SQLite with immediate transactions): a claim
	// never waits inside a transaction, nothing deadlocks or needs a
	// retry, and a wait for the write lock, spent in the database's busy
	// handler, does not end when the context is cancelled.
	SerialWriters bool
}

// TraitsOf returns d's traits when d implements [Described], else traits
// with sql.LevelDefault as the only isolation level.
func TraitsOf(d dialects.Dialect) Traits {
	var t Traits
	if ds, ok := d.(Described); ok {
		t = ds.Traits()
	}
	if len(t.IsolationLevels) == 0 {
		t.IsolationLevels = []sql.IsolationLevel{sql.LevelDefault}
	}
	return t
}
