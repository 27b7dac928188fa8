package pgdialect_test

import (
	"context"
	"database/sql"
	"testing"
	"time"

	"github.com/opledger/opledger/dialects"
	"github.com/opledger/opledger/internal/pgdialect"
	"github.com/opledger/opledger/internal/testkit/testdb"
)

// TestBeginBounded: BeginBounded sets lock_timeout for the transaction
// only (rounded up to milliseconds), with the caller's options; a wait past
// it fails with a lock timeout; and the setting is gone from the same
// connection once the transaction ends.
func TestBeginBounded(t *testing.T) {
	t.Parallel()
	var lw dialects.LockWaiter = pgdialect.New()
	d := pgdialect.New()
	testdb.ForEachTarget(t, 3, func(t *testing.T, tg testdb.Target) {
		ctx := context.Background()
		// A pool of one connection: everything on db runs on one session.
		db, other := tg.Open(t, 1), tg.Open(t, 2)
		show := func(q interface {
			QueryRowContext(context.Context, string, ...any) *sql.Row
		}, setting string) string {
			t.Helper()
			var v string
			if err := q.QueryRowContext(ctx, "SHOW "+setting).Scan(&v); err != nil {
				t.Fatal(err)
			}
			return v
		}
		before := show(db, "lock_timeout")
		var pid int64
		if err := db.QueryRowContext(ctx, "SELECT pg_backend_pid()").Scan(&pid); err != nil {
			t.Fatal(err)
		}

		tx, release, err := lw.BeginBounded(ctx, db, &sql.TxOptions{Isolation: sql.LevelSerializable, ReadOnly: true}, 1500*time.Microsecond)
		if err != nil || release == nil {
			t.Fatalf("BeginBounded: %v (release %v)", err, release != nil)
		}
		if got := show(tx, "lock_timeout"); got != "2ms" {
			t.Fatalf("lock_timeout in the transaction %q, want 2ms (rounded up)", got)
		}
		if iso, ro := show(tx, "transaction_isolation"), show(tx, "transaction_read_only"); iso != "serializable" || ro != "on" {
			t.Fatalf("transaction options: isolation %q, read only %q; want serializable, on", iso, ro)
		}
		if err := tx.Commit(); err != nil {
			t.Fatal(err)
		}
		release()
		conn, err := db.Conn(ctx)
		if err != nil {
			t.Fatal(err)
		}
		id := testdb.ConnSessionID(t, d, conn)
		conn.Close()
		if id != pid {
			t.Fatalf("the pool's session is now %d, was %d", id, pid)
		}
		if after := show(db, "lock_timeout"); after != before {
			t.Fatalf("lock_timeout after the transaction %q, want %q", after, before)
		}

		// A wait past the bound: a row lock another session holds.
		tbl := testdb.ScratchTable(t, other, d, "(k INTEGER PRIMARY KEY, v INTEGER NOT NULL)")
		if _, err := other.ExecContext(ctx, "INSERT INTO "+tbl+" VALUES (1, 0)"); err != nil {
			t.Fatal(err)
		}
		holder, err := other.BeginTx(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		defer holder.Rollback()
		if _, err := holder.ExecContext(ctx, "UPDATE "+tbl+" SET v = 1 WHERE k = 1"); err != nil {
			t.Fatal(err)
		}
		tx, release, err = lw.BeginBounded(ctx, db, nil, 200*time.Millisecond)
		if err != nil {
			t.Fatal(err)
		}
		start := time.Now()
		_, err = tx.ExecContext(ctx, "UPDATE "+tbl+" SET v = 2 WHERE k = 1")
		took := time.Since(start)
		tx.Rollback()
		release()
		if c := d.Classify(err); c != dialects.ClassLockTimeout || took < 200*time.Millisecond || took > 10*time.Second {
			t.Fatalf("wait past the bound: %v (%v) after %v, want a lock timeout after about 200ms", err, c, took)
		}
		if after := show(db, "lock_timeout"); after != before {
			t.Fatalf("lock_timeout after the failed transaction %q, want %q", after, before)
		}
	}, "postgres")
}
