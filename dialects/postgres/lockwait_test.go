package postgres_test

import (
	"context"
	"testing"
	"time"

	"github.com/opledger/opledger/dialects"
	"github.com/opledger/opledger/dialects/postgres"
	"github.com/opledger/opledger/internal/testdb"
)

// BoundLockWait sets lock_timeout for the transaction only: it is gone
// from the same connection once the transaction ends.
func TestBoundLockWait(t *testing.T) {
	for _, tg := range testdb.Targets() {
		if tg.Dialect.Name() != "postgres" {
			continue
		}
		t.Run(tg.Name, func(t *testing.T) {
			db := tg.Open(t, 1)
			ctx := context.Background()
			conn, err := db.Conn(ctx)
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			var before string
			if err := conn.QueryRowContext(ctx, "SHOW lock_timeout").Scan(&before); err != nil {
				t.Fatal(err)
			}
			var lw dialects.LockWaiter = postgres.New()
			if lw.LockWaitScope() != dialects.LockWaitTransaction {
				t.Fatalf("scope %v", lw.LockWaitScope())
			}
			tx, err := conn.BeginTx(ctx, nil)
			if err != nil {
				t.Fatal(err)
			}
			restore, err := lw.BoundLockWait(ctx, tx, 1500*time.Microsecond)
			if err != nil || restore != nil {
				t.Fatalf("BoundLockWait: %v, restore %v", err, restore != nil)
			}
			var in string
			if err := tx.QueryRowContext(ctx, "SHOW lock_timeout").Scan(&in); err != nil {
				t.Fatal(err)
			}
			if err := tx.Commit(); err != nil {
				t.Fatal(err)
			}
			var after string
			if err := conn.QueryRowContext(ctx, "SHOW lock_timeout").Scan(&after); err != nil {
				t.Fatal(err)
			}
			if in != "2ms" || after != before {
				t.Fatalf("lock_timeout in the transaction %q (want 2ms, rounded up), after %q (want %q)", in, after, before)
			}
			if _, err := lw.BoundLockWait(ctx, conn, 0); err == nil {
				t.Fatal("zero bound accepted")
			}
		})
	}
}
