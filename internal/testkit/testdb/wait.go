package testdb

import (
	"context"
	"database/sql"
	"testing"
	"time"

	"github.com/opledger/opledger/dialects"
	"github.com/opledger/opledger/internal/dialectkit"
	"github.com/opledger/opledger/ledger"
)

// ID returns the identity of (caller, method, key), failing the test on
// bad input.
func ID(t testing.TB, caller, method, key string) ledger.Identity {
	t.Helper()
	id, err := ledger.NewIdentity(caller, method, key)
	if err != nil {
		t.Fatal(err)
	}
	return id
}

// WaitIdle fails unless every connection of db is back in the pool within
// five seconds (a transaction whose context ended is rolled back by
// database/sql in the background).
func WaitIdle(t testing.TB, db *sql.DB) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for db.Stats().InUse != 0 {
		if time.Now().After(deadline) {
			t.Fatalf("%d connections still in use", db.Stats().InUse)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// Sessions returns d's view of sessions, skipping the test when d has
// none (SQLite: a wait for the write lock happens in a busy handler that
// no view shows).
func Sessions(t testing.TB, d dialects.Dialect) dialectkit.Sessions {
	t.Helper()
	ss, ok := d.(dialectkit.Sessions)
	if !ok {
		t.Skipf("dialect %s shows no sessions (dialectkit.Sessions)", d.Name())
	}
	return ss
}

// SessionID returns the database's id of tx's session.
func SessionID(t testing.TB, d dialects.Dialect, tx *sql.Tx) int64 {
	t.Helper()
	id, err := Sessions(t, d).SessionID(context.Background(), tx)
	if err != nil {
		t.Fatalf("session id: %v", err)
	}
	return id
}

// blockedPoll is the pause between WaitBlocked's reads of the database's
// view. (MySQL's BlockedBy paces itself: its view is a cache that a read
// less than 100 ms after another keeps stale.)
const blockedPoll = 10 * time.Millisecond

// WaitBlocked waits until the database shows at least n sessions waiting
// for a lock that session holder holds: the database's own view of a
// blocked statement, instead of a sleep. It fails the test after 20
// seconds, or when done (if not nil) receives first, meaning a statement
// that should have blocked returned.
func WaitBlocked(t testing.TB, db *sql.DB, d dialects.Dialect, holder int64, n int, done <-chan struct{}) {
	t.Helper()
	ss := Sessions(t, d)
	deadline := time.Now().Add(20 * time.Second)
	for {
		got, err := ss.BlockedBy(context.Background(), db, holder)
		if err != nil {
			t.Fatalf("read the database's lock waits: %v", err)
		}
		if got >= n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("after 20s the database shows %d of %d sessions waiting for session %d", got, n, holder)
		}
		select {
		case <-done:
			t.Fatalf("the statement that should wait for session %d returned", holder)
		case <-time.After(blockedPoll):
		}
	}
}
