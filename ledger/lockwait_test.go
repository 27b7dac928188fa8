package ledger_test

import (
	"context"
	"database/sql"
	"errors"
	"testing"
	"time"

	"github.com/opledger/opledger/internal/testdb"
	"github.com/opledger/opledger/ledger"
)

// TestClaimLockWait: ClaimRequest.LockWait bounds the claim inside its own
// statement where the dialect can (PostgreSQL): a claim of an identity
// another transaction holds fails with ErrInProgress after about the
// bound, the bound is lock_timeout for the rest of that transaction only,
// and the next transaction on the same connection has the session's own
// value again, after a commit and after a failure alike. Elsewhere Claim
// refuses a LockWait with ErrInvalid, and BoundsLockWait says so.
func TestClaimLockWait(t *testing.T) {
	t.Parallel()
	testdb.ForEachTarget(t, 3, func(t *testing.T, tg testdb.Target) {
		ctx := context.Background()
		// A pool of one connection: everything on db runs on one session.
		db, other := tg.Open(t, 1), tg.Open(t, 2)
		e := newEnv(t, tg.Name, tg.Dialect, other)
		id := testdb.ID(t, "tenant-a", method, "bounded")
		req := ledger.ClaimRequest{Identity: id, Fingerprint: fp("bounded"), LockWait: 250 * time.Millisecond}
		if tg.Family() != "postgres" {
			if e.l.BoundsLockWait() {
				t.Fatalf("%s: BoundsLockWait true", tg.Name)
			}
			tx, err := db.BeginTx(ctx, nil)
			if err != nil {
				t.Fatal(err)
			}
			defer tx.Rollback()
			if _, err := e.l.Claim(ctx, tx, req); !errors.Is(err, ledger.ErrInvalid) {
				t.Fatalf("claim with a lock wait the dialect cannot bound: %v, want ErrInvalid", err)
			}
			return
		}
		if !e.l.BoundsLockWait() {
			t.Fatal("BoundsLockWait false on PostgreSQL")
		}
		show := func(q ledger.Querier) string {
			t.Helper()
			var v string
			if err := q.QueryRowContext(ctx, "SHOW lock_timeout").Scan(&v); err != nil {
				t.Fatal(err)
			}
			return v
		}
		before := show(db)
		pid := poolSession(t, tg, db)

		// A bound that meets no lock: set for the transaction, gone after.
		tx, err := db.BeginTx(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		c, err := e.l.Claim(ctx, tx, req)
		if err != nil || !c.Acquired() {
			t.Fatalf("bounded claim: %+v %v", c, err)
		}
		if got := show(tx); got != "250ms" {
			t.Fatalf("lock_timeout after the bounded claim %q, want 250ms", got)
		}
		if err := e.l.Complete(ctx, tx, c, ledger.Result{Response: []byte("r")}); err != nil {
			t.Fatal(err)
		}
		if err := tx.Commit(); err != nil {
			t.Fatal(err)
		}
		if after := show(db); after != before {
			t.Fatalf("lock_timeout in the next transaction %q, want the session's %q", after, before)
		}

		// A wait past the bound on a holder of the identity.
		held := testdb.ID(t, "tenant-a", method, "held")
		holder, err := other.BeginTx(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		defer holder.Rollback()
		if c, err := e.l.Claim(ctx, holder, ledger.ClaimRequest{Identity: held, Fingerprint: fp("held")}); err != nil || !c.Acquired() {
			t.Fatalf("holder: %+v %v", c, err)
		}
		tx, err = db.BeginTx(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		start := time.Now()
		_, err = e.l.Claim(ctx, tx, ledger.ClaimRequest{Identity: held, Fingerprint: fp("held"), LockWait: 250 * time.Millisecond})
		took := time.Since(start)
		tx.Rollback()
		if !errors.Is(err, ledger.ErrInProgress) || took < 250*time.Millisecond || took > 5*time.Second {
			t.Fatalf("claim of a held identity: %v after %v, want ErrInProgress after about 250ms", err, took)
		}
		if after := show(db); after != before {
			t.Fatalf("lock_timeout after the failed transaction %q, want the session's %q", after, before)
		}
		if now := poolSession(t, tg, db); now != pid {
			t.Fatalf("the pool's session is now %d, was %d", now, pid)
		}
		if _, err := e.l.Claim(ctx, holder, ledger.ClaimRequest{Identity: held, Fingerprint: fp("held"), LockWait: -time.Second}); !errors.Is(err, ledger.ErrInvalid) {
			t.Fatalf("negative lock wait: %v, want ErrInvalid", err)
		}
	})
}

// poolSession returns the session id of db's connection (a pool of one).
func poolSession(t *testing.T, tg testdb.Target, db *sql.DB) int64 {
	t.Helper()
	conn, err := db.Conn(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	return testdb.ConnSessionID(t, tg.Dialect, conn)
}
