package pgxledger_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/opledger/opledger/internal/testkit/testdb"
	"github.com/opledger/opledger/ledger"
	"github.com/opledger/opledger/pgxledger"
	"github.com/opledger/opledger/txmiddleware"
)

// orders are the runner's two orders.
var orders = []struct {
	name string
	opts []txmiddleware.Option
}{
	{"claim first", nil},
	{"claim at commit", []txmiddleware.Option{txmiddleware.WithClaimAtCommit()}},
}

func (e *env) runner(t testing.TB, opts ...txmiddleware.Option) *pgxledger.Runner {
	t.Helper()
	r, err := pgxledger.NewRunner(e.pool, e.s, opts...)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// bizWork writes key's business row and returns its result, counting its
// runs.
func (e *env) bizWork(key string, runs *atomic.Int64) pgxledger.Work {
	return func(ctx context.Context, tx pgx.Tx) (ledger.Result, error) {
		n := runs.Add(1)
		if err := e.writeBiz(ctx, tx, key, int(n)); err != nil {
			return ledger.Result{}, err
		}
		return result(key), nil
	}
}

// rejected is the tests' final error.
type rejected struct{ msg string }

func (r rejected) Error() string { return "rejected: " + r.msg }

type rejectedCodec struct{}

func (rejectedCodec) Encode(err error) (ledger.Result, bool) {
	var r rejected
	if !errors.As(err, &r) {
		return ledger.Result{}, false
	}
	return ledger.Result{Code: 9, Response: []byte(r.msg), TypeName: "test.Rejected"}, true
}

func (rejectedCodec) Decode(res ledger.Result) error { return rejected{string(res.Response)} }

// TestRunner: in both orders a new key runs the work and commits its
// result (and the work sees its transaction and operation in its
// context); the same request again replays (claim first without running
// the work, at commit after running it and rolling it back); another
// request is ErrKeyReused.
func TestRunner(t *testing.T) {
	testdb.Parallel(t, "postgres", 2)
	e := newEnv(t, 2)
	ctx := context.Background()
	for _, order := range orders {
		t.Run(order.name, func(t *testing.T) {
			r := e.runner(t, order.opts...)
			key := "run-" + order.name
			var runs atomic.Int64
			out, err := r.Run(ctx, req(t, key), func(ctx context.Context, tx pgx.Tx) (ledger.Result, error) {
				if in, ok := pgxledger.TxFromContext(ctx); !ok || in != tx {
					return ledger.Result{}, errors.New("the work's context does not carry its transaction")
				}
				if id, ok := ledger.OperationFromContext(ctx); !ok || id != req(t, key).Identity {
					return ledger.Result{}, errors.New("the work's context does not carry its operation")
				}
				if err := tx.Commit(ctx); err == nil {
					return ledger.Result{}, errors.New("the work committed the runner's transaction")
				}
				if err := tx.Rollback(ctx); err == nil {
					return ledger.Result{}, errors.New("the work rolled back the runner's transaction")
				}
				return e.bizWork(key, &runs)(ctx, tx)
			})
			if err != nil || !out.Executed || out.Attempts != 1 || !sameResult(out.Result, result(key)) {
				t.Fatalf("new key: %+v %v", out, err)
			}
			out, err = r.Run(ctx, req(t, key), e.bizWork(key+"-again", &runs))
			if err != nil || !out.Replayed || !sameResult(out.Result, result(key)) || out.CompletedAt.IsZero() {
				t.Fatalf("same request: %+v %v; want a replay", out, err)
			}
			wantRuns := int64(1)
			if order.opts != nil {
				wantRuns = 2 // at commit the work runs, then rolls back
			}
			if runs.Load() != wantRuns || e.bizRows(t, key) != 1 || e.bizRows(t, key+"-again") != 0 {
				t.Fatalf("%d runs, %d and %d business rows", runs.Load(), e.bizRows(t, key), e.bizRows(t, key+"-again"))
			}
			other := req(t, key)
			other.Fingerprint = ledger.FingerprintOf([]byte("other"))
			if out, err := r.Run(ctx, other, e.bizWork(key+"-reused", &runs)); !errors.Is(err, ledger.ErrKeyReused) || out.Executed {
				t.Fatalf("another request: %+v %v; want ErrKeyReused", out, err)
			}
			if e.bizRows(t, key+"-reused") != 0 {
				t.Fatalf("a reused key's work committed")
			}
		})
	}
}

// TestRunnerFinalError: a final error of the work (the codec's) rolls the
// work back and is recorded in a fresh transaction; every retry gets it
// back without running the work. Any other error records nothing, and a
// retry runs the work again.
func TestRunnerFinalError(t *testing.T) {
	testdb.Parallel(t, "postgres", 2)
	e := newEnv(t, 2)
	ctx := context.Background()
	for _, order := range orders {
		t.Run(order.name, func(t *testing.T) {
			r := e.runner(t, append([]txmiddleware.Option{txmiddleware.WithErrorCodec(rejectedCodec{})}, order.opts...)...)
			key := "final-" + order.name
			var runs atomic.Int64
			work := func(ctx context.Context, tx pgx.Tx) (ledger.Result, error) {
				runs.Add(1)
				if err := e.writeBiz(ctx, tx, key, 1); err != nil {
					return ledger.Result{}, err
				}
				return ledger.Result{}, rejected{"no funds"}
			}
			out, err := r.Run(ctx, req(t, key), work)
			if !errors.As(err, new(rejected)) || !out.Executed || out.Result.Code != 9 {
				t.Fatalf("final error: %+v %v", out, err)
			}
			out, err = r.Run(ctx, req(t, key), work)
			if !errors.As(err, new(rejected)) || !out.Replayed || err.Error() != "rejected: no funds" {
				t.Fatalf("retry of a final error: %+v %v", out, err)
			}
			wantRuns := int64(1)
			if order.opts != nil {
				wantRuns = 2
			}
			if runs.Load() != wantRuns || e.bizRows(t, key) != 0 {
				t.Fatalf("%d runs, %d business rows: the final error's work must roll back", runs.Load(), e.bizRows(t, key))
			}
			plain := key + "-plain"
			if out, err := r.Run(ctx, req(t, plain), func(context.Context, pgx.Tx) (ledger.Result, error) {
				return ledger.Result{}, errors.New("not final")
			}); err == nil || out.Executed {
				t.Fatalf("non-final error: %+v %v", out, err)
			}
			if _, err := e.s.Lookup(ctx, e.pool, req(t, plain).Identity); !errors.Is(err, ledger.ErrNotFound) {
				t.Fatalf("a non-final error recorded something: %v", err)
			}
			if out, err := r.Run(ctx, req(t, plain), e.bizWork(plain, &runs)); err != nil || !out.Executed {
				t.Fatalf("after a non-final error: %+v %v", out, err)
			}
		})
	}
}

// TestRunnerTransient: a transient failure from the database (40001,
// raised in the work by PostgreSQL) rolls back and runs the whole unit
// again; one run commits.
func TestRunnerTransient(t *testing.T) {
	testdb.Parallel(t, "postgres", 2)
	e := newEnv(t, 2)
	ctx := context.Background()
	for _, order := range orders {
		t.Run(order.name, func(t *testing.T) {
			r := e.runner(t, append([]txmiddleware.Option{txmiddleware.WithTxBackoff(time.Millisecond, 2*time.Millisecond)}, order.opts...)...)
			key := "transient-" + order.name
			var runs atomic.Int64
			out, err := r.Run(ctx, req(t, key), func(ctx context.Context, tx pgx.Tx) (ledger.Result, error) {
				n := runs.Add(1)
				if err := e.writeBiz(ctx, tx, key, int(n)); err != nil {
					return ledger.Result{}, err
				}
				if n <= 2 {
					_, err := tx.Exec(ctx, `DO $$ BEGIN RAISE EXCEPTION 'simulated' USING ERRCODE = '40001'; END $$`)
					return ledger.Result{}, err
				}
				return result(key), nil
			})
			if err != nil || !out.Executed || out.Attempts != 3 || runs.Load() != 3 || e.bizRows(t, key) != 1 {
				t.Fatalf("%+v %v, %d runs, %d rows", out, err, runs.Load(), e.bizRows(t, key))
			}
		})
	}
}

// TestRunnerLockWait: with WithLockWait, a call whose key another
// transaction holds gives ErrInProgress (the bound set inside the
// pipelined claim or record) and leaves nothing open; once the holder
// commits, it replays.
func TestRunnerLockWait(t *testing.T) {
	testdb.Parallel(t, "postgres", 3)
	e := newEnv(t, 3)
	ctx := context.Background()
	for _, order := range orders {
		t.Run(order.name, func(t *testing.T) {
			key := "held-" + order.name
			holder, c, err := e.s.BeginClaim(ctx, e.pool, pgx.TxOptions{}, req(t, key))
			if err != nil || !c.Acquired() {
				t.Fatalf("holder: %v %v", c, err)
			}
			r := e.runner(t, append([]txmiddleware.Option{txmiddleware.WithLockWait(300 * time.Millisecond)}, order.opts...)...)
			var runs atomic.Int64
			start := time.Now()
			out, err := r.Run(ctx, req(t, key), e.bizWork(key+"-waiter", &runs))
			if !errors.Is(err, ledger.ErrInProgress) || out.Executed || time.Since(start) > 10*time.Second {
				t.Fatalf("while held: %+v %v after %v; want ErrInProgress", out, err, time.Since(start))
			}
			if n := e.pool.Stat().AcquiredConns(); n != 1 {
				t.Fatalf("%d connections acquired, want the holder's", n)
			}
			if err := e.s.CompleteCommit(ctx, holder, c, result(key)); err != nil {
				t.Fatal(err)
			}
			if out, err := r.Run(ctx, req(t, key), e.bizWork(key+"-waiter", &runs)); err != nil || !out.Replayed {
				t.Fatalf("after the holder committed: %+v %v; want a replay", out, err)
			}
		})
	}
}

// TestRunnerCommitUnknown: a connection cut after the pipelined COMMIT
// was sent gives ErrCommitUnknown, not retried; a retry with the same key
// then replays (it had committed).
func TestRunnerCommitUnknown(t *testing.T) {
	testdb.Parallel(t, "postgres", 1)
	cfg := testdb.PgxConfig(t, "", 1, nil)
	proxy := testdb.NewCutProxy(t, cfg.ConnConfig.Host+":"+itoa(int(cfg.ConnConfig.Port)))
	e := newEnvOn(t, testdb.OpenPgx(t, testdb.PgxConfigDSN(t, proxyDSN(t, proxy.Addr()), 1, nil)), nil)
	ctx := context.Background()
	for i, order := range orders {
		t.Run(order.name, func(t *testing.T) {
			key := "cut-" + itoa(i) // no "commit" in what goes through the proxy
			r := e.runner(t, order.opts...)
			var runs atomic.Int64
			// A call first, so that the connection has prepared the
			// statements: the cut is the keyed call's COMMIT.
			if _, err := r.Run(ctx, req(t, key+"-warm"), e.bizWork(key+"-warm", &runs)); err != nil {
				t.Fatal(err)
			}
			proxy.Arm()
			out, err := r.Run(ctx, req(t, key), e.bizWork(key, &runs))
			if !errors.Is(err, txmiddleware.ErrCommitUnknown) || out.Executed || out.Attempts != 1 {
				t.Fatalf("%+v %v; want ErrCommitUnknown after one attempt", out, err)
			}
			out, err = r.Run(ctx, req(t, key), e.bizWork(key, &runs))
			if err != nil || !out.Replayed || e.bizRows(t, key) != 1 {
				t.Fatalf("retry: %+v %v, %d rows; want a replay of the committed call", out, err, e.bizRows(t, key))
			}
		})
	}
}

// TestRunnerContextCancelled: a context that ends before the claim or
// inside the work commits nothing and leaves nothing acquired.
func TestRunnerContextCancelled(t *testing.T) {
	testdb.Parallel(t, "postgres", 2)
	e := newEnv(t, 2)
	for _, order := range orders {
		t.Run(order.name, func(t *testing.T) {
			r := e.runner(t, order.opts...)
			var runs atomic.Int64
			ctx, cancel := context.WithCancel(context.Background())
			cancel()
			if out, err := r.Run(ctx, req(t, "cancel-before"), e.bizWork("cancel-before", &runs)); !errors.Is(err, context.Canceled) || out.Executed {
				t.Fatalf("cancelled before: %+v %v", out, err)
			}
			ctx, cancel = context.WithCancel(context.Background())
			key := "cancel-work-" + order.name
			out, err := r.Run(ctx, req(t, key), func(ctx context.Context, tx pgx.Tx) (ledger.Result, error) {
				if err := e.writeBiz(ctx, tx, key, 1); err != nil {
					return ledger.Result{}, err
				}
				cancel()
				return result(key), nil
			})
			if !errors.Is(err, context.Canceled) || out.Executed || errors.Is(err, txmiddleware.ErrCommitUnknown) {
				t.Fatalf("cancelled in the work: %+v %v", out, err)
			}
			if e.bizRows(t, key) != 0 || e.pool.Stat().AcquiredConns() != 0 {
				t.Fatalf("cancelled in the work: %d rows, %d connections acquired", e.bizRows(t, key), e.pool.Stat().AcquiredConns())
			}
		})
	}
}

// TestRunnerIsolation: WithIsolation's level begins the pipelined
// transaction; a level PostgreSQL has not is a configuration error.
func TestRunnerIsolation(t *testing.T) {
	testdb.Parallel(t, "postgres", 2)
	e := newEnv(t, 2)
	ctx := context.Background()
	for _, order := range orders {
		r := e.runner(t, append([]txmiddleware.Option{txmiddleware.WithIsolation(sql.LevelSerializable)}, order.opts...)...)
		var level string
		key := "iso-" + order.name
		if _, err := r.Run(ctx, req(t, key), func(ctx context.Context, tx pgx.Tx) (ledger.Result, error) {
			err := tx.QueryRow(ctx, "SHOW transaction_isolation").Scan(&level)
			return result(key), err
		}); err != nil || level != "serializable" {
			t.Fatalf("%s: %q %v", order.name, level, err)
		}
	}
	if _, err := pgxledger.NewRunner(e.pool, e.s, txmiddleware.WithIsolation(sql.LevelSnapshot)); !errors.Is(err, txmiddleware.ErrInvalidConfig) {
		t.Fatalf("snapshot isolation: %v, want ErrInvalidConfig", err)
	}
	if _, err := pgxledger.NewRunner(nil, e.s); !errors.Is(err, txmiddleware.ErrInvalidConfig) {
		t.Fatalf("nil pool: %v, want ErrInvalidConfig", err)
	}
}

// TestRunnerRoundTrips: a keyed call through the Runner costs the round
// trips of the bare transaction (3) in both orders, with and without a
// lock-wait bound; a replay claim first costs 2.
func TestRunnerRoundTrips(t *testing.T) {
	testdb.Parallel(t, "postgres", 1)
	e := newEnv(t, 1)
	ctx := context.Background()
	for _, lockWait := range []time.Duration{0, 2 * time.Second} {
		for _, order := range orders {
			name := fmt.Sprintf("%s, lock wait %v", order.name, lockWait)
			r := e.runner(t, append([]txmiddleware.Option{txmiddleware.WithLockWait(lockWait)}, order.opts...)...)
			var runs atomic.Int64
			for _, k := range []string{"warm-" + name, "warm-" + name, "warm2-" + name} {
				if _, err := r.Run(ctx, req(t, k), e.bizWork(k, &runs)); err != nil {
					t.Fatalf("%s: warm-up: %v", name, err)
				}
			}
			key := "rt-" + name
			e.rt.Reset()
			out, err := r.Run(ctx, req(t, key), e.bizWork(key, &runs))
			if n := e.rt.Count(); err != nil || !out.Executed || n != 3 {
				t.Errorf("%s: %+v %v in %d round trips, want executed in 3", name, out, err, n)
			}
			e.rt.Reset()
			out, err = r.Run(ctx, req(t, key), e.bizWork(key, &runs))
			want := replays["pipelined "+order.name]
			if n := e.rt.Count(); err != nil || !out.Replayed || n != want {
				t.Errorf("%s replay: %+v %v in %d round trips, want a replay in %d", name, out, err, n, want)
			}
			t.Logf("%s: call 3 round trips, replay %d", name, want)
		}
	}
}

// TestRunnerHerd: 32 concurrent calls per key, over 20 keys, in both
// orders: each key's work commits once, every other call replays its
// result.
func TestRunnerHerd(t *testing.T) {
	const claimants, keys = 32, 20
	testdb.Parallel(t, "postgres", 16)
	e := newEnv(t, 16)
	ctx := context.Background()
	for _, order := range orders {
		t.Run(order.name, func(t *testing.T) {
			r := e.runner(t, order.opts...)
			var runs atomic.Int64
			for k := range keys {
				key := fmt.Sprintf("herd-%s-%d", strings.ReplaceAll(order.name, " ", "-"), k)
				var wg sync.WaitGroup
				var executed, replayed atomic.Int64
				errs := make(chan error, claimants)
				for range claimants {
					wg.Add(1)
					go func() {
						defer wg.Done()
						out, err := r.Run(ctx, req(t, key), e.bizWork(key, &runs))
						switch {
						case err != nil:
							errs <- err
						case out.Executed:
							executed.Add(1)
						case out.Replayed && sameResult(out.Result, result(key)):
							replayed.Add(1)
						default:
							errs <- fmt.Errorf("neither executed nor a replay of the result: %+v", out)
						}
					}()
				}
				wg.Wait()
				close(errs)
				for err := range errs {
					t.Errorf("key %s: %v", key, err)
				}
				if executed.Load() != 1 || replayed.Load() != claimants-1 || e.bizRows(t, key) != 1 {
					t.Fatalf("key %s: %d executed, %d replayed, %d business rows", key, executed.Load(), replayed.Load(), e.bizRows(t, key))
				}
			}
		})
	}
}
