package sqlite_test

import (
	"context"
	"database/sql"
	"errors"
	"path/filepath"
	"testing"
	"time"

	_ "github.com/mattn/go-sqlite3"

	"github.com/opledger/opledger/dialects"
	"github.com/opledger/opledger/dialects/sqlite"
)

// BoundLockWait sets busy_timeout on the connection, a BEGIN IMMEDIATE
// behind a held write lock fails within it with a lock timeout, and
// restore puts the DSN's value back.
func TestBoundLockWait(t *testing.T) {
	path := filepath.Join(t.TempDir(), "lw.db")
	db, err := sql.Open("sqlite3", sqlite.DSN(path, 5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	ctx := context.Background()
	holder, err := db.BeginTx(ctx, nil) // immediate: holds the write lock
	if err != nil {
		t.Fatal(err)
	}
	defer holder.Rollback()

	conn, err := db.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	var lw dialects.LockWaiter = sqlite.New()
	if lw.LockWaitScope() != dialects.LockWaitSession {
		t.Fatalf("scope %v", lw.LockWaitScope())
	}
	restore, err := lw.BoundLockWait(ctx, conn, 200*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	var ms int
	if err := conn.QueryRowContext(ctx, "PRAGMA busy_timeout").Scan(&ms); err != nil || ms != 200 {
		t.Fatalf("busy_timeout %d %v, want 200", ms, err)
	}
	start := time.Now()
	tx, err := conn.BeginTx(ctx, nil)
	if err == nil {
		tx.Rollback()
		t.Fatal("BEGIN IMMEDIATE succeeded behind a held write lock")
	}
	if took := time.Since(start); sqlite.New().Classify(err) != dialects.ClassLockTimeout || took > 2*time.Second {
		t.Fatalf("BEGIN: %v (%v) after %v, want a lock timeout within the bound", err, sqlite.New().Classify(err), took)
	}
	if err := restore(ctx); err != nil {
		t.Fatal(err)
	}
	if err := conn.QueryRowContext(ctx, "PRAGMA busy_timeout").Scan(&ms); err != nil || ms != 5000 {
		t.Fatalf("busy_timeout after restore %d %v, want 5000", ms, err)
	}
	if _, err := lw.BoundLockWait(ctx, conn, -time.Second); err == nil || errors.Is(err, context.Canceled) {
		t.Fatal("negative bound accepted")
	}
}
