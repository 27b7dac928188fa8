package testdb

import (
	"database/sql"
	"testing"
	"time"
)

// WaitUserLock waits until MySQL shows session id waiting for a named lock
// (GET_LOCK; PROCESSLIST state "User lock"): the database's own view of a
// blocked GET_LOCK, instead of a sleep. It fails the test after 20 seconds,
// or when done (if not nil) receives first, meaning the call that should
// have waited returned.
func WaitUserLock(t testing.TB, db *sql.DB, id int64, done <-chan struct{}) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		var n int
		if err := db.QueryRow("SELECT COUNT(*) FROM information_schema.PROCESSLIST WHERE ID = ? AND STATE = 'User lock'", id).Scan(&n); err != nil {
			t.Fatalf("read the process list: %v", err)
		}
		if n > 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("after 20s MySQL does not show session %d waiting for a named lock", id)
		}
		select {
		case <-done:
			t.Fatalf("the call that should wait for a named lock in session %d returned", id)
		case <-time.After(5 * time.Millisecond):
		}
	}
}
