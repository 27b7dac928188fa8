package ledger_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/opledger/opledger/dialects"
	"github.com/opledger/opledger/dialects/sqlite"
	"github.com/opledger/opledger/internal/testkit/testdb"
	"github.com/opledger/opledger/internal/txledger"
	"github.com/opledger/opledger/ledger"
)

// TestSweepHeldEntry: with WithSweepLockWait, a sweep that meets an
// expired entry another open transaction holds (a claim taking it over)
// returns within the bound, deletes the others and reports the held one
// (HeldError, matching ErrInProgress); on SQLite, whose writer holds the
// whole database, it deletes nothing and reports them all. Once the holder
// commits, the entry it took over is live, and the next sweep leaves it.
// The databases' own bounds are far longer than the guard: InnoDB's
// innodb_lock_wait_timeout (50 s by default) and, here, a SQLite
// busy_timeout of two minutes; PostgreSQL skips the held row.
func TestSweepHeldEntry(t *testing.T) {
	t.Parallel()
	check := func(t *testing.T, e *env) {
		ctx := context.Background()
		now := time.Now()
		old := e.store(t, ledger.WithRetention(time.Hour), ledger.WithClock(func() time.Time { return now.Add(-3 * time.Hour) }))
		const expired = 20
		ids := make([]ledger.Identity, expired)
		for i := range ids {
			ids[i] = testdb.ID(t, "tenant-a", method, fmt.Sprintf("held-%d", i))
			if _, err := claimOnce(t, e, old, ids[i], fp("old"), "old"); err != nil {
				t.Fatal(err)
			}
		}
		// A claim takes the oldest entry over and stays open.
		holder, err := e.DB.BeginTx(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		defer holder.Rollback()
		taken, err := e.l.Claim(ctx, holder, ledger.ClaimRequest{Identity: ids[0], Fingerprint: fp("new")})
		if err != nil || !taken.Acquired() || !txledger.TookOver(taken) {
			t.Fatalf("take-over: %+v %v", taken, err)
		}
		sweeper := e.store(t, ledger.WithSweepLockWait(time.Second))
		start := time.Now()
		n, err := sweeper.Sweep(ctx, e.DB, 5)
		took := time.Since(start)
		var held *ledger.HeldError
		if !errors.As(err, &held) || !errors.Is(err, ledger.ErrInProgress) {
			t.Fatalf("sweep with a held entry: %d, %v; want a HeldError", n, err)
		}
		wantDeleted, wantHeld := int64(expired-1), int64(1)
		if e.Dialect.Name() == "sqlite" {
			wantDeleted, wantHeld = 0, expired
		}
		if n != wantDeleted || held.Held != wantHeld {
			t.Fatalf("sweep: deleted %d, held %d (%v); want %d and %d", n, held.Held, err, wantDeleted, wantHeld)
		}
		if took > 30*time.Second {
			t.Fatalf("the sweep took %v: it waited the database's own bound, not its own", took)
		}
		t.Logf("deleted %d, %v, in %v", n, err, took)
		if rows := e.LedgerRows(t); rows != int(wantHeld) {
			t.Fatalf("%d rows after the sweep, want the %d held", rows, wantHeld)
		}
		if err := e.l.Complete(ctx, holder, taken, ledger.Result{Response: []byte("new")}); err != nil {
			t.Fatal(err)
		}
		if err := holder.Commit(); err != nil {
			t.Fatal(err)
		}
		n, err = sweeper.Sweep(ctx, e.DB, 5)
		if err != nil || n != wantHeld-1 {
			t.Fatalf("sweep after the holder committed: %d, %v; want %d, nil", n, err, wantHeld-1)
		}
		if en, err := e.l.Lookup(ctx, e.DB, ids[0]); err != nil || string(en.Result.Response) != "new" {
			t.Fatalf("the entry taken over: %+v, %v", en, err)
		}
	}
	forEachTarget(t, 4, check, "postgres", "mysql")
	for _, driver := range []string{"sqlite3", "sqlite"} {
		if !slices.Contains(sql.Drivers(), driver) {
			continue
		}
		t.Run(driver, func(t *testing.T) {
			t.Parallel()
			db, err := sql.Open(driver, sqlite.DSN(filepath.Join(t.TempDir(), "held.db"), 2*time.Minute))
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { db.Close() })
			check(t, newEnv(t, driver, sqlite.New(), db))
		})
	}
}

// noWaiter is a dialect without dialects.LockWaiter.
type noWaiter struct{ d dialects.Dialect }

func (n noWaiter) Name() string                      { return n.d.Name() }
func (n noWaiter) QuoteIdent(s string) string        { return n.d.QuoteIdent(s) }
func (n noWaiter) Placeholder(i int) string          { return n.d.Placeholder(i) }
func (n noWaiter) Queries(t string) dialects.Queries { return n.d.Queries(t) }
func (n noWaiter) Classify(err error) dialects.Class { return n.d.Classify(err) }

// TestSweepLockWaitOption: WithSweepLockWait takes a positive bound and a
// dialect that can bound lock waits, and a Sweep with it needs a *sql.DB.
func TestSweepLockWaitOption(t *testing.T) {
	t.Parallel()
	for _, d := range []time.Duration{0, -time.Second} {
		if _, err := ledger.New(sqlite.New(), ledger.WithSweepLockWait(d)); !errors.Is(err, ledger.ErrInvalid) {
			t.Errorf("WithSweepLockWait(%v): %v, want ErrInvalid", d, err)
		}
	}
	if _, err := ledger.New(noWaiter{sqlite.New()}, ledger.WithSweepLockWait(time.Second)); !errors.Is(err, ledger.ErrInvalid) || !strings.Contains(err.Error(), "LockWaiter") {
		t.Errorf("a dialect without LockWaiter: %v", err)
	}
	forEachTarget(t, 2, func(t *testing.T, e *env) {
		ctx := context.Background()
		s := e.store(t, ledger.WithSweepLockWait(time.Second))
		conn, err := e.DB.Conn(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		if _, err := s.Sweep(ctx, conn, 10); !errors.Is(err, ledger.ErrInvalid) {
			t.Fatalf("Sweep on a *sql.Conn with a lock wait: %v, want ErrInvalid", err)
		}
		if n, err := s.Sweep(ctx, e.DB, 10); err != nil || n != 0 {
			t.Fatalf("Sweep of an empty table: %d, %v", n, err)
		}
	}, "sqlite")
}
