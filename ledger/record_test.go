package ledger_test

import (
	"bytes"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/opledger/opledger/dialects"
	"github.com/opledger/opledger/internal/dialectkit"
	"github.com/opledger/opledger/internal/ledgerkit"
	"github.com/opledger/opledger/internal/testkit/testdb"
	"github.com/opledger/opledger/ledger"
)

// recordOutcome is what one claim-at-commit unit ended with.
type recordOutcome struct {
	recorded bool
	result   ledger.Result
	retries  int
	classes  map[string]int // the retried errors, by class
}

// recordUnit is one claim-at-commit unit at level: the work (a business
// row) first, then Record as the last statement; commit when recorded,
// roll back on a replay. A retryable error (from Record or COMMIT) runs
// the whole unit again, work included.
func (e *env) recordUnit(ctx context.Context, l *ledger.Store, level sql.IsolationLevel, req ledger.ClaimRequest, key string, worker int, r ledger.Result) (recordOutcome, error) {
	out := recordOutcome{classes: map[string]int{}}
	for attempt := 0; attempt < 40; attempt++ {
		if attempt > 0 {
			out.retries++
			time.Sleep(time.Duration(attempt) * time.Millisecond)
		}
		tx, err := e.DB.BeginTx(ctx, &sql.TxOptions{Isolation: level})
		if err != nil {
			if e.Dialect.Classify(err).Retryable() {
				out.classes[e.Dialect.Classify(err).String()]++
				continue
			}
			return out, err
		}
		var c *ledger.Claim
		err = e.WriteBiz(ctx, tx, key, worker)
		if err == nil {
			c, err = l.Record(ctx, tx, req, r)
		}
		if err == nil && c.Recorded() {
			err = tx.Commit()
			if err == nil {
				out.recorded, out.result = true, r
				return out, nil
			}
		} else {
			tx.Rollback()
		}
		if err == nil {
			out.result = c.Result
			return out, nil
		}
		if errors.Is(err, ledger.ErrRetryable) || e.Dialect.Classify(err).Retryable() {
			out.classes[e.Dialect.Classify(err).String()]++
			continue
		}
		return out, err
	}
	return out, errors.New("still retrying after 40 attempts")
}

// Record's outcomes on one connection: recorded, replayed with the stored
// result, key reused, incomplete, an expired entry taken over, input
// refused before any statement, and a rolled-back record leaving nothing.
func TestRecord(t *testing.T) {
	t.Parallel()
	forEachTarget(t, 4, func(t *testing.T, e *env) {
		ctx := context.Background()
		res := ledger.Result{Code: 3, Response: []byte{0, 1, 2, 0xff}, TypeName: "t.Resp"}
		id := testdb.ID(t, "tenant-a", method, "record")
		req := ledger.ClaimRequest{Identity: id, Fingerprint: fp("record")}
		out, err := e.recordUnit(ctx, e.l, sql.LevelDefault, req, "record", 1, res)
		if err != nil || !out.recorded {
			t.Fatalf("first record: %+v %v", out, err)
		}
		en, err := e.l.Lookup(ctx, e.DB, id)
		if err != nil || en.State != ledger.Completed || !bytes.Equal(en.Result.Response, res.Response) || en.Result.Code != 3 || en.Result.TypeName != "t.Resp" {
			t.Fatalf("entry after record: %+v %v", en, err)
		}
		// A claim-first caller replays it.
		if c, err := claimOnce(t, e, e.l, id, fp("record"), "never"); err != nil || c.Outcome != ledger.Replay || !bytes.Equal(c.Result.Response, res.Response) {
			t.Fatalf("claim after record: %+v %v", c, err)
		}
		// A second record replays and its work is rolled back.
		out, err = e.recordUnit(ctx, e.l, sql.LevelDefault, req, "record", 2, ledger.Result{Response: []byte("other")})
		if err != nil || out.recorded || !bytes.Equal(out.result.Response, res.Response) || out.result.Code != 3 {
			t.Fatalf("second record: %+v %v, want a replay of the first", out, err)
		}
		if n := e.BizRows(t, "record"); n != 1 {
			t.Fatalf("%d business rows, want 1 (the replaying unit's work rolled back)", n)
		}
		// Another fingerprint.
		_, err = e.recordUnit(ctx, e.l, sql.LevelDefault, ledger.ClaimRequest{Identity: id, Fingerprint: fp("other")}, "record-reused", 3, res)
		if !errors.Is(err, ledger.ErrKeyReused) {
			t.Fatalf("record with another fingerprint: %v, want ErrKeyReused", err)
		}
		// Committed without a result.
		pid := testdb.ID(t, "tenant-a", method, "pending")
		commitIncomplete(t, e, ledger.ClaimRequest{Identity: pid, Fingerprint: fp("pending")})
		if _, err := e.recordUnit(ctx, e.l, sql.LevelDefault, ledger.ClaimRequest{Identity: pid, Fingerprint: fp("pending")}, "pending", 1, res); !errors.Is(err, ledger.ErrIncomplete) {
			t.Fatalf("record over a pending entry: %v, want ErrIncomplete", err)
		}
		// Bad input: nothing sent.
		big := ledger.Result{Response: make([]byte, ledgerkit.DefaultMaxResultSize+1)}
		tx, err := e.DB.BeginTx(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		defer tx.Rollback()
		for name, c := range map[string]struct {
			tx  *sql.Tx
			req ledger.ClaimRequest
			r   ledger.Result
		}{
			"nil tx":          {nil, req, res},
			"zero identity":   {tx, ledger.ClaimRequest{Fingerprint: fp("x")}, res},
			"zero fp":         {tx, ledger.ClaimRequest{Identity: id}, res},
			"too big":         {tx, req, big},
			"code over limit": {tx, req, ledger.Result{Code: ledgerkit.MaxCode + 1}},
			"bad type name":   {tx, req, ledger.Result{TypeName: "a\nb"}},
		} {
			if c, err := e.l.Record(ctx, c.tx, c.req, c.r); !errors.Is(err, ledger.ErrInvalid) || c != nil {
				t.Errorf("%s: %+v %v, want ErrInvalid", name, c, err)
			}
		}
		// Rolled back: nothing left, a claim acquires.
		rid := testdb.ID(t, "tenant-a", method, "rolled-back")
		c, err := e.l.Record(ctx, tx, ledger.ClaimRequest{Identity: rid, Fingerprint: fp("rb")}, res)
		if err != nil || !c.Recorded() || c.Acquired() {
			t.Fatalf("record: %+v %v", c, err)
		}
		if err := e.l.Complete(ctx, tx, c, res); !errors.Is(err, ledger.ErrNotAcquired) {
			t.Fatalf("Complete of a recorded entry: %v, want ErrNotAcquired", err)
		}
		if err := tx.Rollback(); err != nil {
			t.Fatal(err)
		}
		if _, err := e.l.Lookup(ctx, e.DB, rid); !errors.Is(err, ledger.ErrNotFound) {
			t.Fatalf("lookup after a rolled-back record: %v, want ErrNotFound", err)
		}
		testdb.WaitIdle(t, e.DB)
	})
}

// An expired entry is taken over by exactly one of 16 concurrent
// recorders; nobody replays the expired result.
func TestRecordTakesOverExpired(t *testing.T) {
	t.Parallel()
	forEachTarget(t, 16, func(t *testing.T, e *env) {
		t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
		old := e.store(t, ledger.WithRetention(time.Hour), ledger.WithClock(func() time.Time { return t0 }))
		later := e.store(t, ledger.WithRetention(time.Hour), ledger.WithClock(func() time.Time { return t0.Add(2 * time.Hour) }))
		for k := range 5 {
			key := fmt.Sprintf("expired-%d", k)
			id := testdb.ID(t, "tenant-a", method, key)
			if _, err := claimOnce(t, e, old, id, fp("old"), "old result"); err != nil {
				t.Fatal(err)
			}
			outs := e.recordHerd(t, later, sql.LevelDefault, ledger.ClaimRequest{Identity: id, Fingerprint: fp("new")}, key, 16)
			for _, o := range outs {
				if string(o.result.Response) == "old result" {
					t.Fatalf("key %s: the expired result was replayed", key)
				}
			}
		}
	})
}

// recordHerd runs n claim-at-commit units on one key at once and checks:
// exactly one records, every other replays its result byte for byte, one
// business row. It logs the retried errors by class.
func (e *env) recordHerd(t *testing.T, l *ledger.Store, level sql.IsolationLevel, req ledger.ClaimRequest, key string, n int) []recordOutcome {
	t.Helper()
	ctx := context.Background()
	outs := make([]recordOutcome, n)
	errs := make([]error, n)
	start := make(chan struct{})
	var wg sync.WaitGroup
	for w := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			r := ledger.Result{Response: []byte(fmt.Sprintf("%s by worker %d", key, w)), TypeName: "t.Resp"}
			outs[w], errs[w] = e.recordUnit(ctx, l, level, req, key, w, r)
		}()
	}
	close(start)
	wg.Wait()
	var winner *ledger.Result
	recorded := 0
	for w := range outs {
		if errs[w] != nil {
			t.Fatalf("key %s, worker %d: %v", key, w, errs[w])
		}
		if outs[w].recorded {
			recorded++
			winner = &outs[w].result
		}
	}
	if recorded != 1 {
		t.Fatalf("key %s: %d recorded, want exactly 1", key, recorded)
	}
	for w, o := range outs {
		if !o.recorded && !bytes.Equal(o.result.Response, winner.Response) {
			t.Fatalf("key %s, worker %d: replayed %q, the winner recorded %q", key, w, o.result.Response, winner.Response)
		}
	}
	if b := e.BizRows(t, key); b != 1 {
		t.Fatalf("key %s: %d business rows, want 1 (only the recording unit's work commits)", key, b)
	}
	return outs
}

// 64 claim-at-commit units per key, over many keys, at every isolation
// level: one effect per key, identical replays. The log says which
// retryable errors each database raised for concurrent duplicates.
func TestRecordHerd(t *testing.T) {
	t.Parallel()
	const workers = 64
	keys := 20
	if testing.Short() {
		keys = 4
	}
	forEachTarget(t, workers, func(t *testing.T, e *env) {
		for _, level := range e.IsolationLevels() {
			t.Run(level.String(), func(t *testing.T) {
				classes := map[string]int{}
				retries := 0
				keys := testdb.Scaled(e.Name, keys)
				for k := range keys {
					key := fmt.Sprintf("%s-rherd-%d", level, k)
					req := ledger.ClaimRequest{Identity: testdb.ID(t, "tenant-a", method, key), Fingerprint: fp(key)}
					for _, o := range e.recordHerd(t, e.l, level, req, key, workers) {
						retries += o.retries
						for c, n := range o.classes {
							classes[c] += n
						}
					}
				}
				t.Logf("%s %s: %d keys × %d units, %d whole-unit retries %v", e.Name, level, keys, workers, retries, classes)
			})
		}
	})
}

// A concurrent duplicate, its work done, waits on the holder's
// uncommitted entry. When the holder commits it replays the holder's
// result (READ COMMITTED on PostgreSQL; both levels on InnoDB, after a
// 1062 and the locking read) or gets a retryable error (PostgreSQL's
// REPEATABLE READ and SERIALIZABLE: 40001); when the holder rolls back it
// records.
func TestRecordConcurrentDuplicate(t *testing.T) {
	t.Parallel()
	forEachTarget(t, 4, func(t *testing.T, e *env) {
		for _, level := range e.IsolationLevels() {
			for _, commit := range []bool{true, false} {
				key := fmt.Sprintf("dup-%s-%v", level, commit)
				got, err := e.raceRecord(t, key, level, commit)
				switch {
				case !commit && (err != nil || !got.Recorded()):
					t.Fatalf("%s, holder rolled back: %+v %v, want recorded", level, got, err)
				case commit && snapshotPG(e.Dialect, level):
					if !errors.Is(err, ledger.ErrRetryable) || e.Dialect.Classify(err) != dialects.ClassSerialization {
						t.Fatalf("%s, holder committed: %+v %v, want a serialization failure", level, got, err)
					}
				case commit && (err != nil || got.Outcome != ledger.Replay || string(got.Result.Response) != "A's result"):
					t.Fatalf("%s, holder committed: %+v %v, want a replay of A's result", level, got, err)
				}
				t.Logf("%s %s, holder committed %v: %v %v", e.Name, level, commit, outcomeOf(got), err)
			}
		}
	}, "postgres", "mysql")
}

func outcomeOf(c *ledger.Claim) string {
	if c == nil {
		return "no claim"
	}
	return ledger.OutcomeName(c.Outcome)
}

func snapshotPG(d dialects.Dialect, level sql.IsolationLevel) bool {
	return d.Name() == "postgres" && (level == sql.LevelRepeatableRead || level == sql.LevelSerializable)
}

// raceRecord: A records in an open transaction; B, at level, does its
// work (a business row, which also takes its snapshot) and records: it
// must block, as the database shows; A then commits or rolls back, and B's
// outcome is returned (B's transaction rolled back).
func (e *env) raceRecord(t *testing.T, key string, level sql.IsolationLevel, commit bool) (*ledger.Claim, error) {
	t.Helper()
	ctx := context.Background()
	req := ledger.ClaimRequest{Identity: testdb.ID(t, "tenant-a", method, key), Fingerprint: fp(key)}
	a, err := e.DB.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Rollback()
	if c, err := e.l.Record(ctx, a, req, ledger.Result{Response: []byte("A's result")}); err != nil || !c.Recorded() {
		t.Fatalf("A: %+v %v", c, err)
	}
	holder := testdb.SessionID(t, e.Dialect, a)
	b, err := e.DB.BeginTx(ctx, &sql.TxOptions{Isolation: level})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Rollback()
	if err := e.WriteBiz(ctx, b, key, 2); err != nil {
		t.Fatal(err)
	}
	type res struct {
		c   *ledger.Claim
		err error
	}
	done := make(chan res, 1)
	returned := make(chan struct{})
	go func() {
		defer close(returned)
		c, err := e.l.Record(ctx, b, req, ledger.Result{Response: []byte("B's result")})
		done <- res{c, err}
	}()
	testdb.WaitBlocked(t, e.DB, e.Dialect, holder, 1, returned)
	if commit {
		err = a.Commit()
	} else {
		err = a.Rollback()
	}
	if err != nil {
		t.Fatal(err)
	}
	r := <-done
	return r.c, r.err
}

// plainDialect hides every optional interface of the dialect it wraps,
// dialectkit.RecordQuerier among them.
type plainDialect struct{ dialects.Dialect }

// A dialect without dialectkit.RecordQuerier still supports Record: the store
// claims and completes, with the same outcomes.
func TestRecordWithoutRecorderDialect(t *testing.T) {
	t.Parallel()
	forEachTarget(t, 2, func(t *testing.T, e *env) {
		if _, ok := e.Dialect.(dialectkit.TxChecker); ok {
			t.Skip("the dialect checks transactions; hiding its TxChecker would change what Claim does")
		}
		ctx := context.Background()
		l, err := ledger.New(plainDialect{e.Dialect}, ledger.WithTable(e.Table))
		if err != nil {
			t.Fatal(err)
		}
		req := ledger.ClaimRequest{Identity: testdb.ID(t, "tenant-a", method, "plain"), Fingerprint: fp("plain")}
		res := ledger.Result{Code: 7, Response: []byte("plain result"), TypeName: "t.Resp"}
		out, err := e.recordUnit(ctx, l, sql.LevelDefault, req, "plain", 1, res)
		if err != nil || !out.recorded {
			t.Fatalf("first record: %+v %v", out, err)
		}
		out, err = e.recordUnit(ctx, l, sql.LevelDefault, req, "plain", 2, ledger.Result{Response: []byte("other")})
		if err != nil || out.recorded || !bytes.Equal(out.result.Response, res.Response) || out.result.Code != 7 {
			t.Fatalf("second record: %+v %v, want a replay", out, err)
		}
		if _, err := e.recordUnit(ctx, l, sql.LevelDefault, ledger.ClaimRequest{Identity: req.Identity, Fingerprint: fp("x")}, "plain", 3, res); !errors.Is(err, ledger.ErrKeyReused) {
			t.Fatalf("another fingerprint: %v, want ErrKeyReused", err)
		}
		if n := e.BizRows(t, "plain"); n != 1 {
			t.Fatalf("%d business rows, want 1", n)
		}
	}, "sqlite", "postgres")
}
