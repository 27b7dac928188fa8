package pgxledger_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/opledger/opledger/dialects/postgres"
	"github.com/opledger/opledger/internal/testkit/testdb"
	"github.com/opledger/opledger/internal/txledger"
	"github.com/opledger/opledger/ledger"
	"github.com/opledger/opledger/pgxledger"
	"github.com/opledger/opledger/txmiddleware"
)

// TestOutcomes: on every path (in the caller's transaction and pipelined,
// both orders) a new key acquires and commits with its work, the same
// request again replays the stored result without committing its work,
// another request under the key is ErrKeyReused, and an entry committed
// without a result is ErrIncomplete.
func TestOutcomes(t *testing.T) {
	testdb.Parallel(t, "postgres", 4)
	e := newEnv(t, 4)
	ctx := context.Background()
	for _, p := range paths[1:] {
		t.Run(p.name, func(t *testing.T) {
			key := "outcomes-" + p.name
			got, err := p.run(ctx, e, req(t, key), key)
			if err != nil || (got != ledger.Acquired && got != ledger.Recorded) {
				t.Fatalf("new key: %v, %v", got, err)
			}
			en, err := e.s.Lookup(ctx, e.pool, req(t, key).Identity)
			if err != nil || en.State != ledger.Completed || !sameResult(en.Result, result(key)) {
				t.Fatalf("Lookup after commit: %+v, %v", en, err)
			}
			if n := e.bizRows(t, key); n != 1 {
				t.Fatalf("%d business rows, want 1", n)
			}
			if got, err := p.run(ctx, e, req(t, key), key+"-replayed"); err != nil || got != ledger.Replay {
				t.Fatalf("same request: %v, %v; want a replay", got, err)
			}
			if n := e.bizRows(t, key+"-replayed"); n != 0 {
				t.Fatalf("the replaying unit's work committed (%d rows)", n)
			}
			other := req(t, key)
			other.Fingerprint = ledger.FingerprintOf([]byte("another request"))
			if got, err := p.run(ctx, e, other, key+"-reused"); !errors.Is(err, ledger.ErrKeyReused) {
				t.Fatalf("another request under the key: %v, %v; want ErrKeyReused", got, err)
			}
			pending := key + "-pending"
			e.commitPending(t, req(t, pending))
			if got, err := p.run(ctx, e, req(t, pending), pending); !errors.Is(err, ledger.ErrIncomplete) {
				t.Fatalf("an entry committed without a result: %v, %v; want ErrIncomplete", got, err)
			}
			if n := e.bizRows(t, key+"-reused") + e.bizRows(t, pending); n != 0 {
				t.Fatalf("%d business rows of refused units committed", n)
			}
		})
	}
}

// commitPending claims req and commits without completing it.
func (e *env) commitPending(t *testing.T, req ledger.ClaimRequest) {
	t.Helper()
	ctx := context.Background()
	tx, err := e.pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx)
	if c, err := e.s.Claim(ctx, tx, req); err != nil || !c.Acquired() {
		t.Fatalf("claim: %v %v", c, err)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
}

// TestExpired: an expired entry is taken over by the pipelined claim (it
// begins again and takes it over as Claim does), and the pipelined record
// deletes it and asks for the unit to run again, which then records.
func TestExpired(t *testing.T) {
	testdb.Parallel(t, "postgres", 4)
	e := newEnv(t, 4)
	ctx := context.Background()
	old, err := pgxledger.New(ledger.WithTable(e.table), ledger.WithClock(func() time.Time { return time.Now().Add(-48 * time.Hour) }))
	if err != nil {
		t.Fatal(err)
	}
	expire := func(key string) {
		t.Helper()
		tx, c, err := old.BeginClaim(ctx, e.pool, pgx.TxOptions{}, req(t, key))
		if err != nil || !c.Acquired() {
			t.Fatalf("old claim: %v %v", c, err)
		}
		if err := old.CompleteCommit(ctx, tx, c, ledger.Result{Response: []byte("old")}); err != nil {
			t.Fatal(err)
		}
	}
	expire("exp-claim")
	tx, c, err := e.s.BeginClaim(ctx, e.pool, pgx.TxOptions{}, req(t, "exp-claim"))
	if err != nil || !c.Acquired() || !txledger.TookOver(c) {
		t.Fatalf("pipelined claim of an expired entry: %v %v; want it taken over", c, err)
	}
	if err := e.s.CompleteCommit(ctx, tx, c, result("exp-claim")); err != nil {
		t.Fatal(err)
	}

	expire("exp-record")
	rec := func() (*ledger.Claim, error) {
		tx, err := e.s.Begin(ctx, e.pool, pgx.TxOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if err := e.writeBiz(ctx, tx, "exp-record", 1); err != nil {
			t.Fatal(err)
		}
		return e.s.RecordCommit(ctx, tx, req(t, "exp-record"), result("exp-record"))
	}
	if c, err := rec(); !errors.Is(err, ledger.ErrRetryable) {
		t.Fatalf("pipelined record of an expired entry: %v %v; want ErrRetryable (run again)", c, err)
	}
	if n := e.bizRows(t, "exp-record"); n != 0 {
		t.Fatalf("the work of the refused record committed (%d rows)", n)
	}
	if c, err := rec(); err != nil || !c.Recorded() {
		t.Fatalf("the record run again: %v %v; want recorded", c, err)
	}
	for _, key := range []string{"exp-claim", "exp-record"} {
		if en, err := e.s.Lookup(ctx, e.pool, req(t, key).Identity); err != nil || !sameResult(en.Result, result(key)) {
			t.Errorf("%s: Lookup %+v, %v; want the new result", key, en, err)
		}
	}
	if n := e.ledgerRows(t); n != 2 {
		t.Errorf("%d ledger rows, want 2", n)
	}
}

// TestFailedCompletionRollsBack: a completion sent with COMMIT that fails
// (the work left the transaction aborted) or completes no pending entry
// (the work deleted it) keeps the COMMIT from committing anything, and is
// reported as that failure, not as an unknown commit; the connection goes
// back to the pool.
func TestFailedCompletionRollsBack(t *testing.T) {
	testdb.Parallel(t, "postgres", 2)
	e := newEnv(t, 2)
	ctx := context.Background()
	for _, tc := range []struct {
		name string
		work func(tx pgx.Tx, key string) error
		want func(error) bool
	}{
		{"aborted by the work", func(tx pgx.Tx, key string) error {
			_, err := tx.Exec(ctx, "SELECT 1/0")
			if err == nil {
				return errors.New("1/0 did not fail")
			}
			return nil // the work ignores its failure
		}, func(err error) bool {
			var dbe *ledger.DBError
			return errors.As(err, &dbe) && dbe.Op == "complete"
		}},
		{"entry deleted by the work", func(tx pgx.Tx, key string) error {
			id := req(t, key).Identity.ID()
			_, err := tx.Exec(ctx, "DELETE FROM "+pgxQuote(e.table)+" WHERE id = $1", id[:])
			return err
		}, func(err error) bool { return errors.Is(err, ledger.ErrNotAcquired) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			key := "failed-" + tc.name
			tx, c, err := e.s.BeginClaim(ctx, e.pool, pgx.TxOptions{}, req(t, key))
			if err != nil || !c.Acquired() {
				t.Fatalf("claim: %v %v", c, err)
			}
			if err := e.writeBiz(ctx, tx, key, 1); err != nil {
				t.Fatal(err)
			}
			if err := tc.work(tx, key); err != nil {
				t.Fatal(err)
			}
			err = e.s.CompleteCommit(ctx, tx, c, result(key))
			t.Logf("CompleteCommit: %v", err)
			if !tc.want(err) || errors.Is(err, txmiddleware.ErrCommitUnknown) {
				t.Fatalf("CompleteCommit: %v", err)
			}
			if n := e.bizRows(t, key); n != 0 {
				t.Errorf("%d business rows committed", n)
			}
			if _, err := e.s.Lookup(ctx, e.pool, req(t, key).Identity); !errors.Is(err, ledger.ErrNotFound) {
				t.Errorf("Lookup: %v; want nothing committed", err)
			}
			if n := e.pool.Stat().AcquiredConns(); n != 0 {
				t.Errorf("%d connections still acquired", n)
			}
			if err := tx.Commit(ctx); !errors.Is(err, pgx.ErrTxClosed) {
				t.Errorf("Commit after CompleteCommit: %v, want pgx.ErrTxClosed", err)
			}
		})
	}
}

func pgxQuote(table string) string { return `"` + table + `"` }

// TestCommitUnknown: a connection cut after the pipelined COMMIT was sent
// (its answer lost) is an error matching txmiddleware.ErrCommitUnknown,
// whether the COMMIT reached the database (it committed) or not (nothing
// did), in both orders.
func TestCommitUnknown(t *testing.T) {
	testdb.Parallel(t, "postgres", 2)
	cfg := testdb.PgxConfig(t, "", 2, nil)
	proxy := testdb.NewCutProxy(t, cfg.ConnConfig.Host+":"+itoa(int(cfg.ConnConfig.Port)))
	pcfg := testdb.PgxConfigDSN(t, proxyDSN(t, proxy.Addr()), 2, nil)
	e := newEnvOn(t, testdb.OpenPgx(t, pcfg), nil)
	ctx := context.Background()
	for _, forward := range []bool{true, false} {
		for i, order := range []string{"claim first", "claim at commit"} {
			key := "unknown-" + itoa(i) // no "commit" in what goes through the proxy
			if !forward {
				key += "-lost"
			}
			var tx pgx.Tx
			var c *ledger.Claim
			var err error
			if order == "claim first" {
				tx, c, err = e.s.BeginClaim(ctx, e.pool, pgx.TxOptions{}, req(t, key))
				if err != nil || !c.Acquired() {
					t.Fatalf("claim: %v %v", c, err)
				}
			} else if tx, err = e.s.Begin(ctx, e.pool, pgx.TxOptions{}); err != nil {
				t.Fatal(err)
			}
			if err := e.writeBiz(ctx, tx, key, 1); err != nil {
				t.Fatal(err)
			}
			reached := make(chan struct{})
			proxy.ArmFunc(func(send func() <-chan struct{}) {
				if forward {
					<-send()
				}
				close(reached)
			})
			if order == "claim first" {
				err = e.s.CompleteCommit(ctx, tx, c, result(key))
			} else {
				_, err = e.s.RecordCommit(ctx, tx, req(t, key), result(key))
			}
			select {
			case <-reached:
			case <-time.After(30 * time.Second):
				t.Fatalf("%s: the proxy saw no COMMIT (%v)", order, err)
			}
			if !errors.Is(err, txmiddleware.ErrCommitUnknown) {
				t.Fatalf("%s, COMMIT forwarded %v: %v; want ErrCommitUnknown", order, forward, err)
			}
			en, lerr := e.s.Lookup(ctx, e.pool, req(t, key).Identity)
			switch {
			case forward && (lerr != nil || !sameResult(en.Result, result(key)) || e.bizRows(t, key) != 1):
				t.Errorf("%s: the forwarded COMMIT did not commit: %+v %v", order, en, lerr)
			case !forward && (!errors.Is(lerr, ledger.ErrNotFound) || e.bizRows(t, key) != 0):
				t.Errorf("%s: the lost COMMIT committed: %+v %v", order, en, lerr)
			}
			t.Logf("%s, COMMIT forwarded %v: %v", order, forward, err)
		}
	}
	if proxy.Cuts() != 4 {
		t.Errorf("%d cuts, want 4", proxy.Cuts())
	}
}

// TestLockWait: a pipelined claim and a pipelined record whose lock wait
// is bounded (ClaimRequest.LockWait, inside their statements) give
// ErrInProgress while another transaction holds the key, and nothing is
// left open.
func TestLockWait(t *testing.T) {
	testdb.Parallel(t, "postgres", 3)
	e := newEnv(t, 3)
	ctx := context.Background()
	holder, c, err := e.s.BeginClaim(ctx, e.pool, pgx.TxOptions{}, req(t, "held"))
	if err != nil || !c.Acquired() {
		t.Fatalf("holder: %v %v", c, err)
	}
	bounded := req(t, "held")
	bounded.LockWait = 300 * time.Millisecond
	start := time.Now()
	if _, c, err := e.s.BeginClaim(ctx, e.pool, pgx.TxOptions{}, bounded); !errors.Is(err, ledger.ErrInProgress) {
		t.Errorf("bounded claim while held: %v %v; want ErrInProgress", c, err)
	}
	tx, err := e.s.Begin(ctx, e.pool, pgx.TxOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if c, err := e.s.RecordCommit(ctx, tx, bounded, result("held")); !errors.Is(err, ledger.ErrInProgress) {
		t.Errorf("bounded record while held: %v %v; want ErrInProgress", c, err)
	}
	if took := time.Since(start); took > 10*time.Second {
		t.Errorf("the bounded calls took %v", took)
	}
	if n := e.pool.Stat().AcquiredConns(); n != 1 {
		t.Errorf("%d connections acquired, want the holder's", n)
	}
	if err := e.s.CompleteCommit(ctx, holder, c, result("held")); err != nil {
		t.Fatal(err)
	}
	var lockTimeout string
	if err := e.pool.QueryRow(ctx, "SHOW lock_timeout").Scan(&lockTimeout); err != nil || lockTimeout != "0" {
		t.Errorf("lock_timeout of a connection after the bounded calls: %q %v; want the session's 0", lockTimeout, err)
	}
}

// TestLookupSweepAndNils: Lookup reads through a pool or a transaction,
// Sweep deletes only expired entries, and nil handles are ErrInvalid.
func TestLookupSweepAndNils(t *testing.T) {
	testdb.Parallel(t, "postgres", 2)
	e := newEnv(t, 2)
	ctx := context.Background()
	old, err := pgxledger.New(ledger.WithTable(e.table), ledger.WithClock(func() time.Time { return time.Now().Add(-48 * time.Hour) }))
	if err != nil {
		t.Fatal(err)
	}
	for i, s := range []*pgxledger.Store{old, old, e.s} {
		key := "sweep-" + itoa(i)
		tx, c, err := s.BeginClaim(ctx, e.pool, pgx.TxOptions{}, req(t, key))
		if err != nil {
			t.Fatal(err)
		}
		if err := s.CompleteCommit(ctx, tx, c, result(key)); err != nil {
			t.Fatal(err)
		}
	}
	tx, err := e.pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if en, err := e.s.Lookup(ctx, tx, req(t, "sweep-2").Identity); err != nil || en.State != ledger.Completed {
		t.Errorf("Lookup in a transaction: %+v %v", en, err)
	}
	tx.Rollback(ctx)
	if _, err := e.s.Lookup(ctx, e.pool, req(t, "sweep-0").Identity); !errors.Is(err, ledger.ErrNotFound) {
		t.Errorf("Lookup of an expired entry: %v, want ErrNotFound", err)
	}
	if n, err := e.s.Sweep(ctx, e.pool, 1); err != nil || n != 2 {
		t.Errorf("Sweep: %d, %v; want the 2 expired entries", n, err)
	}
	if n := e.ledgerRows(t); n != 1 {
		t.Errorf("%d ledger rows after the sweep, want 1", n)
	}
	for name, err := range map[string]error{
		"Claim":          func() error { _, err := e.s.Claim(ctx, nil, req(t, "nil")); return err }(),
		"Record":         func() error { _, err := e.s.Record(ctx, nil, req(t, "nil"), result("nil")); return err }(),
		"Complete":       e.s.Complete(ctx, nil, nil, result("nil")),
		"BeginClaim":     func() error { _, _, err := e.s.BeginClaim(ctx, nil, pgx.TxOptions{}, req(t, "nil")); return err }(),
		"Begin":          func() error { _, err := e.s.Begin(ctx, nil, pgx.TxOptions{}); return err }(),
		"CompleteCommit": e.s.CompleteCommit(ctx, nil, nil, result("nil")),
		"RecordCommit":   func() error { _, err := e.s.RecordCommit(ctx, nil, req(t, "nil"), result("nil")); return err }(),
		"Lookup":         func() error { _, err := e.s.Lookup(ctx, nil, req(t, "nil").Identity); return err }(),
		"Lookup on a nil pool": func() error {
			var p *pgxpool.Pool
			_, err := e.s.Lookup(ctx, p, req(t, "nil").Identity)
			return err
		}(),
		"Sweep": func() error { _, err := e.s.Sweep(ctx, nil, 1); return err }(),
	} {
		if !errors.Is(err, ledger.ErrInvalid) {
			t.Errorf("%s with nil: %v, want ErrInvalid", name, err)
		}
	}
}

// TestSweepHeldEntry: an expired entry that an open transaction holds (a
// claim taking it over) is skipped, the others deleted, and the sweep
// reports it as ledger.Store's Sweep does (a *ledger.HeldError matching
// ErrInProgress, counting it), with and without WithSweepLockWait; once
// the holder commits, the entry is live and the next sweep leaves it.
// With the bound, a sweep in the caller's pgx.Tx is refused.
func TestSweepHeldEntry(t *testing.T) {
	testdb.Parallel(t, "postgres", 2)
	e := newEnv(t, 2)
	ctx := context.Background()
	now := time.Now()
	old, err := pgxledger.New(ledger.WithTable(e.table), ledger.WithRetention(time.Hour), ledger.WithClock(func() time.Time { return now.Add(-3 * time.Hour) }))
	if err != nil {
		t.Fatal(err)
	}
	bounded, err := pgxledger.New(ledger.WithTable(e.table), ledger.WithSweepLockWait(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	for _, sweeper := range []struct {
		name string
		s    *pgxledger.Store
	}{{"unbounded", e.s}, {"WithSweepLockWait", bounded}} {
		t.Run(sweeper.name, func(t *testing.T) {
			const expired = 5
			var keys []string
			for i := range expired {
				key := sweeper.name + "-held-" + itoa(i)
				keys = append(keys, key)
				tx, c, err := old.BeginClaim(ctx, e.pool, pgx.TxOptions{}, req(t, key))
				if err != nil {
					t.Fatal(err)
				}
				if err := old.CompleteCommit(ctx, tx, c, result("old")); err != nil {
					t.Fatal(err)
				}
			}
			holder, err := e.pool.Begin(ctx)
			if err != nil {
				t.Fatal(err)
			}
			defer holder.Rollback(ctx)
			taken, err := e.s.Claim(ctx, holder, req(t, keys[0]))
			if err != nil || !taken.Acquired() || !txledger.TookOver(taken) {
				t.Fatalf("take-over: %+v %v", taken, err)
			}
			n, err := sweeper.s.Sweep(ctx, e.pool, 2)
			var held *ledger.HeldError
			if !errors.As(err, &held) || !errors.Is(err, ledger.ErrInProgress) || n != expired-1 || held.Held != 1 {
				t.Fatalf("sweep with a held entry: %d, %v; want %d deleted and a HeldError of 1", n, err, expired-1)
			}
			if rows := e.ledgerRows(t); rows != 1 {
				t.Fatalf("%d ledger rows after the sweep, want the held one", rows)
			}
			if err := e.s.Complete(ctx, holder, taken, result("new")); err != nil {
				t.Fatal(err)
			}
			if err := holder.Commit(ctx); err != nil {
				t.Fatal(err)
			}
			if n, err := sweeper.s.Sweep(ctx, e.pool, 2); err != nil || n != 0 {
				t.Fatalf("sweep after the holder committed: %d, %v; want 0, nil", n, err)
			}
			if en, err := e.s.Lookup(ctx, e.pool, req(t, keys[0]).Identity); err != nil || string(en.Result.Response) != string(result("new").Response) {
				t.Fatalf("the entry taken over: %+v, %v", en, err)
			}
			if _, err := e.db.Exec("DELETE FROM " + postgres.New().QuoteIdent(e.table)); err != nil {
				t.Fatal(err)
			}
		})
	}
	tx, err := e.pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx)
	if _, err := bounded.Sweep(ctx, tx, 10); !errors.Is(err, ledger.ErrInvalid) {
		t.Fatalf("a bounded Sweep in a pgx.Tx: %v, want ErrInvalid", err)
	}
	if n, err := e.s.Sweep(ctx, tx, 10); err != nil || n != 0 {
		t.Fatalf("an unbounded Sweep in a pgx.Tx: %d, %v", n, err)
	}
}

// TestSweepLockWaitBoundsTheBatch: with WithSweepLockWait a batch that
// waits for a lock past the bound (here the table, locked in SHARE mode by
// an open transaction, which conflicts with the DELETE and not with the
// count) stops the sweep with a *ledger.HeldError that carries the lock
// timeout and counts the entries left, well before the hang guard.
func TestSweepLockWaitBoundsTheBatch(t *testing.T) {
	testdb.Parallel(t, "postgres", 2)
	e := newEnv(t, 2)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second) // a hang guard
	defer cancel()
	old, err := pgxledger.New(ledger.WithTable(e.table), ledger.WithClock(func() time.Time { return time.Now().Add(-48 * time.Hour) }))
	if err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		key := "locked-" + itoa(i)
		tx, c, err := old.BeginClaim(ctx, e.pool, pgx.TxOptions{}, req(t, key))
		if err != nil {
			t.Fatal(err)
		}
		if err := old.CompleteCommit(ctx, tx, c, result(key)); err != nil {
			t.Fatal(err)
		}
	}
	bounded, err := pgxledger.New(ledger.WithTable(e.table), ledger.WithSweepLockWait(300*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	holder, err := e.pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer holder.Rollback(ctx)
	if _, err := holder.Exec(ctx, "LOCK TABLE "+postgres.New().QuoteIdent(e.table)+" IN SHARE MODE"); err != nil {
		t.Fatal(err)
	}
	n, err := bounded.Sweep(ctx, e.pool, 10)
	var held *ledger.HeldError
	if !errors.As(err, &held) || held.Held != 3 || held.Err == nil || !errors.Is(held.Err, ledger.ErrInProgress) || n != 0 || ctx.Err() != nil {
		t.Fatalf("sweep behind a table lock: %d, %v; want a HeldError of 3 with the lock timeout", n, err)
	}
	holder.Rollback(ctx)
	if n, err := bounded.Sweep(ctx, e.pool, 10); err != nil || n != 3 {
		t.Fatalf("sweep once the lock is gone: %d, %v; want 3, nil", n, err)
	}
}
