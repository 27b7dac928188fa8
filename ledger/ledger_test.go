package ledger_test

import (
	"bytes"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/opledger/opledger/dialects"
	"github.com/opledger/opledger/internal/dialectkit"
	"github.com/opledger/opledger/internal/ledgerkit"
	"github.com/opledger/opledger/internal/testkit/testdb"
	"github.com/opledger/opledger/internal/txledger"
	"github.com/opledger/opledger/ledger"
)

const method = "/pay.v1.Payments/Transfer"

// TestHerd: 32 goroutines, each in its own transaction, claim one identity
// at once; exactly one acquires and writes, all others replay its result
// byte for byte; one ledger row and one business row per key.
func TestHerd(t *testing.T) {
	t.Parallel()
	const workers = 32
	keys := 100
	if testing.Short() {
		keys = 10
	}
	forEachTarget(t, workers, func(t *testing.T, e *env) {
		keys := testdb.Scaled(e.Name, keys)
		for _, level := range e.IsolationLevels() {
			t.Run(level.String(), func(t *testing.T) {
				var retries atomic.Int64
				ctx := context.Background()
				for k := 0; k < keys; k++ {
					key := fmt.Sprintf("%s-herd-%d", level, k)
					id := testdb.ID(t, "tenant-a", method, key)
					var (
						acquired, replayed atomic.Int64
						mu                 sync.Mutex
						results            [][]byte
						start              = make(chan struct{})
						wg                 sync.WaitGroup
						errs               = make(chan error, workers)
					)
					for w := 0; w < workers; w++ {
						wg.Add(1)
						go func() {
							defer wg.Done()
							<-start
							var got []byte
							var didAcquire bool
							err := e.unit(ctx, level, &retries, func(tx *sql.Tx) error {
								c, err := e.l.Claim(ctx, tx, ledger.ClaimRequest{Identity: id, Fingerprint: fp(key)})
								if err != nil {
									return err
								}
								if !c.Acquired() {
									didAcquire = false
									got = c.Result.Response
									return nil
								}
								didAcquire = true
								if err := e.WriteBiz(ctx, tx, key, w); err != nil {
									return err
								}
								got = []byte(fmt.Sprintf("transfer %s by worker %d", key, w))
								return e.l.Complete(ctx, tx, c, ledger.Result{Code: 0, Response: got, TypeName: "pay.v1.TransferResponse"})
							})
							if err != nil {
								errs <- err
								return
							}
							if didAcquire {
								acquired.Add(1)
							} else {
								replayed.Add(1)
							}
							mu.Lock()
							results = append(results, got)
							mu.Unlock()
						}()
					}
					close(start)
					wg.Wait()
					close(errs)
					for err := range errs {
						t.Fatalf("key %s: %v", key, err)
					}
					if acquired.Load() != 1 || replayed.Load() != workers-1 {
						t.Fatalf("key %s: %d acquired, %d replayed; want 1 and %d", key, acquired.Load(), replayed.Load(), workers-1)
					}
					for _, r := range results[1:] {
						if !bytes.Equal(r, results[0]) {
							t.Fatalf("key %s: results differ: %q vs %q", key, r, results[0])
						}
					}
					if n := e.BizRows(t, key); n != 1 {
						t.Fatalf("key %s: %d business rows, want 1", key, n)
					}
				}
				if n := e.LedgerRows(t); n != keys*(1+indexOf(e.IsolationLevels(), level)) {
					t.Fatalf("%d ledger rows, want %d", n, keys*(1+indexOf(e.IsolationLevels(), level)))
				}
				t.Logf("%s %s: %d keys × %d workers, %d whole-transaction retries", e.Name, level, keys, workers, retries.Load())
			})
		}
	})
}

func indexOf(levels []sql.IsolationLevel, l sql.IsolationLevel) int {
	for i, x := range levels {
		if x == l {
			return i
		}
	}
	return -1
}

// claimOnce runs one claim in its own transaction and commits it,
// completing with resp when acquired.
func claimOnce(t *testing.T, e *env, l *ledger.Store, id ledger.Identity, f ledger.Fingerprint, resp string) (*ledger.Claim, error) {
	t.Helper()
	ctx := context.Background()
	tx, err := e.DB.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback()
	c, err := l.Claim(ctx, tx, ledger.ClaimRequest{Identity: id, Fingerprint: f})
	if err != nil {
		return nil, err
	}
	if c.Acquired() {
		if err := l.Complete(ctx, tx, c, ledger.Result{Code: 0, Response: []byte(resp), TypeName: "t.Resp"}); err != nil {
			t.Fatal(err)
		}
	}
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
	return c, nil
}

func TestRollbackAfterClaimLeavesNothing(t *testing.T) {
	t.Parallel()
	forEachTarget(t, 4, func(t *testing.T, e *env) {
		ctx := context.Background()
		id := testdb.ID(t, "tenant-a", method, "rollback-1")
		tx, err := e.DB.BeginTx(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		defer tx.Rollback()
		c, err := e.l.Claim(ctx, tx, ledger.ClaimRequest{Identity: id, Fingerprint: fp("r")})
		if err != nil || !c.Acquired() {
			t.Fatalf("claim: %v %v", c, err)
		}
		if err := e.WriteBiz(ctx, tx, "rollback-1", 1); err != nil {
			t.Fatal(err)
		}
		if err := e.l.Complete(ctx, tx, c, ledger.Result{Response: []byte("x")}); err != nil {
			t.Fatal(err)
		}
		if err := tx.Rollback(); err != nil {
			t.Fatal(err)
		}
		if n := e.LedgerRows(t); n != 0 {
			t.Fatalf("%d ledger rows after rollback", n)
		}
		if n := e.BizRows(t, "rollback-1"); n != 0 {
			t.Fatalf("%d business rows after rollback", n)
		}
		if _, err := e.l.Lookup(ctx, e.DB, id); !errors.Is(err, ledger.ErrNotFound) {
			t.Fatalf("lookup after rollback: %v, want ErrNotFound", err)
		}
		c, err = claimOnce(t, e, e.l, id, fp("r"), "second")
		if err != nil || !c.Acquired() {
			t.Fatalf("claim after rollback: %v %v, want acquired", c, err)
		}
	})
}

// TestReplayKeepsTransactionUsable: a claim that finds a completed entry
// must not poison the caller's transaction (PostgreSQL aborts a
// transaction on a plain INSERT's 23505).
func TestReplayKeepsTransactionUsable(t *testing.T) {
	t.Parallel()
	forEachTarget(t, 4, func(t *testing.T, e *env) {
		ctx := context.Background()
		id := testdb.ID(t, "tenant-a", method, "poison-1")
		if _, err := claimOnce(t, e, e.l, id, fp("p"), "first"); err != nil {
			t.Fatal(err)
		}
		tx, err := e.DB.BeginTx(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		defer tx.Rollback()
		if err := e.WriteBiz(ctx, tx, "unrelated", 7); err != nil {
			t.Fatal(err)
		}
		c, err := e.l.Claim(ctx, tx, ledger.ClaimRequest{Identity: id, Fingerprint: fp("p")})
		if err != nil || c.Outcome != ledger.Replay || string(c.Result.Response) != "first" {
			t.Fatalf("claim: %+v %v, want replay of first", c, err)
		}
		if err := e.WriteBiz(ctx, tx, "unrelated", 8); err != nil {
			t.Fatalf("transaction poisoned after replay: %v", err)
		}
		if err := tx.Commit(); err != nil {
			t.Fatal(err)
		}
		if n := e.BizRows(t, "unrelated"); n != 2 {
			t.Fatalf("%d unrelated rows, want 2", n)
		}
	})
}

func TestIdentityParts(t *testing.T) {
	t.Parallel()
	forEachTarget(t, 4, func(t *testing.T, e *env) {
		key := "shared-key"
		base := testdb.ID(t, "tenant-a", method, key)
		otherCaller := testdb.ID(t, "tenant-b", method, key)
		otherMethod := testdb.ID(t, "tenant-a", "/pay.v1.Payments/Refund", key)
		for i, id := range []ledger.Identity{base, otherCaller, otherMethod} {
			c, err := claimOnce(t, e, e.l, id, fp("req"), fmt.Sprintf("result-%d", i))
			if err != nil || !c.Acquired() {
				t.Fatalf("claim %d: %+v %v, want acquired (independent entries)", i, c, err)
			}
		}
		for i, id := range []ledger.Identity{base, otherCaller, otherMethod} {
			c, err := claimOnce(t, e, e.l, id, fp("req"), "never")
			if err != nil || c.Outcome != ledger.Replay || string(c.Result.Response) != fmt.Sprintf("result-%d", i) {
				t.Fatalf("replay %d: %+v %v", i, c, err)
			}
		}
		_, err := claimOnce(t, e, e.l, base, fp("another request"), "never")
		if !errors.Is(err, ledger.ErrKeyReused) {
			t.Fatalf("reused key: %v, want ErrKeyReused", err)
		}
		if strings.Contains(err.Error(), key) {
			t.Fatalf("error %q contains the raw key", err)
		}
		if n := e.LedgerRows(t); n != 3 {
			t.Fatalf("%d rows, want 3", n)
		}
		var stored int
		if err := e.DB.QueryRow("SELECT COUNT(*) FROM " + e.Dialect.QuoteIdent(e.Table) + " WHERE caller LIKE '%" + key + "%' OR method LIKE '%" + key + "%'").Scan(&stored); err != nil || stored != 0 {
			t.Fatalf("raw key stored: %d %v", stored, err)
		}
	})
}

// TestDeleteBetweenConflictAndRead: an entry removed between the conflict
// and the read-back is claimed again, never replayed as nothing.
func TestDeleteBetweenConflictAndRead(t *testing.T) {
	t.Parallel()
	// PostgreSQL only: SQLite serialises writers, so no other connection
	// can delete inside the claim's window, and InnoDB's 1062 leaves a
	// shared lock on the duplicate row, so no other transaction can delete
	// it there (TestMySQLDeleteBlockedAfterConflict).
	forEachTarget(t, 4, func(t *testing.T, e *env) {
		id := testdb.ID(t, "tenant-a", method, "delete-race")
		if _, err := claimOnce(t, e, e.l, id, fp("d"), "old"); err != nil {
			t.Fatal(err)
		}
		l := e.store(t) // the plain claim, whose read-back after the conflict races with the delete
		fired := 0
		ledger.SetAfterConflict(l, func() {
			fired++
			if _, err := e.DB.Exec("DELETE FROM "+e.Dialect.QuoteIdent(e.Table)+" WHERE method = "+e.Ph(1), method); err != nil {
				t.Error(err)
			}
		})
		c, err := claimOnce(t, e, l, id, fp("d"), "new")
		if err != nil || !c.Acquired() || fired != 1 {
			t.Fatalf("claim after delete: %+v %v (hook fired %d), want acquired", c, err, fired)
		}
		got, err := e.l.Lookup(context.Background(), e.DB, id)
		if err != nil || string(got.Result.Response) != "new" {
			t.Fatalf("lookup: %+v %v", got, err)
		}
	}, "postgres")
}

// TestExpiry: an expired entry is re-acquired by exactly one of 16
// concurrent claimants; Sweep removes only expired entries.
func TestExpiry(t *testing.T) {
	t.Parallel()
	forEachTarget(t, 16, func(t *testing.T, e *env) {
		ctx := context.Background()
		t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
		old := e.store(t, ledger.WithRetention(time.Hour), ledger.WithClock(func() time.Time { return t0 }))
		id := testdb.ID(t, "tenant-a", method, "expiring")
		if _, err := claimOnce(t, e, old, id, fp("first request"), "old result"); err != nil {
			t.Fatal(err)
		}
		later := e.store(t, ledger.WithRetention(time.Hour), ledger.WithClock(func() time.Time { return t0.Add(2 * time.Hour) }))
		if _, err := later.Lookup(ctx, e.DB, id); !errors.Is(err, ledger.ErrNotFound) {
			t.Fatalf("lookup of expired entry: %v, want ErrNotFound", err)
		}
		var acquired, replayed atomic.Int64
		var retries atomic.Int64
		var wg sync.WaitGroup
		start := make(chan struct{})
		errs := make(chan error, 16)
		for w := 0; w < 16; w++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				// A reused key after expiry is a new operation: another fingerprint is fine.
				err := e.unit(ctx, sql.LevelDefault, &retries, func(tx *sql.Tx) error {
					c, err := later.Claim(ctx, tx, ledger.ClaimRequest{Identity: id, Fingerprint: fp("second request")})
					if err != nil {
						return err
					}
					if c.Acquired() {
						if err := e.WriteBiz(ctx, tx, "expiring", w); err != nil {
							return err
						}
						acquired.Add(1)
						return later.Complete(ctx, tx, c, ledger.Result{Response: []byte("new result")})
					}
					if string(c.Result.Response) != "new result" {
						return fmt.Errorf("replayed %q", c.Result.Response)
					}
					replayed.Add(1)
					return nil
				})
				if err != nil {
					errs <- err
				}
			}()
		}
		close(start)
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Fatal(err)
		}
		if acquired.Load() != 1 || replayed.Load() != 15 || e.BizRows(t, "expiring") != 1 {
			t.Fatalf("%d acquired, %d replayed, %d business rows; want 1, 15, 1", acquired.Load(), replayed.Load(), e.BizRows(t, "expiring"))
		}

		// Sweep: entries created at t0 expire at t0+1h; sweep at t0+90m.
		for i := 0; i < 25; i++ {
			if _, err := claimOnce(t, e, old, testdb.ID(t, "tenant-a", method, fmt.Sprintf("sweep-%d", i)), fp("s"), "r"); err != nil {
				t.Fatal(err)
			}
		}
		sweeper := e.store(t, ledger.WithRetention(time.Hour), ledger.WithClock(func() time.Time { return t0.Add(90 * time.Minute) }))
		n, err := sweeper.Sweep(ctx, e.DB, 10)
		if err != nil || n != 25 {
			t.Fatalf("sweep: %d %v, want 25", n, err)
		}
		if rows := e.LedgerRows(t); rows != 1 {
			t.Fatalf("%d rows after sweep, want only the unexpired one", rows)
		}
		if _, err := later.Lookup(ctx, e.DB, id); err != nil {
			t.Fatalf("unexpired entry swept: %v", err)
		}
	})
}

func TestCompleteMisuse(t *testing.T) {
	t.Parallel()
	forEachTarget(t, 4, func(t *testing.T, e *env) {
		ctx := context.Background()
		id := testdb.ID(t, "tenant-a", method, "misuse")
		tx, err := e.DB.BeginTx(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		defer tx.Rollback()
		c, err := e.l.Claim(ctx, tx, ledger.ClaimRequest{Identity: id, Fingerprint: fp("m")})
		if err != nil {
			t.Fatal(err)
		}
		if err := e.l.Complete(ctx, tx, nil, ledger.Result{}); !errors.Is(err, ledger.ErrNotAcquired) {
			t.Fatalf("nil claim: %v", err)
		}
		if err := e.store(t).Complete(ctx, tx, c, ledger.Result{}); !errors.Is(err, ledger.ErrNotAcquired) {
			t.Fatalf("other store: %v", err)
		}
		if err := e.l.Complete(ctx, tx, c, ledger.Result{Response: make([]byte, ledgerkit.DefaultMaxResultSize+1)}); !errors.Is(err, ledger.ErrInvalid) {
			t.Fatalf("oversized: %v", err)
		}
		if err := e.l.Complete(ctx, tx, c, ledger.Result{Code: ledgerkit.MaxCode + 1}); !errors.Is(err, ledger.ErrInvalid) {
			t.Fatalf("code out of range: %v", err)
		}
		if err := e.l.Complete(ctx, tx, c, ledger.Result{TypeName: "bad\nname"}); !errors.Is(err, ledger.ErrInvalid) {
			t.Fatalf("control character in type name: %v", err)
		}
		if err := e.l.Complete(ctx, tx, c, ledger.Result{Response: []byte("ok")}); err != nil {
			t.Fatal(err)
		}
		if err := e.l.Complete(ctx, tx, c, ledger.Result{Response: []byte("again")}); !errors.Is(err, ledger.ErrNotAcquired) {
			t.Fatalf("second complete: %v", err)
		}
		if err := tx.Commit(); err != nil {
			t.Fatal(err)
		}
		tx2, err := e.DB.BeginTx(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		defer tx2.Rollback()
		if err := e.l.Complete(ctx, tx2, c, ledger.Result{}); !errors.Is(err, ledger.ErrNotAcquired) {
			t.Fatalf("claim from another transaction: %v", err)
		}
		r, err := e.l.Claim(ctx, tx2, ledger.ClaimRequest{Identity: id, Fingerprint: fp("m")})
		if err != nil || r.Outcome != ledger.Replay {
			t.Fatalf("replay: %+v %v", r, err)
		}
		if err := e.l.Complete(ctx, tx2, r, ledger.Result{}); !errors.Is(err, ledger.ErrNotAcquired) {
			t.Fatalf("completing a replay: %v", err)
		}
	})
}

func TestDoneTransaction(t *testing.T) {
	t.Parallel()
	forEachTarget(t, 4, func(t *testing.T, e *env) {
		ctx := context.Background()
		for _, end := range []string{"commit", "rollback"} {
			tx, err := e.DB.BeginTx(ctx, nil)
			if err != nil {
				t.Fatal(err)
			}
			defer tx.Rollback()
			if end == "commit" {
				err = tx.Commit()
			} else {
				err = tx.Rollback()
			}
			if err != nil {
				t.Fatal(err)
			}
			_, err = e.l.Claim(ctx, tx, ledger.ClaimRequest{Identity: testdb.ID(t, "c", method, "done"), Fingerprint: fp("x")})
			if !errors.Is(err, sql.ErrTxDone) {
				t.Fatalf("claim on a transaction after %s: %v, want sql.ErrTxDone", end, err)
			}
		}
		if _, err := e.l.Claim(ctx, nil, ledger.ClaimRequest{Identity: testdb.ID(t, "c", method, "done"), Fingerprint: fp("x")}); !errors.Is(err, ledger.ErrInvalid) {
			t.Fatalf("nil tx: %v", err)
		}
		if n := e.LedgerRows(t); n != 0 {
			t.Fatalf("%d rows written", n)
		}
	})
}

// TestReplayFidelity: code, bytes and type name come back exactly,
// including an empty response and one of exactly the maximum size.
func TestReplayFidelity(t *testing.T) {
	t.Parallel()
	forEachTarget(t, 4, func(t *testing.T, e *env) {
		ctx := context.Background()
		l := e.store(t, ledger.WithMaxResultSize(64<<10))
		big := make([]byte, 64<<10)
		for i := range big {
			big[i] = byte(i * 7)
		}
		cases := []ledger.Result{
			{Code: 0, Response: nil, TypeName: ""},
			{Code: 0, Response: []byte{}, TypeName: "pay.v1.Empty"},
			{Code: 9, Response: []byte{0, 1, 2, 255}, TypeName: "google.rpc.Status"},
			{Code: ledgerkit.MaxCode, Response: []byte("x"), TypeName: "max.Code"},
			{Code: 0, Response: big, TypeName: "pay.v1.Big"},
		}
		for i, want := range cases {
			id := testdb.ID(t, "tenant-a", method, fmt.Sprintf("fidelity-%d", i))
			tx, err := e.DB.BeginTx(ctx, nil)
			if err != nil {
				t.Fatal(err)
			}
			defer tx.Rollback()
			c, err := l.Claim(ctx, tx, ledger.ClaimRequest{Identity: id, Fingerprint: fp("f")})
			if err != nil {
				t.Fatal(err)
			}
			if err := l.Complete(ctx, tx, c, want); err != nil {
				t.Fatal(err)
			}
			if err := tx.Commit(); err != nil {
				t.Fatal(err)
			}
			r, err := claimOnce(t, e, l, id, fp("f"), "never")
			if err != nil || r.Outcome != ledger.Replay {
				t.Fatalf("case %d: %+v %v", i, r, err)
			}
			if r.Result.Code != want.Code || r.Result.TypeName != want.TypeName || !bytes.Equal(r.Result.Response, want.Response) || r.Result.Response == nil {
				t.Fatalf("case %d: replayed code %d type %q %d bytes; want code %d type %q %d bytes",
					i, r.Result.Code, r.Result.TypeName, len(r.Result.Response), want.Code, want.TypeName, len(want.Response))
			}
			if r.CompletedAt.IsZero() {
				t.Fatalf("case %d: no completion time", i)
			}
			got, err := l.Lookup(ctx, e.DB, id)
			if err != nil || got.State != ledger.Completed || !bytes.Equal(got.Result.Response, want.Response) || got.Fingerprint != fp("f") {
				t.Fatalf("case %d: lookup %+v %v", i, got, err)
			}
		}
	})
}

// TestCommittedWithoutResult: a claim committed without Complete is
// reported as incomplete, never as a replay of nothing.
func TestCommittedWithoutResult(t *testing.T) {
	t.Parallel()
	forEachTarget(t, 4, func(t *testing.T, e *env) {
		ctx := context.Background()
		id := testdb.ID(t, "tenant-a", method, "incomplete")
		commitIncomplete(t, e, ledger.ClaimRequest{Identity: id, Fingerprint: fp("i")})
		if _, err := claimOnce(t, e, e.l, id, fp("i"), "x"); !errors.Is(err, ledger.ErrIncomplete) {
			t.Fatalf("claim: %v, want ErrIncomplete", err)
		}
		got, err := e.l.Lookup(ctx, e.DB, id)
		if err != nil || got.State != ledger.Pending {
			t.Fatalf("lookup: %+v %v", got, err)
		}
	})
}

func TestNewRejectsBadOptions(t *testing.T) {
	var d dialects.Dialect = nil
	if _, err := ledger.New(d); !errors.Is(err, ledger.ErrInvalid) || !errors.Is(err, ledger.ErrInvalidConfig) {
		t.Fatalf("nil dialect: %v", err)
	}
	for _, tg := range []string{"x; DROP TABLE y", "", "a.b", `a"b`, "1abc", strings.Repeat("a", 49), "tab le"} {
		_, err := ledger.New(fakeDialect{}, ledger.WithTable(tg))
		if !errors.Is(err, ledger.ErrInvalid) || !errors.Is(err, ledger.ErrInvalidConfig) || !errors.Is(err, dialectkit.ErrBadTableName) {
			t.Errorf("table %q: %v, want ErrInvalid", tg, err)
		}
	}
	bad := map[string][]ledger.Option{
		"zero retention":      {ledger.WithRetention(0)},
		"negative retention":  {ledger.WithRetention(-time.Second)},
		"negative max result": {ledger.WithMaxResultSize(-1)},
		"nil clock":           {ledger.WithClock(nil)},
		"zero option":         {{}},
		"table twice":         {ledger.WithTable("a"), ledger.WithTable("b")},
		"retention twice":     {ledger.WithRetention(time.Hour), ledger.WithRetention(time.Hour)},
		"max result twice":    {ledger.WithMaxResultSize(1), ledger.WithMaxResultSize(2)},
		"clock twice":         {ledger.WithClock(time.Now), ledger.WithClock(time.Now)},
	}
	for name, opts := range bad {
		_, err := ledger.New(fakeDialect{}, opts...)
		field, _, ok := txledger.InputError(err)
		if !errors.Is(err, ledger.ErrInvalid) || !errors.Is(err, ledger.ErrInvalidConfig) || !ok || field != "option" {
			t.Errorf("%s: %v, want an *InputError on option matching ErrInvalid and ErrInvalidConfig", name, err)
		}
	}
	l, err := ledger.New(fakeDialect{}, ledger.WithTable("a"), ledger.WithRetention(time.Hour), ledger.WithMaxResultSize(0), ledger.WithClock(time.Now))
	if err != nil || l.Table() != "a" {
		t.Fatalf("every option once: %v %v", l, err)
	}
	l, err = ledger.New(fakeDialect{})
	if err != nil || l.Table() != ledger.DefaultTable {
		t.Fatalf("defaults: %v %v", l, err)
	}
	var _ ledger.Ledger = l
	if _, ok := l.Dialect().(fakeDialect); !ok {
		t.Fatalf("Dialect() = %T, want the dialect New was given", l.Dialect())
	}
}

// TestClaimConstructors: the claims a Ledger implementation outside the
// package builds, and that a Store refuses as not its own.
func TestClaimConstructors(t *testing.T) {
	t.Parallel()
	id := testdb.ID(t, "c", method, "ctor")
	at := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	r := ledger.NewReplay(id, ledger.Result{Code: 3, Response: []byte("r"), TypeName: "t.R"}, at)
	if r.Outcome != ledger.Replay || r.Acquired() || r.Identity != id || r.Result.Code != 3 || string(r.Result.Response) != "r" || !r.CompletedAt.Equal(at) || r.Tx() != nil {
		t.Fatalf("NewReplay: %+v", r)
	}
	var nilClaim *ledger.Claim
	if nilClaim.Acquired() || nilClaim.Tx() != nil {
		t.Fatal("nil claim")
	}
	forEachTarget(t, 2, func(t *testing.T, e *env) {
		ctx := context.Background()
		tx, err := e.DB.BeginTx(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		defer tx.Rollback()
		a := ledger.NewAcquired(id, tx)
		if a.Outcome != ledger.Acquired || !a.Acquired() || a.Identity != id || a.Tx() != tx {
			t.Fatalf("NewAcquired: %+v", a)
		}
		// A Store completes only the claims it acquired itself.
		if err := e.l.Complete(ctx, tx, a, ledger.Result{}); !errors.Is(err, ledger.ErrNotAcquired) {
			t.Fatalf("Store.Complete of a NewAcquired claim: %v, want ErrNotAcquired", err)
		}
		c, err := e.l.Claim(ctx, tx, ledger.ClaimRequest{Identity: id, Fingerprint: fp("x")})
		if err != nil || c.Tx() != tx {
			t.Fatalf("Store claim: %+v %v, want its Tx to be the claiming transaction", c, err)
		}
	}, "sqlite")
}

// fakeDialect is only for option validation, which runs no SQL.
type fakeDialect struct{}

func (fakeDialect) Name() string                    { return "fake" }
func (fakeDialect) QuoteIdent(s string) string      { return s }
func (fakeDialect) Placeholder(int) string          { return "?" }
func (fakeDialect) Queries(string) dialects.Queries { return dialects.Queries{} }
func (fakeDialect) Classify(error) dialects.Class   { return dialects.ClassOther }

// TestOppositeOrderClaimsDeadlockIsRetryable: two transactions claim
// {k1, k2} and {k2, k1}. The database breaks the deadlock by aborting one,
// which surfaces as ErrRetryable (never a hang, never a wrong answer); the
// other acquires both.
func TestOppositeOrderClaimsDeadlockIsRetryable(t *testing.T) {
	t.Parallel()
	forEachTarget(t, 4, func(t *testing.T, e *env) {
		if dialectkit.TraitsOf(e.Dialect).SerialWriters {
			t.Skip("serial writers (SQLite): two claiming transactions never interleave")
		}
		ctx := context.Background()
		k1 := ledger.ClaimRequest{Identity: testdb.ID(t, "c", method, "order-1"), Fingerprint: fp("1")}
		k2 := ledger.ClaimRequest{Identity: testdb.ID(t, "c", method, "order-2"), Fingerprint: fp("2")}
		a, err := e.DB.BeginTx(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		defer a.Rollback()
		b, err := e.DB.BeginTx(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		defer b.Rollback()
		if _, err := e.l.Claim(ctx, a, k1); err != nil {
			t.Fatal(err)
		}
		if _, err := e.l.Claim(ctx, b, k2); err != nil {
			t.Fatal(err)
		}
		type result struct {
			tx  *sql.Tx
			c   *ledger.Claim
			err error
		}
		done := make(chan result, 2)
		// The database's deadlock detector ends the wait (the victim's
		// class says so below); the context is only a hang guard.
		cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
		go func() { c, err := e.l.Claim(cctx, a, k2); done <- result{a, c, err} }()
		go func() { c, err := e.l.Claim(cctx, b, k1); done <- result{b, c, err} }()
		// The victim's locks go when it rolls back (InnoDB already did), so
		// roll it back as soon as it returns; the survivor may return
		// before or after it.
		var victims, survivors []result
		for range 2 {
			r := <-done
			if r.err != nil {
				r.tx.Rollback()
				victims = append(victims, r)
			} else {
				survivors = append(survivors, r)
			}
		}
		if len(victims) != 1 || len(survivors) != 1 {
			t.Fatalf("%d victims %v, %d survivors; want one of each", len(victims), victims, len(survivors))
		}
		var dbe *ledger.DBError
		if err := victims[0].err; !errors.Is(err, ledger.ErrRetryable) || !errors.As(err, &dbe) || dbe.Class != dialects.ClassDeadlock {
			t.Fatalf("victim: %v, want a deadlock matching ErrRetryable", err)
		}
		second := survivors[0]
		if !second.c.Acquired() {
			t.Fatalf("survivor: %+v, want acquired once the victim rolled back", second.c)
		}
		if err := second.tx.Commit(); err != nil {
			t.Fatal(err)
		}
	})
}
