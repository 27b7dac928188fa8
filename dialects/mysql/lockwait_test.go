package mysql_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"testing"
	"time"

	"github.com/opledger/opledger/dialects"
	"github.com/opledger/opledger/dialects/mysql"
	"github.com/opledger/opledger/internal/testdb"
)

func TestLockWaitSeconds(t *testing.T) {
	cases := map[time.Duration]int64{
		time.Nanosecond:                1,
		300 * time.Millisecond:         1,
		time.Second:                    1,
		time.Second + time.Millisecond: 2,
		90 * time.Second:               90,
		1 << 62:                        1073741824,
	}
	for d, want := range cases {
		if got := mysql.LockWaitSeconds(d); got != want {
			t.Errorf("LockWaitSeconds(%v) = %d, want %d", d, got, want)
		}
	}
}

// TestBoundLockWait: the bound applies to the connection it was set on,
// a wait past it fails with a lock timeout, and restore puts the
// session's previous value back. Other pooled connections are untouched.
func TestBoundLockWait(t *testing.T) {
	var d dialects.Dialect = mysql.New()
	lw, ok := d.(dialects.LockWaiter)
	if !ok || lw.LockWaitScope() != dialects.LockWaitSession {
		t.Fatal("the MySQL dialect must be a session-scoped LockWaiter")
	}
	db := testdb.OpenMySQL(nil)(t, 4)
	ctx := context.Background()
	if _, err := lw.BoundLockWait(ctx, nil, time.Second); err == nil {
		t.Fatal("nil connection accepted")
	}
	var b [4]byte
	_, _ = rand.Read(b[:])
	tbl := "opl_lockwait_" + hex.EncodeToString(b[:])
	if _, err := db.ExecContext(ctx, "CREATE TABLE "+tbl+" (k INT PRIMARY KEY, v INT NOT NULL)"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Exec("DROP TABLE " + tbl) })
	if _, err := db.ExecContext(ctx, "INSERT INTO "+tbl+" VALUES (1, 0)"); err != nil {
		t.Fatal(err)
	}

	conn, err := db.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	var before, during int64
	if err := conn.QueryRowContext(ctx, "SELECT @@SESSION.innodb_lock_wait_timeout").Scan(&before); err != nil {
		t.Fatal(err)
	}
	if _, err := lw.BoundLockWait(ctx, conn, 0); err == nil {
		t.Fatal("zero duration accepted")
	}
	restore, err := lw.BoundLockWait(ctx, conn, 300*time.Millisecond)
	if err != nil || restore == nil {
		t.Fatalf("BoundLockWait: %v", err)
	}
	if err := conn.QueryRowContext(ctx, "SELECT @@SESSION.innodb_lock_wait_timeout").Scan(&during); err != nil || during != 1 {
		t.Fatalf("session value %d %v, want 1 (whole seconds, at least 1)", during, err)
	}
	// conn is out of the pool, so this runs on another connection.
	var otherSession, global int64
	if err := db.QueryRowContext(ctx, "SELECT @@SESSION.innodb_lock_wait_timeout, @@GLOBAL.innodb_lock_wait_timeout").Scan(&otherSession, &global); err != nil || otherSession != global {
		t.Fatalf("another connection's bound is %d (global %d) %v: the bound leaked", otherSession, global, err)
	}

	holder, err := db.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer holder.Rollback()
	if _, err := holder.ExecContext(ctx, "UPDATE "+tbl+" SET v = 1 WHERE k = 1"); err != nil {
		t.Fatal(err)
	}
	tx, err := conn.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	_, err = tx.ExecContext(ctx, "UPDATE "+tbl+" SET v = 2 WHERE k = 1")
	took := time.Since(start)
	tx.Rollback()
	if d.Classify(err) != dialects.ClassLockTimeout || took < 900*time.Millisecond || took > 2500*time.Millisecond {
		t.Fatalf("wait past the bound: %v after %v, want a lock timeout after about 1 s", err, took)
	}
	holder.Rollback()

	if err := restore(ctx); err != nil {
		t.Fatal(err)
	}
	var after int64
	if err := conn.QueryRowContext(ctx, "SELECT @@SESSION.innodb_lock_wait_timeout").Scan(&after); err != nil || after != before {
		t.Fatalf("after restore %d %v, want %d", after, err, before)
	}
}
