package mysqldialect_test

import (
	"context"
	"database/sql"
	"fmt"
	"testing"
	"time"

	"github.com/opledger/opledger/dialects"
	"github.com/opledger/opledger/internal/testkit/testdb"
)

// lockWait reads innodb_lock_wait_timeout of q's session.
func lockWait(t *testing.T, q interface {
	QueryRowContext(context.Context, string, ...any) *sql.Row
}) int64 {
	t.Helper()
	var s int64
	if err := q.QueryRowContext(context.Background(), "SELECT @@SESSION.innodb_lock_wait_timeout").Scan(&s); err != nil {
		t.Fatal(err)
	}
	return s
}

// TestBeginBounded: the bound applies inside the transaction (whole
// seconds, at least 1), a wait past it fails with a lock timeout, release
// puts the session's previous value back on that connection, and the
// pool's other connections never see it.
func TestBeginBounded(t *testing.T) {
	testdb.Parallel(t, "mysql", 3)
	var d dialects.Dialect = testdb.MySQLDialect(t)
	lw, ok := d.(dialects.LockWaiter)
	if !ok {
		t.Fatal("the MySQL dialect is not a LockWaiter")
	}
	open := testdb.OpenMySQL(nil)
	db, other := open(t, 2), open(t, 1)
	ctx := context.Background()
	tbl := testdb.ScratchTable(t, other, d, "(k INT PRIMARY KEY, v INT NOT NULL)")
	if _, err := other.ExecContext(ctx, "INSERT INTO "+tbl+" VALUES (1, 0)"); err != nil {
		t.Fatal(err)
	}

	// Each pooled connection gets a session value of its own (not the
	// global one), which release must put back.
	var global int64
	if err := other.QueryRowContext(ctx, "SELECT @@GLOBAL.innodb_lock_wait_timeout").Scan(&global); err != nil {
		t.Fatal(err)
	}
	prev := global + 7
	for _, conn := range testdb.PooledConns(t, db, d) {
		if _, err := conn.ExecContext(ctx, fmt.Sprintf("SET SESSION innodb_lock_wait_timeout = %d", prev)); err != nil {
			t.Fatal(err)
		}
		conn.Close()
	}

	tx, release, err := lw.BeginBounded(ctx, db, nil, 300*time.Millisecond)
	if err != nil || release == nil {
		t.Fatalf("BeginBounded: %v (release %v)", err, release != nil)
	}
	sid := testdb.SessionID(t, d, tx)
	if during := lockWait(t, tx); during != 1 {
		t.Fatalf("bound in the transaction %d, want 1 (whole seconds, at least 1)", during)
	}
	// The bounded connection is out of the pool: this runs on the other.
	if s := lockWait(t, db); s != prev {
		t.Fatalf("another pooled connection's bound is %d, want its own %d: the bound leaked", s, prev)
	}

	holder, err := other.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer holder.Rollback()
	if _, err := holder.ExecContext(ctx, "UPDATE "+tbl+" SET v = 1 WHERE k = 1"); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	_, err = tx.ExecContext(ctx, "UPDATE "+tbl+" SET v = 2 WHERE k = 1")
	took := time.Since(start)
	tx.Rollback()
	if d.Classify(err) != dialects.ClassLockTimeout || took < 900*time.Millisecond || took > 10*time.Second {
		t.Fatalf("wait past the bound: %v after %v, want a lock timeout after about 1 s", err, took)
	}
	holder.Rollback()
	release()

	pooled := testdb.PooledConns(t, db, d)
	conn, ok := pooled[sid]
	if !ok || len(pooled) != 2 {
		t.Fatalf("the pool holds sessions %v, want the bounded session %d back among two", keys(pooled), sid)
	}
	for id, c := range pooled {
		if s := lockWait(t, c); s != prev {
			t.Fatalf("session %d (bounded: %v): innodb_lock_wait_timeout %d after release, want %d", id, id == sid, s, prev)
		}
		if c != conn {
			c.Close()
		}
	}
	conn.Close()

	for _, bad := range []time.Duration{0, -time.Second} {
		if _, _, err := lw.BeginBounded(ctx, db, nil, bad); err == nil {
			t.Fatalf("bound %v accepted", bad)
		}
	}
}

// TestBeginBoundedDiscardsUnrestored: when release cannot put the value
// back (here because the session was killed under the transaction), the
// connection is discarded: it never returns to the pool with the bound set.
func TestBeginBoundedDiscardsUnrestored(t *testing.T) {
	testdb.Parallel(t, "mysql", 3)
	d := testdb.MySQLDialect(t)
	open := testdb.OpenMySQL(nil)
	db, other := open(t, 2), open(t, 1)
	ctx := context.Background()
	tx, release, err := d.BeginBounded(ctx, db, nil, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	sid := testdb.SessionID(t, d, tx)
	if err := d.Kill(ctx, other, sid); err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(); err == nil {
		t.Fatal("commit on a killed session succeeded")
	}
	release()
	if n := db.Stats().OpenConnections; n != 0 {
		t.Fatalf("%d connections open after release of a killed session, want it discarded", n)
	}
	pooled := testdb.PooledConns(t, db, d)
	if _, ok := pooled[sid]; ok {
		t.Fatalf("the killed session %d came back to the pool", sid)
	}
	for id, c := range pooled {
		var global int64
		if err := c.QueryRowContext(ctx, "SELECT @@GLOBAL.innodb_lock_wait_timeout").Scan(&global); err != nil {
			t.Fatal(err)
		}
		if s := lockWait(t, c); s != global {
			t.Fatalf("new session %d: innodb_lock_wait_timeout %d, want the global %d", id, s, global)
		}
		c.Close()
	}
}

func keys(m map[int64]*sql.Conn) []int64 {
	var out []int64
	for k := range m {
		out = append(out, k)
	}
	return out
}
