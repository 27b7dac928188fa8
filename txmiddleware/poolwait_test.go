package txmiddleware_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/opledger/opledger/ledger"
	"github.com/opledger/opledger/txmiddleware"
)

// stuckRuns starts n Runs of keys key-0 … key-(n-1) whose work blocks
// until release is closed, each holding one connection of the pool, and
// returns once every work is running. The Runs' results come on done.
func (e *env) stuckRuns(t *testing.T, r *txmiddleware.Runner, n int, release <-chan struct{}) <-chan error {
	t.Helper()
	entered := make(chan struct{}, n)
	done := make(chan error, n)
	var runs atomic.Int64
	for i := range n {
		key := fmt.Sprintf("stuck-%d", i)
		work := e.bizWork(key, 1, &runs)
		go func() {
			var (
				out txmiddleware.RunResult
				err error
			)
			for {
				out, err = r.Run(context.Background(), req(t, key), func(ctx context.Context, tx *sql.Tx) (ledger.Result, error) {
					entered <- struct{}{}
					<-release
					return work(ctx, tx)
				})
				// On a loaded machine even these calls can find BEGIN slower
				// than the bound: they are told the database is busy, and
				// run again.
				if !errors.Is(err, txmiddleware.ErrBusy) {
					break
				}
			}
			if err == nil && !out.Executed {
				err = fmt.Errorf("%s: %+v, want executed", key, out)
			}
			done <- err
		}()
	}
	for range n {
		select {
		case <-entered:
		case err := <-done:
			t.Fatalf("a stuck call ended before its work ran: %v", err)
		}
	}
	return done
}

// TestPoolWaitIsBounded: the lock-wait bound includes the wait for a pool
// connection. With a pool of N held by N stuck calls (N = 1 on SQLite,
// where a second writer would wait for the write lock instead), a duplicate of one
// of them gets ErrInProgress, and a call with another key ErrBusy (the
// pool was busy; nothing was written), each after the bound, not at the
// context's deadline; once the stuck calls end, both run.
func TestPoolWaitIsBounded(t *testing.T) {
	t.Parallel()
	for _, n := range []int{1, 3} {
		families := []string{"sqlite", "postgres", "mysql"}
		if n > 1 {
			families = families[1:] // SQLite has one writer: one call can hold it
		}
		t.Run(fmt.Sprintf("pool-of-%d", n), func(t *testing.T) {
			forEachTarget(t, n, func(t *testing.T, e *env) {
				r := e.runner(t, txmiddleware.WithLockWait(300*time.Millisecond))
				release := make(chan struct{})
				done := e.stuckRuns(t, r, n, release)
				defer func() {
					close(release)
					for range n {
						if err := <-done; err != nil {
							t.Error(err)
						}
					}
				}()
				// A hang guard, far past the bound.
				ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
				defer cancel()
				var runs atomic.Int64
				out, err := r.Run(ctx, req(t, "stuck-0"), e.bizWork("stuck-0", 2, &runs))
				if !errors.Is(err, ledger.ErrInProgress) || errors.Is(err, txmiddleware.ErrBusy) || ctx.Err() != nil || out.Attempts != 1 {
					t.Errorf("duplicate of a stuck call: %+v %v, want ErrInProgress within the bound", out, err)
				}
				out, err = r.Run(ctx, req(t, "other"), e.bizWork("other", 2, &runs))
				if !errors.Is(err, txmiddleware.ErrBusy) || errors.Is(err, ledger.ErrInProgress) || ctx.Err() != nil || out.Attempts != 1 {
					t.Errorf("another key behind a full pool: %+v %v, want ErrBusy within the bound", out, err)
				}
				if runs.Load() != 0 {
					t.Errorf("%d works ran without a connection", runs.Load())
				}
				// A read of the ledger (a transport's resolve) waits for a
				// connection within the bound too.
				if !r.InFlight(mustID(t, "stuck-0")) || r.InFlight(mustID(t, "other")) {
					t.Error("InFlight does not see the stuck call, or sees one that is not")
				}
				if _, err := r.Lookup(ctx, mustID(t, "stuck-0")); !errors.Is(err, ledger.ErrInProgress) || ctx.Err() != nil {
					t.Errorf("Lookup of a stuck call's key behind a full pool: %v, want ErrInProgress within the bound", err)
				}
				if _, err := r.Lookup(ctx, mustID(t, "other")); !errors.Is(err, txmiddleware.ErrBusy) || ctx.Err() != nil {
					t.Errorf("Lookup of another key behind a full pool: %v, want ErrBusy within the bound", err)
				}
			}, families...)
		})
	}
}

// TestSQLiteWriterWait: on SQLite, with connections to spare, a call
// waits at BEGIN for the single write lock, not for the pool. A call with
// another key than the stuck writer's is told the database was busy
// (ErrBusy), not that its key is in progress; a duplicate of the stuck
// call gets ErrInProgress.
func TestSQLiteWriterWait(t *testing.T) {
	t.Parallel()
	forEachTarget(t, 3, func(t *testing.T, e *env) {
		r := e.runner(t, txmiddleware.WithLockWait(300*time.Millisecond))
		release := make(chan struct{})
		done := e.stuckRuns(t, r, 1, release)
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		var runs atomic.Int64
		_, other := r.Run(ctx, req(t, "other"), e.bizWork("other", 2, &runs))
		_, dup := r.Run(ctx, req(t, "stuck-0"), e.bizWork("stuck-0", 2, &runs))
		close(release)
		if err := <-done; err != nil {
			t.Fatal(err)
		}
		if !errors.Is(other, txmiddleware.ErrBusy) || errors.Is(other, ledger.ErrInProgress) {
			t.Errorf("another key behind the writer: %v, want ErrBusy", other)
		}
		if !errors.Is(dup, ledger.ErrInProgress) || errors.Is(dup, txmiddleware.ErrBusy) {
			t.Errorf("a duplicate of the writer: %v, want ErrInProgress", dup)
		}
		if runs.Load() != 0 {
			t.Errorf("%d works ran behind the writer", runs.Load())
		}
	}, "sqlite")
}
