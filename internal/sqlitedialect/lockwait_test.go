package sqlitedialect_test

import (
	"context"
	"database/sql"
	"path/filepath"
	"testing"
	"time"

	_ "github.com/mattn/go-sqlite3"

	"github.com/opledger/opledger/dialects"
	"github.com/opledger/opledger/internal/sqlitedialect"
)

func openDB(t *testing.T, path string, conns int) *sql.DB {
	t.Helper()
	db, err := sql.Open("sqlite3", sqlitedialect.DSN(path, 5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	db.SetMaxOpenConns(conns)
	db.SetMaxIdleConns(conns)
	t.Cleanup(func() {
		if n := db.Stats().InUse; n != 0 {
			t.Errorf("%d connections still in use", n)
		}
		db.Close()
	})
	return db
}

func busyTimeout(t *testing.T, q interface {
	QueryRowContext(context.Context, string, ...any) *sql.Row
}) int {
	t.Helper()
	var ms int
	if err := q.QueryRowContext(context.Background(), "PRAGMA busy_timeout").Scan(&ms); err != nil {
		t.Fatal(err)
	}
	return ms
}

// pooledBusyTimeouts takes both connections of db's pool of two and
// returns their busy_timeouts.
func pooledBusyTimeouts(t *testing.T, db *sql.DB) (ms [2]int) {
	t.Helper()
	for i := range ms {
		conn, err := db.Conn(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		ms[i] = busyTimeout(t, conn)
	}
	return ms
}

// TestBeginBounded: BeginBounded sets busy_timeout on a connection of its
// own before BEGIN, so a BEGIN IMMEDIATE behind a held write lock fails
// within the bound with a lock timeout; release (also the one BeginBounded
// runs itself when BEGIN fails) puts the connection's previous value back;
// the pool's other connections never see the bound.
func TestBeginBounded(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "lw.db")
	db := openDB(t, path, 2)
	ctx := context.Background()
	var lw dialects.LockWaiter = sqlitedialect.New()

	// Both pooled connections get a session value of their own, which
	// release must put back (not the DSN's 5000).
	var conns []*sql.Conn
	for range 2 {
		conn, err := db.Conn(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if err := conn.QueryRowContext(ctx, "PRAGMA busy_timeout = 1234").Scan(new(int)); err != nil {
			t.Fatal(err)
		}
		conns = append(conns, conn)
	}
	for _, c := range conns {
		c.Close()
	}

	// The write lock is held by another pool: BEGIN fails within the bound.
	holder, err := openDB(t, path, 1).BeginTx(ctx, nil) // immediate: takes the write lock
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	tx, release, err := lw.BeginBounded(ctx, db, nil, 200*time.Millisecond)
	took := time.Since(start)
	if err == nil {
		tx.Rollback()
		release()
		t.Fatal("BEGIN IMMEDIATE succeeded behind a held write lock")
	}
	if c := sqlitedialect.New().Classify(err); c != dialects.ClassLockTimeout || took < 150*time.Millisecond || took > 4*time.Second {
		t.Fatalf("BEGIN: %v (%v) after %v, want a lock timeout within the bound", err, c, took)
	}
	if tx != nil || release != nil {
		t.Fatal("a failed BeginBounded returned a transaction or a release")
	}
	if got := db.Stats().OpenConnections; got != 2 {
		t.Fatalf("%d open connections after the failed BEGIN, want both kept", got)
	}
	if got := pooledBusyTimeouts(t, db); got != [2]int{1234, 1234} {
		t.Fatalf("the pool's busy_timeouts %v after the failed BEGIN, want each connection's own 1234 back", got)
	}
	if err := holder.Rollback(); err != nil {
		t.Fatal(err)
	}

	// Without a holder: the bound is in force in the transaction only.
	tx, release, err = lw.BeginBounded(ctx, db, nil, 200*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	if ms := busyTimeout(t, tx); ms != 200 {
		t.Fatalf("busy_timeout in the transaction %d, want 200", ms)
	}
	if ms := busyTimeout(t, db); ms != 1234 {
		t.Fatalf("another pooled connection has busy_timeout %d, want 1234: the bound leaked", ms)
	}
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
	release()
	if got := pooledBusyTimeouts(t, db); got != [2]int{1234, 1234} {
		t.Fatalf("the pool's busy_timeouts %v after release, want 1234 on each", got)
	}

	for _, d := range []time.Duration{0, -time.Second} {
		if _, _, err := lw.BeginBounded(ctx, db, nil, d); err == nil {
			t.Fatalf("bound %v accepted", d)
		}
	}
}
