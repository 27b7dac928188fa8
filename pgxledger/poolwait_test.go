package pgxledger_test

import (
	"context"
	"errors"
	"regexp"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/opledger/opledger/internal/testkit/testdb"
	"github.com/opledger/opledger/ledger"
	"github.com/opledger/opledger/txmiddleware"
)

// TestRunnerPoolWaitIsBounded: the lock-wait bound includes the wait for a
// connection of the pgxpool (its Acquire), in both orders. With a pool of
// one held by a stuck call, a duplicate of it gets ErrInProgress and a
// call with another key ErrBusy (nothing written), each within the bound,
// not at the context's deadline, and so does a Lookup (a transport's
// resolve); InFlight sees the stuck call. Once it ends, both run.
func TestRunnerPoolWaitIsBounded(t *testing.T) {
	testdb.Parallel(t, "postgres", 1)
	e := newEnv(t, 1)
	for _, order := range orders {
		t.Run(order.name, func(t *testing.T) {
			r := e.runner(t, append([]txmiddleware.Option{txmiddleware.WithLockWait(300 * time.Millisecond)}, order.opts...)...)
			stuck, other := "stuck-"+order.name, "other-"+order.name
			entered, release, done := make(chan struct{}), make(chan struct{}), make(chan error, 1)
			var stuckRuns atomic.Int64
			go func() {
				var (
					out txmiddleware.RunResult
					err error
				)
				work := e.bizWork(stuck, &stuckRuns)
				for {
					out, err = r.Run(context.Background(), req(t, stuck), func(ctx context.Context, tx pgx.Tx) (ledger.Result, error) {
						close(entered)
						<-release
						return work(ctx, tx)
					})
					// On a loaded machine even this call can find the pool
					// slower than the bound: it is told the database is busy,
					// and runs again.
					if !errors.Is(err, txmiddleware.ErrBusy) {
						break
					}
				}
				if err == nil && !out.Executed {
					err = errors.New("the stuck call did not execute")
				}
				done <- err
			}()
			select {
			case <-entered:
			case err := <-done:
				t.Fatalf("the stuck call ended before its work ran: %v", err)
			}
			// A hang guard, far past the bound.
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			var runs atomic.Int64
			out, err := r.Run(ctx, req(t, stuck), e.bizWork(stuck, &runs))
			if !errors.Is(err, ledger.ErrInProgress) || errors.Is(err, txmiddleware.ErrBusy) || ctx.Err() != nil || out.Attempts != 1 {
				t.Errorf("duplicate of the stuck call: %+v %v, want ErrInProgress within the bound", out, err)
			}
			out, err = r.Run(ctx, req(t, other), e.bizWork(other, &runs))
			if !errors.Is(err, txmiddleware.ErrBusy) || errors.Is(err, ledger.ErrInProgress) || ctx.Err() != nil || out.Attempts != 1 {
				t.Errorf("another key behind a full pool: %+v %v, want ErrBusy within the bound", out, err)
			}
			if runs.Load() != 0 {
				t.Errorf("%d works ran without a connection", runs.Load())
			}
			if !r.InFlight(req(t, stuck).Identity) || r.InFlight(req(t, other).Identity) {
				t.Error("InFlight does not see the stuck call, or sees one that is not")
			}
			if _, err := r.Lookup(ctx, req(t, stuck).Identity); !errors.Is(err, ledger.ErrInProgress) || ctx.Err() != nil {
				t.Errorf("Lookup of the stuck call's key behind a full pool: %v, want ErrInProgress within the bound", err)
			}
			if _, err := r.Lookup(ctx, req(t, other).Identity); !errors.Is(err, txmiddleware.ErrBusy) || ctx.Err() != nil {
				t.Errorf("Lookup of another key behind a full pool: %v, want ErrBusy within the bound", err)
			}
			close(release)
			if err := <-done; err != nil {
				t.Fatal(err)
			}
			if r.InFlight(req(t, stuck).Identity) {
				t.Error("InFlight still sees the stuck call after it ended")
			}
			if out, err := r.Run(ctx, req(t, other), e.bizWork(other, &runs)); err != nil || !out.Executed {
				t.Fatalf("another key once the pool is free: %+v %v", out, err)
			}
			if out, err := r.Run(ctx, req(t, stuck), e.bizWork(stuck, &runs)); err != nil || !out.Replayed {
				t.Fatalf("the stuck call's key once it ended: %+v %v, want a replay", out, err)
			}
			if en, err := r.Lookup(ctx, req(t, stuck).Identity); err != nil || en.State != ledger.Completed {
				t.Fatalf("Lookup once the pool is free: %+v %v", en, err)
			}
			if got := e.bizRows(t, stuck) + e.bizRows(t, other); got != 2 {
				t.Fatalf("%d business rows, want one per key", got)
			}
			if n := e.pool.Stat().AcquiredConns(); n != 0 {
				t.Fatalf("%d connections still acquired", n)
			}
		})
	}
}

// acquireStarts signals on started when the pool's Acquire begins (a
// pgxpool.AcquireTracer), once armed.
type acquireStarts struct {
	armed   atomic.Bool
	started chan struct{}
}

func (a *acquireStarts) TraceAcquireStart(ctx context.Context, _ *pgxpool.Pool, _ pgxpool.TraceAcquireStartData) context.Context {
	if a.armed.CompareAndSwap(true, false) {
		close(a.started)
	}
	return ctx
}

func (*acquireStarts) TraceAcquireEnd(context.Context, *pgxpool.Pool, pgxpool.TraceAcquireEndData) {}

func (*acquireStarts) TraceQueryStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceQueryStartData) context.Context {
	return ctx
}

func (*acquireStarts) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}

// TestRunnerClaimBoundIsWhatIsLeft: the claim's own lock waits get what
// the wait for a connection left of the bound (rounded up to an eighth of
// it), not the whole bound again: a call that waited at least half the
// bound for the pool and then meets a holder of its key sends its claim
// with a lock_timeout of at most half the bound, read from the waiting
// statement in pg_stat_activity, and gets ErrInProgress.
func TestRunnerClaimBoundIsWhatIsLeft(t *testing.T) {
	testdb.Parallel(t, "postgres", 3)
	tr := &acquireStarts{started: make(chan struct{})}
	cfg := testdb.PgxConfig(t, "", 2, nil)
	cfg.ConnConfig.Tracer = tr
	e := newEnvOn(t, testdb.OpenPgx(t, cfg), nil)
	watch := testdb.OpenPgx(t, testdb.PgxConfig(t, "", 1, nil))
	ctx := context.Background()
	const bound = 2 * time.Second
	key := "held-after-pool"
	holder, c, err := e.s.BeginClaim(ctx, e.pool, pgx.TxOptions{}, req(t, key))
	if err != nil || !c.Acquired() {
		t.Fatalf("holder: %v %v", c, err)
	}
	defer func() { _ = holder.Rollback(ctx) }()
	other, err := e.pool.Acquire(ctx) // the pool's other connection
	if err != nil {
		t.Fatal(err)
	}
	r := e.runner(t, txmiddleware.WithLockWait(bound))
	type outcome struct {
		out txmiddleware.RunResult
		err error
	}
	var runs atomic.Int64
	done := make(chan outcome, 1)
	tr.armed.Store(true)
	go func() {
		out, err := r.Run(ctx, req(t, key), e.bizWork(key, &runs))
		done <- outcome{out, err}
	}()
	<-tr.started
	// The runner's wait began before its Acquire did: after this, at
	// least half the bound has passed when it gets the connection.
	time.Sleep(bound / 2)
	other.Release()
	var query string
	for query == "" {
		select {
		case o := <-done:
			t.Fatalf("the call returned before its claim was seen waiting: %+v %v", o.out, o.err)
		default:
		}
		err := watch.QueryRow(ctx, `SELECT query FROM pg_stat_activity
			WHERE wait_event_type = 'Lock' AND query LIKE '%set_config(''lock_timeout''%'`).Scan(&query)
		if err != nil && !errors.Is(err, pgx.ErrNoRows) {
			t.Fatal(err)
		}
	}
	m := regexp.MustCompile(`set_config\('lock_timeout', '(\d+)'`).FindStringSubmatch(query)
	if m == nil {
		t.Fatalf("no lock_timeout in the waiting claim: %s", query)
	}
	ms, _ := strconv.Atoi(m[1])
	if ms < 1 || ms > int(bound/time.Millisecond)/2 {
		t.Fatalf("the claim's lock_timeout is %dms after a pool wait of half the %v bound; want at most %dms", ms, bound, int(bound/time.Millisecond)/2)
	}
	o := <-done
	if !errors.Is(o.err, ledger.ErrInProgress) || o.out.Executed || runs.Load() != 0 {
		t.Fatalf("behind the pool and the holder: %+v %v, want ErrInProgress", o.out, o.err)
	}
	t.Logf("the claim waited with lock_timeout %dms", ms)
}
