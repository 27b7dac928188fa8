package ledger_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/opledger/opledger/internal/testkit/testdb"
	"github.com/opledger/opledger/internal/txledger"
	"github.com/opledger/opledger/ledger"
)

// TestClaimLockWait: ClaimRequest.LockWait bounds the claim inside its own
// statement where the dialect can (PostgreSQL): a claim of an identity
// another transaction holds waits on it (the database shows it blocked)
// and fails with ErrInProgress after about the bound, the bound is lock_timeout for the rest of that transaction only,
// and the next transaction on the same connection has the session's own
// value again, after a commit and after a failure alike. Elsewhere Claim
// refuses a LockWait with ErrInvalid, and BoundsLockWait says so.
func TestClaimLockWait(t *testing.T) {
	t.Parallel()
	testdb.ForEachTarget(t, 3, func(t *testing.T, tg testdb.Target) {
		// A pool of one connection: everything on db runs on one session.
		db, other := tg.Open(t, 1), tg.Open(t, 2)
		e := newEnv(t, tg.Name, tg.Dialect, other)
		checkLockWait(t, tg, db, other, e, "claim", 250*time.Millisecond, ledger.Acquired,
			func(ctx context.Context, tx *sql.Tx, req ledger.ClaimRequest) (*ledger.Claim, error) {
				c, err := e.l.Claim(ctx, tx, req)
				if err == nil && c.Acquired() {
					err = e.l.Complete(ctx, tx, c, ledger.Result{Response: []byte("r")})
				}
				return c, err
			})
	})
}

// checkLockWait checks op, a ledger operation done by do in tx, under a
// bound on its lock waits. Where the store bounds lock waits
// (PostgreSQL): an operation whose bound meets no lock has the bound as
// lock_timeout for the rest of its transaction (it must return won), and
// the next transaction on the same connection has the session's own value
// again; an operation on an identity that another open transaction holds
// waits on it (the database shows it blocked), fails with ErrInProgress
// after about the bound, and again leaves the session's value and session
// as they were; a negative bound is ErrInvalid. Elsewhere op must refuse a
// bound with ErrInvalid (boundsOnPostgres). It reports whether the store
// bounds lock waits. db is a pool of one connection; other holds the
// identity.
func checkLockWait(t *testing.T, tg testdb.Target, db, other *sql.DB, e *env, op string, bound time.Duration, won ledger.ClaimOutcome,
	do func(context.Context, *sql.Tx, ledger.ClaimRequest) (*ledger.Claim, error)) bool {
	t.Helper()
	ctx := context.Background()
	req := ledger.ClaimRequest{Identity: testdb.ID(t, "tenant-a", method, "bounded-"+op), Fingerprint: fp("bounded-" + op), LockWait: bound}
	if !boundsOnPostgres(t, tg, db, e, op, func(tx *sql.Tx) error {
		_, err := do(ctx, tx, req)
		return err
	}) {
		return false
	}
	show := func(q ledger.Querier) string { return lockTimeout(t, q) }
	before := show(db)
	pid := poolSession(t, tg, db)

	// A bound that meets no lock: set for the transaction, gone after.
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback()
	c, err := do(ctx, tx, req)
	if err != nil || c.Outcome != won {
		t.Fatalf("bounded %s: %+v %v", op, c, err)
	}
	if got, want := show(tx), fmt.Sprintf("%dms", bound.Milliseconds()); got != want {
		t.Fatalf("lock_timeout after the bounded %s %q, want %s", op, got, want)
	}
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
	if after := show(db); after != before {
		t.Fatalf("lock_timeout in the next transaction %q, want the session's %q", after, before)
	}

	// A wait past the bound on a holder of the identity, which the
	// database shows blocked on the holder.
	held := ledger.ClaimRequest{Identity: testdb.ID(t, "tenant-a", method, "held-"+op), Fingerprint: fp("held")}
	holder, err := other.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer holder.Rollback()
	if c, err := do(ctx, holder, held); err != nil || c.Outcome != won {
		t.Fatalf("holder: %+v %v", c, err)
	}
	hid := testdb.SessionID(t, tg.Dialect, holder)
	tx, err = db.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback()
	done := make(chan struct{})
	var (
		took time.Duration
		werr error
	)
	bounded := held
	bounded.LockWait = bound
	start := time.Now()
	go func() {
		defer close(done)
		_, werr = do(ctx, tx, bounded)
		took = time.Since(start)
	}()
	testdb.WaitBlocked(t, other, tg.Dialect, hid, 1, done)
	<-done
	tx.Rollback()
	if !errors.Is(werr, ledger.ErrInProgress) || took < bound || took > 5*time.Second {
		t.Fatalf("%s of a held identity: %v after %v, want ErrInProgress after about %v", op, werr, took, bound)
	}
	if after := show(db); after != before {
		t.Fatalf("lock_timeout after the failed transaction %q, want the session's %q", after, before)
	}
	if now := poolSession(t, tg, db); now != pid {
		t.Fatalf("the pool's session is now %d, was %d", now, pid)
	}
	negative := held
	negative.LockWait = -time.Second
	if _, err := do(ctx, holder, negative); !errors.Is(err, ledger.ErrInvalid) {
		t.Fatalf("negative lock wait: %v, want ErrInvalid", err)
	}
	return true
}

// lockTimeout returns lock_timeout as q's session shows it.
func lockTimeout(t *testing.T, q ledger.Querier) string {
	t.Helper()
	var v string
	if err := q.QueryRowContext(context.Background(), "SHOW lock_timeout").Scan(&v); err != nil {
		t.Fatal(err)
	}
	return v
}

// boundsOnPostgres reports whether the target is PostgreSQL, where e's
// store must bound lock waits. Elsewhere it checks that BoundsLockWait
// is false and that step, given a transaction on db, refuses its lock
// wait with ErrInvalid.
func boundsOnPostgres(t *testing.T, tg testdb.Target, db *sql.DB, e *env, op string, step func(*sql.Tx) error) bool {
	t.Helper()
	if tg.Family() == "postgres" {
		if !txledger.BoundsLockWait(e.l) {
			t.Fatal("BoundsLockWait false on PostgreSQL")
		}
		return true
	}
	if txledger.BoundsLockWait(e.l) {
		t.Fatalf("%s: BoundsLockWait true", tg.Name)
	}
	tx, err := db.BeginTx(context.Background(), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback()
	if err := step(tx); !errors.Is(err, ledger.ErrInvalid) {
		t.Fatalf("%s with a lock wait the dialect cannot bound: %v, want ErrInvalid", op, err)
	}
	return false
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

// TestRecordLockWait: Record honours ClaimRequest.LockWait inside its own
// statements where the dialect can (PostgreSQL), as Claim does: a record
// of an identity that another open transaction has recorded waits on that
// transaction (the database shows it blocked) and fails with ErrInProgress
// after about the bound; the bound is lock_timeout for the rest of the
// recording transaction only, gone in the next transaction on the same
// connection after a commit and after a failure alike; a bounded replay
// and a bounded take-over of an expired entry work as unbounded ones.
// Elsewhere Record refuses a LockWait with ErrInvalid (the dialect
// records but cannot bound the record), and BoundsLockWait says so.
func TestRecordLockWait(t *testing.T) {
	t.Parallel()
	testdb.ForEachTarget(t, 3, func(t *testing.T, tg testdb.Target) {
		ctx := context.Background()
		const bound = 500 * time.Millisecond
		// A pool of one connection: everything on db runs on one session.
		db, other := tg.Open(t, 1), tg.Open(t, 2)
		e := newEnv(t, tg.Name, tg.Dialect, other)
		res := ledger.Result{Response: []byte("recorded"), TypeName: "t.Resp"}
		if !checkLockWait(t, tg, db, other, e, "record", bound, ledger.Recorded,
			func(ctx context.Context, tx *sql.Tx, req ledger.ClaimRequest) (*ledger.Claim, error) {
				return e.l.Record(ctx, tx, req, res)
			}) {
			return
		}

		// A bounded replay of the entry checkLockWait recorded.
		req := ledger.ClaimRequest{Identity: testdb.ID(t, "tenant-a", method, "bounded-record"), Fingerprint: fp("bounded-record"), LockWait: bound}
		tx, err := db.BeginTx(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		defer tx.Rollback()
		c, err := e.l.Record(ctx, tx, req, ledger.Result{Response: []byte("again")})
		tx.Rollback()
		if err != nil || c.Outcome != ledger.Replay || string(c.Result.Response) != "recorded" {
			t.Fatalf("bounded replay: %+v %v", c, err)
		}

		// A bounded take-over of an expired entry (the bounded TakeOver).
		t0 := time.Now()
		old := e.store(t, ledger.WithRetention(time.Hour), ledger.WithClock(func() time.Time { return t0.Add(-2 * time.Hour) }))
		expired := testdb.ID(t, "tenant-a", method, "expired-record")
		tx, err = db.BeginTx(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		defer tx.Rollback()
		if c, err := old.Record(ctx, tx, ledger.ClaimRequest{Identity: expired, Fingerprint: fp("old")}, ledger.Result{Response: []byte("old")}); err != nil || !c.Recorded() {
			t.Fatalf("expired entry: %+v %v", c, err)
		}
		if err := tx.Commit(); err != nil {
			t.Fatal(err)
		}
		tx, err = db.BeginTx(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		defer tx.Rollback()
		c, err = e.l.Record(ctx, tx, ledger.ClaimRequest{Identity: expired, Fingerprint: fp("new"), LockWait: bound}, ledger.Result{Response: []byte("new")})
		if err != nil || !c.Recorded() {
			t.Fatalf("bounded take-over: %+v %v", c, err)
		}
		if err := tx.Commit(); err != nil {
			t.Fatal(err)
		}
	})
}
