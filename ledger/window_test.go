package ledger_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/opledger/opledger/dialects/sqlite"
	"github.com/opledger/opledger/internal/keybirth"
	"github.com/opledger/opledger/internal/testkit/testdb"
	"github.com/opledger/opledger/internal/txledger"
	"github.com/opledger/opledger/ledger"
)

// clock is a settable clock for a store.
type clock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *clock) Now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.now }
func (c *clock) Add(d time.Duration) {
	c.mu.Lock()
	c.now = c.now.Add(d)
	c.mu.Unlock()
}

// TestWindowLateRetry is the reproduction with a key that carries
// its birth: claimed, completed and committed, replayed, then past the
// window both a lookup and a claim answer ErrKeyExpired: the call never
// runs again and is never reported as not found. A key without a readable
// birth keeps today's behaviour: not found, then taken over.
func TestWindowLateRetry(t *testing.T) {
	t.Parallel()
	forEachTarget(t, 4, func(t *testing.T, e *env) {
		ctx := context.Background()
		// An hour into today (UTC), whenever the test runs: the sweeps
		// below, two hours on, must come before the key's bucket (today's)
		// can be dropped, at its end plus the retention and the skew.
		c := &clock{now: time.Now().UTC().Truncate(24 * time.Hour).Add(time.Hour)}
		l := e.store(t, ledger.WithRetention(time.Hour), ledger.WithClockSkew(time.Minute), ledger.WithClock(c.Now))

		born := testdb.ID(t, "tenant-a", method, keybirth.New(c.Now()))
		if b, ok := born.Birth(); !ok || b.UnixMilli() != c.Now().UnixMilli() {
			t.Fatalf("birth %v %v", b, ok)
		}
		random := testdb.ID(t, "tenant-a", method, "a-random-key-without-birth")
		for _, id := range []ledger.Identity{born, random} {
			if cl, err := claimOnce(t, e, l, id, fp("req"), "ok"); err != nil || !cl.Acquired() {
				t.Fatalf("first claim: %+v %v", cl, err)
			}
			if cl, err := claimOnce(t, e, l, id, fp("req"), "ok"); err != nil || cl.Outcome != ledger.Replay {
				t.Fatalf("second claim: %+v %v", cl, err)
			}
		}
		var bornAt int64
		if err := e.DB.QueryRowContext(ctx, "SELECT born_at FROM "+e.Dialect.QuoteIdent(e.Table)+" WHERE caller = "+e.Ph(1)+" ORDER BY born_at DESC", "tenant-a").Scan(&bornAt); err != nil {
			t.Fatal(err)
		}
		if b, _ := born.Birth(); bornAt != b.UnixMicro() {
			t.Fatalf("born_at %d, want %d", bornAt, b.UnixMicro())
		}

		// Inside the window (retention minus skew) the entry answers.
		c.Add(time.Hour - time.Minute - time.Second)
		if en, err := l.Lookup(ctx, e.DB, born); err != nil || en.State != ledger.Completed {
			t.Fatalf("lookup inside the window: %+v %v", en, err)
		}
		// Past it: expired, never not found, never run again.
		c.Add(2 * time.Second)
		if _, err := l.Lookup(ctx, e.DB, born); !errors.Is(err, ledger.ErrKeyExpired) || errors.Is(err, ledger.ErrNotFound) {
			t.Fatalf("lookup past the window: %v, want ErrKeyExpired", err)
		}
		if cl, err := claimOnce(t, e, l, born, fp("req"), "again"); !errors.Is(err, ledger.ErrKeyExpired) {
			t.Fatalf("claim past the window: %+v %v, want ErrKeyExpired", cl, err)
		}
		// Swept, the answer is the same. A table partitioned by birth
		// keeps the born key's entry until its bucket is dropped whole
		// (its end plus the retention plus the skew).
		c.Add(time.Hour)
		partitioned := testdb.Partitioned(t, e.DB, e.Dialect, e.Table)
		want := int64(2)
		if partitioned {
			want = 1
		}
		if n, err := l.Sweep(ctx, e.DB, 100); err != nil || n != want {
			t.Fatalf("sweep: %d %v, want %d entries", n, err, want)
		}
		if _, err := l.Lookup(ctx, e.DB, born); !errors.Is(err, ledger.ErrKeyExpired) {
			t.Fatalf("lookup after the sweep: %v, want ErrKeyExpired", err)
		}
		if partitioned {
			c.Add(26 * time.Hour) // past a day's bucket, the retention and the skew
			// (The count of a dropped bucket is the catalog's estimate:
			// TiDB's may be 0; what counts is that the entry is gone.)
			if n, err := l.Sweep(ctx, e.DB, 100); err != nil || e.rowsOf(t, born) != 0 {
				t.Fatalf("sweep after the bucket's end: %d %v, %d rows of the born key; want its entry dropped", n, err, e.rowsOf(t, born))
			}
		}
		if _, err := l.Lookup(ctx, e.DB, born); !errors.Is(err, ledger.ErrKeyExpired) {
			t.Fatalf("lookup after the sweep: %v, want ErrKeyExpired", err)
		}
		if cl, err := claimOnce(t, e, l, born, fp("req"), "again"); !errors.Is(err, ledger.ErrKeyExpired) {
			t.Fatalf("claim after the sweep: %+v %v, want ErrKeyExpired", cl, err)
		}
		// The random key is forgotten, as documented: it runs again.
		if _, err := l.Lookup(ctx, e.DB, random); !errors.Is(err, ledger.ErrNotFound) {
			t.Fatalf("lookup of a random key after its retention: %v", err)
		}
		if cl, err := claimOnce(t, e, l, random, fp("req"), "again"); err != nil || !cl.Acquired() {
			t.Fatalf("claim of a random key after its retention: %+v %v", cl, err)
		}
	})
}

// TestWindowFutureKey: a key born more than the skew ahead of the ledger's
// clock is refused as invalid (field "key") by Claim, Record and Lookup;
// within the skew it is accepted.
func TestWindowFutureKey(t *testing.T) {
	t.Parallel()
	forEachTarget(t, 2, func(t *testing.T, e *env) {
		ctx := context.Background()
		now := time.Now()
		l := e.store(t, ledger.WithClockSkew(time.Minute), ledger.WithClock(func() time.Time { return now }))
		ahead := testdb.ID(t, "tenant-a", method, keybirth.New(now.Add(2*time.Minute)))
		if _, err := claimOnce(t, e, l, ahead, fp("req"), "ok"); !errors.Is(err, ledger.ErrInvalid) {
			t.Fatalf("claim of a key from the future: %v", err)
		} else if field, _, _ := txledger.InputError(err); field != "key" {
			t.Fatalf("field %q, want key", field)
		}
		if _, err := l.Lookup(ctx, e.DB, ahead); !errors.Is(err, ledger.ErrInvalid) {
			t.Fatalf("lookup of a key from the future: %v", err)
		}
		tx, err := e.DB.BeginTx(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		defer tx.Rollback()
		if _, err := l.Record(ctx, tx, ledger.ClaimRequest{Identity: ahead, Fingerprint: fp("req")}, ledger.Result{}); !errors.Is(err, ledger.ErrInvalid) {
			t.Fatalf("record of a key from the future: %v", err)
		}
		tx.Rollback()
		near := testdb.ID(t, "tenant-a", method, keybirth.New(now.Add(30*time.Second)))
		if cl, err := claimOnce(t, e, l, near, fp("req"), "ok"); err != nil || !cl.Acquired() {
			t.Fatalf("claim of a key within the skew: %+v %v", cl, err)
		}
	}, "sqlite", "postgres")
}

// TestWindowFirstSent: a first-sent time gives a key without a birth of
// its own one, and is part of its identity; a key with a birth ignores it.
func TestWindowFirstSent(t *testing.T) {
	t.Parallel()
	id, err := ledger.NewIdentity("tenant-a", method, "random-key")
	if err != nil {
		t.Fatal(err)
	}
	sent := time.Date(2026, 12, 6, 12, 0, 0, 0, time.UTC)
	a, err := id.WithFirstSent(sent)
	if err != nil {
		t.Fatal(err)
	}
	if b, ok := a.Birth(); !ok || !b.Equal(sent) {
		t.Fatalf("birth %v %v", b, ok)
	}
	other, _ := id.WithFirstSent(sent.Add(time.Second))
	if a.ID() == id.ID() || a.ID() == other.ID() {
		t.Fatal("the first-sent time is not part of the identity")
	}
	again, _ := id.WithFirstSent(sent)
	if again.ID() != a.ID() {
		t.Fatal("the same first-sent time gives another identity")
	}
	uuid := keybirth.New(sent)
	kid, _ := ledger.NewIdentity("tenant-a", method, uuid)
	if k2, err := kid.WithFirstSent(sent.Add(time.Hour)); err != nil || k2 != kid {
		t.Fatalf("a key with its own birth took a first-sent time: %v", err)
	}
	if _, err := id.WithFirstSent(time.Unix(0, 0)); !errors.Is(err, ledger.ErrInvalid) {
		t.Fatalf("first-sent at the epoch: %v", err)
	}
	if _, err := (ledger.Identity{}).WithFirstSent(sent); !errors.Is(err, ledger.ErrInvalid) {
		t.Fatalf("first-sent on the zero identity: %v", err)
	}
	// A derived key carries the operation's birth.
	dk, err := kid.DerivedKey("charge")
	if err != nil {
		t.Fatal(err)
	}
	if b, ok := keybirth.Birth(dk); !ok || b.UnixMilli() != sent.UnixMilli() {
		t.Fatalf("derived key %q born %v %v", dk, b, ok)
	}
	if dk2, _ := kid.DerivedKey("charge"); dk2 != dk {
		t.Fatal("derived key not stable")
	}
}

func TestWindowClockSkewOption(t *testing.T) {
	t.Parallel()
	d := sqlite.New()
	for _, opts := range [][]ledger.Option{
		{ledger.WithClockSkew(-time.Second)},
		{ledger.WithRetention(time.Minute), ledger.WithClockSkew(time.Minute)},
		{ledger.WithClockSkew(time.Second), ledger.WithClockSkew(time.Second)},
	} {
		if _, err := ledger.New(d, opts...); !errors.Is(err, ledger.ErrInvalidConfig) {
			t.Fatalf("options %v: %v, want ErrInvalidConfig", opts, err)
		}
	}
	// A short retention gets a tenth of it as its skew.
	if _, err := ledger.New(d, ledger.WithRetention(time.Second)); err != nil {
		t.Fatal(err)
	}
}

// TestWindowStalledClaimRefused: a claim or a record of a key with a
// birth that passes the window check and then stalls past the key's edge
// before its insert (the clock read first inside the window, then past
// its edge), while the key's committed entry went meanwhile (deleted here
// as a sweep or a dropped bucket would: MySQL routes a birth whose bucket
// was dropped to the next one), is refused with ErrKeyExpired and stores
// nothing: the call that ran never runs a second time.
func TestWindowStalledClaimRefused(t *testing.T) {
	t.Parallel()
	forEachTarget(t, 2, func(t *testing.T, e *env) {
		ctx := context.Background()
		const retention = time.Hour
		birth := time.Now().UTC().Truncate(time.Hour) // in a bucket the migration made
		id := testdb.ID(t, "tenant-a", method, keybirth.New(birth))
		first := e.store(t, ledger.WithRetention(retention), ledger.WithClock(func() time.Time { return birth }))
		if c, err := claimOnce(t, e, first, id, fp("stalled"), "done"); err != nil || !c.Acquired() {
			t.Fatalf("first claim: %+v, %v", c, err)
		}
		b := id.ID()
		if _, err := e.DB.ExecContext(ctx, "DELETE FROM "+e.Dialect.QuoteIdent(e.Table)+" WHERE id = "+e.Ph(1), b[:]); err != nil {
			t.Fatal(err)
		}
		for _, record := range []bool{false, true} {
			var reads atomic.Int64
			l := e.store(t, ledger.WithRetention(retention), ledger.WithClock(func() time.Time {
				if reads.Add(1) == 1 {
					return birth.Add(time.Minute) // the window check
				}
				return birth.Add(retention) // past the edge (birth + 59m)
			}))
			tx, err := e.DB.BeginTx(ctx, nil)
			if err != nil {
				t.Fatal(err)
			}
			req := ledger.ClaimRequest{Identity: id, Fingerprint: fp("stalled")}
			var c *ledger.Claim
			if record {
				c, err = l.Record(ctx, tx, req, ledger.Result{Response: []byte("again"), TypeName: "t.Resp"})
			} else {
				c, err = l.Claim(ctx, tx, req)
			}
			_ = tx.Rollback()
			if !errors.Is(err, ledger.ErrKeyExpired) {
				t.Fatalf("a stalled claim (record %v) of a key whose entry went: %+v, %v; want ErrKeyExpired", record, c, err)
			}
			if reads.Load() < 2 {
				t.Fatalf("the clock was read %d times, want the window check and the check after the insert", reads.Load())
			}
			if n := e.rowsOf(t, id); n != 0 {
				t.Fatalf("%d entries of the key after the refusal, want 0", n)
			}
		}
	})
}
