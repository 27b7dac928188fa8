package dialectkit_test

import (
	"context"
	"database/sql"
	"math"
	"sync"
	"testing"

	"github.com/opledger/opledger/dialects"
	"github.com/opledger/opledger/internal/dialectkit"
	"github.com/opledger/opledger/internal/testkit/testdb"
)

// ownSessionID is each family's own function for the session's id, which
// dialectkit.Sessions.SessionID must agree with.
var ownSessionID = map[string]string{
	"postgres": "SELECT pg_backend_pid()",
	"mysql":    "SELECT CONNECTION_ID()",
}

// TestSessions: on every target whose dialect implements dialectkit.Sessions
// (PostgreSQL and MySQL), SessionID is the database's id of the session,
// BlockedBy counts the sessions waiting for a row lock the session holds,
// and Kill ends the session, so that its commit fails and its lock goes.
func TestSessions(t *testing.T) {
	t.Parallel()
	testdb.ForEachTarget(t, 5, func(t *testing.T, tg testdb.Target) {
		db := tg.Open(t, 5)
		ss := tg.Dialect.(dialectkit.Sessions)
		d := tg.Dialect
		ctx := context.Background()
		tbl := testdb.ScratchTable(t, db, d, "(k INTEGER PRIMARY KEY, v INTEGER NOT NULL)")
		if _, err := db.ExecContext(ctx, "INSERT INTO "+tbl+" (k, v) VALUES (1, 0)"); err != nil {
			t.Fatal(err)
		}
		update := "UPDATE " + tbl + " SET v = " + d.Placeholder(1) + " WHERE k = 1"
		insert := "INSERT INTO " + tbl + " (k, v) VALUES (2, " + d.Placeholder(1) + ")"

		// SessionID agrees with the database, is stable on a connection
		// and differs between sessions.
		conn, err := db.Conn(ctx)
		if err != nil {
			t.Fatal(err)
		}
		var own int64
		if err := conn.QueryRowContext(ctx, ownSessionID[tg.Family()]).Scan(&own); err != nil {
			t.Fatal(err)
		}
		if a, b := testdb.ConnSessionID(t, d, conn), testdb.ConnSessionID(t, d, conn); a != own || b != own {
			t.Fatalf("SessionID %d then %d on one connection, the database says %d", a, b, own)
		}
		other, err := db.BeginTx(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		if id := testdb.SessionID(t, d, other); id == own {
			t.Fatalf("two sessions share id %d", id)
		}
		other.Rollback()
		conn.Close()

		// The holder updates row 1 and inserts row 2, uncommitted.
		holder, err := db.BeginTx(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		defer holder.Rollback()
		hid := testdb.SessionID(t, d, holder)
		if _, err := holder.ExecContext(ctx, update, 1); err != nil {
			t.Fatal(err)
		}
		if _, err := holder.ExecContext(ctx, insert, 1); err != nil {
			t.Fatal(err)
		}
		blocked := func(id int64) int {
			t.Helper()
			n, err := ss.BlockedBy(ctx, db, id)
			if err != nil {
				t.Fatalf("BlockedBy(%d): %v", id, err)
			}
			return n
		}
		if n := blocked(hid); n != 0 {
			t.Fatalf("BlockedBy(holder) = %d before anyone waits", n)
		}

		// One waiter on the updated row, then one on the inserted key:
		// each waits for the holder itself.
		var wg sync.WaitGroup
		var once sync.Once
		returned := make(chan struct{})
		waiters := make([]*sql.Tx, 2)
		wids := make([]int64, 2)
		errs := make([]error, 2)
		for i, stmt := range []string{update, insert} {
			w, err := db.BeginTx(ctx, nil)
			if err != nil {
				t.Fatal(err)
			}
			defer w.Rollback()
			waiters[i], wids[i] = w, testdb.SessionID(t, d, w)
			wg.Add(1)
			go func() {
				defer wg.Done()
				defer once.Do(func() { close(returned) })
				_, errs[i] = w.ExecContext(ctx, stmt, 2+i)
			}()
			testdb.WaitBlocked(t, db, d, hid, i+1, returned)
			if n := blocked(hid); n != i+1 {
				t.Fatalf("BlockedBy(holder) = %d with %d waiters", n, i+1)
			}
		}
		if n := blocked(wids[0]); n != 0 {
			t.Fatalf("BlockedBy(a waiter) = %d, want 0: nobody waits for it", n)
		}

		// Kill ends the holder's session: its commit fails, its locks are
		// gone and both waiters get their rows.
		if err := ss.Kill(ctx, db, hid); err != nil {
			t.Fatalf("Kill: %v", err)
		}
		wg.Wait()
		for i, err := range errs {
			if err != nil {
				t.Fatalf("waiter %d after the holder was killed: %v", i, err)
			}
			if err := waiters[i].Rollback(); err != nil {
				t.Fatal(err)
			}
		}
		err = holder.Commit()
		if err == nil {
			t.Fatal("the killed session's commit succeeded")
		}
		if c := d.Classify(err); c != dialects.ClassConnection {
			t.Fatalf("commit of the killed session: %v (%v), want a connection failure", err, c)
		}
		if n := blocked(hid); n != 0 {
			t.Fatalf("BlockedBy(killed session) = %d", n)
		}
		var v, rows int
		if err := db.QueryRowContext(ctx, "SELECT v, (SELECT COUNT(*) FROM "+tbl+") FROM "+tbl+" WHERE k = 1").Scan(&v, &rows); err != nil || v != 0 || rows != 1 {
			t.Fatalf("v = %d, %d rows (%v) after the holder was killed and the waiters rolled back, want 0 and 1", v, rows, err)
		}
		if err := ss.Kill(ctx, db, math.MaxInt32); err == nil {
			t.Fatal("Kill of a session that does not exist succeeded")
		}
	}, "postgres", "mysql")
}
