package txmiddleware_test

import (
	"bytes"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/opledger/opledger/dialects"
	"github.com/opledger/opledger/ledger"
	"github.com/opledger/opledger/txmiddleware"
)

// TestHerd: 64 concurrent calls with one key, under each isolation level
// the dialect offers: the work runs exactly once, one call executes, 63
// replay, all return the same result byte for byte, one business row.
func TestHerd(t *testing.T) {
	const callers = 64
	keys := 5
	if testing.Short() {
		keys = 2
	}
	forEachTarget(t, callers, func(t *testing.T, e *env) {
		for _, level := range e.IsolationLevels() {
			t.Run(level.String(), func(t *testing.T) {
				var retries atomic.Int64
				r := e.runner(t, txmiddleware.WithIsolation(level), txmiddleware.WithBackoff(time.Millisecond, 20*time.Millisecond),
					txmiddleware.WithOnRetry(func(context.Context, int, error, time.Duration) { retries.Add(1) }))
				ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
				defer cancel()
				var maxAttempts, totalAttempts int
				for k := range keys {
					key := fmt.Sprintf("herd-%s-%d", level, k)
					var (
						runs               atomic.Int64
						start              = make(chan struct{})
						wg                 sync.WaitGroup
						outs               = make([]txmiddleware.Outcome, callers)
						errs               = make([]error, callers)
						executed, replayed int
					)
					for w := range callers {
						wg.Add(1)
						go func() {
							defer wg.Done()
							<-start
							outs[w], errs[w] = r.Run(ctx, req(t, key), e.bizWork(key, w, &runs))
						}()
					}
					close(start)
					wg.Wait()
					for w := range callers {
						if errs[w] != nil {
							t.Fatalf("key %s caller %d: %v", key, w, errs[w])
						}
						o := outs[w]
						switch {
						case o.Executed && !o.Replayed:
							executed++
						case o.Replayed && !o.Executed:
							replayed++
						default:
							t.Fatalf("caller %d: outcome %+v", w, o)
						}
						if !bytes.Equal(o.Result.Response, outs[0].Result.Response) || o.Result.TypeName != outs[0].Result.TypeName {
							t.Fatalf("caller %d: result %q, caller 0: %q", w, o.Result.Response, outs[0].Result.Response)
						}
						maxAttempts = max(maxAttempts, o.Attempts)
						totalAttempts += o.Attempts
					}
					if executed != 1 || replayed != callers-1 || runs.Load() != 1 {
						t.Fatalf("key %s: %d executed, %d replayed, work ran %d times; want 1, %d, 1", key, executed, replayed, runs.Load(), callers-1)
					}
					if n := e.BizRows(t, key); n != 1 {
						t.Fatalf("key %s: %d business rows", key, n)
					}
					waitIdle(t, e.DB)
				}
				if int(retries.Load()) != totalAttempts-keys*callers {
					t.Fatalf("retry hook saw %d retries, outcomes report %d", retries.Load(), totalAttempts-keys*callers)
				}
				t.Logf("%s %s: %d keys × %d callers: %d attempts in all, %d retries, at most %d attempts for one call",
					e.Name, level, keys, callers, totalAttempts, retries.Load(), maxAttempts)
			})
		}
	})
}

// A final error: the work's writes are undone, the status is committed,
// and every later call gets the same error back, byte for byte, without
// the work running again. Under both savepoint modes.
func TestFinalErrorReplayed(t *testing.T) {
	forEachTarget(t, 4, func(t *testing.T, e *env) {
		for _, mode := range []txmiddleware.SavepointMode{txmiddleware.SavepointAlways, txmiddleware.SavepointOnFinalError} {
			t.Run(mode.String(), func(t *testing.T) {
				ctx := context.Background()
				key := "final-" + mode.String()
				st, err := status.New(codes.FailedPrecondition, "insufficient funds: balance 10 < 25").
					WithDetails(wrapperspb.String("account 42"), wrapperspb.Int64(25))
				if err != nil {
					t.Fatal(err)
				}
				var runs atomic.Int64
				work := func(ctx context.Context, tx *sql.Tx) (ledger.Result, error) {
					runs.Add(1)
					if err := e.WriteBiz(ctx, tx, key, 1); err != nil { // a partial write
						return ledger.Result{}, err
					}
					return ledger.Result{}, fmt.Errorf("transfer: %w", st.Err())
				}
				r := e.runner(t, txmiddleware.WithSavepoint(mode))
				out, err1 := r.Run(ctx, req(t, key), work)
				wantAttempts, wantRuns := 1, int64(1)
				if mode == txmiddleware.SavepointOnFinalError {
					wantAttempts, wantRuns = 2, 2
				}
				if !out.Executed || out.Replayed || out.Attempts != wantAttempts || runs.Load() != wantRuns {
					t.Fatalf("first call: %+v, work ran %d times; want executed in %d attempts, %d runs", out, runs.Load(), wantAttempts, wantRuns)
				}
				s1, ok := status.FromError(err1)
				if !ok || s1.Code() != codes.FailedPrecondition {
					t.Fatalf("first call: %v, want the work's FailedPrecondition", err1)
				}
				if n := e.BizRows(t, key); n != 0 {
					t.Fatalf("the final error's partial write persisted: %d rows", n)
				}
				entry, err := e.lookup(t, key)
				if err != nil || entry.State != ledger.Completed || entry.Result.Code != uint32(codes.FailedPrecondition) ||
					entry.Result.TypeName != txmiddleware.StatusTypeName || !bytes.Equal(entry.Result.Response, out.Result.Response) {
					t.Fatalf("recorded entry: %+v %v", entry, err)
				}

				for i := range 3 {
					out2, err2 := r.Run(ctx, req(t, key), work)
					if !out2.Replayed || out2.Executed || out2.Attempts != 1 {
						t.Fatalf("replay %d: %+v", i, out2)
					}
					s2, ok := status.FromError(err2)
					if !ok {
						t.Fatalf("replay %d: %v is not a status", i, err2)
					}
					b1, _ := proto.MarshalOptions{Deterministic: true}.Marshal(s1.Proto())
					b2, _ := proto.MarshalOptions{Deterministic: true}.Marshal(s2.Proto())
					if !bytes.Equal(b1, b2) || !bytes.Equal(b2, out2.Result.Response) || s2.Message() != err1.Error() || len(s2.Details()) != 2 {
						t.Fatalf("replay %d: %v (%d details), first call %v", i, s2.Proto(), len(s2.Details()), s1.Proto())
					}
					if d := s2.Details()[0].(*wrapperspb.StringValue); d.GetValue() != "account 42" {
						t.Fatalf("detail %v", d)
					}
				}
				if runs.Load() != wantRuns {
					t.Fatalf("the work ran on replay: %d runs", runs.Load())
				}
				waitIdle(t, e.DB)
			})
		}
	})
}

// A work error that is not final rolls everything back and records
// nothing; the next call runs the work and succeeds.
func TestNonFinalErrorRecordsNothing(t *testing.T) {
	forEachTarget(t, 4, func(t *testing.T, e *env) {
		ctx := context.Background()
		for i, werr := range []error{
			errors.New("downstream unavailable"),
			status.Error(codes.Unavailable, "try later"),
			status.Error(codes.Internal, "bug"),
		} {
			key := fmt.Sprintf("nonfinal-%d", i)
			var runs atomic.Int64
			r := e.runner(t)
			out, err := r.Run(ctx, req(t, key), func(ctx context.Context, tx *sql.Tx) (ledger.Result, error) {
				runs.Add(1)
				if err := e.WriteBiz(ctx, tx, key, 1); err != nil {
					return ledger.Result{}, err
				}
				return ledger.Result{}, werr
			})
			if !errors.Is(err, werr) || out.Executed || out.Replayed || out.Attempts != 1 || runs.Load() != 1 {
				t.Fatalf("%v: %+v %v", werr, out, err)
			}
			e.assertNothing(t, key)
			out, err = r.Run(ctx, req(t, key), e.bizWork(key, 2, &runs))
			if err != nil || !out.Executed || runs.Load() != 2 || e.BizRows(t, key) != 1 {
				t.Fatalf("next call: %+v %v, %d runs", out, err, runs.Load())
			}
		}
		waitIdle(t, e.DB)
	})
}

// A transient failure (here the work reports ErrRetryable on its first
// two runs) rolls back, leaves nothing, and the unit runs again; the
// attempts are reported. Past the bound the error matches ErrRetryable.
func TestTransientRetried(t *testing.T) {
	forEachTarget(t, 4, func(t *testing.T, e *env) {
		ctx := context.Background()
		var runs atomic.Int64
		var hook []int
		r := e.runner(t, txmiddleware.WithBackoff(time.Millisecond, 2*time.Millisecond),
			txmiddleware.WithOnRetry(func(_ context.Context, attempt int, err error, d time.Duration) {
				hook = append(hook, attempt)
				if !errors.Is(err, ledger.ErrRetryable) || d <= 0 {
					t.Errorf("retry hook: %v %v", err, d)
				}
				e.assertNothing(t, "transient")
			}))
		out, err := r.Run(ctx, req(t, "transient"), func(ctx context.Context, tx *sql.Tx) (ledger.Result, error) {
			n := runs.Add(1)
			if err := e.WriteBiz(ctx, tx, "transient", int(n)); err != nil {
				return ledger.Result{}, err
			}
			if n <= 2 {
				return ledger.Result{}, fmt.Errorf("simulated: %w", ledger.ErrRetryable)
			}
			return ledger.Result{Response: []byte("ok")}, nil
		})
		if err != nil || !out.Executed || out.Attempts != 3 || runs.Load() != 3 || fmt.Sprint(hook) != "[1 2]" {
			t.Fatalf("%+v %v, %d runs, hook %v", out, err, runs.Load(), hook)
		}
		if n := e.BizRows(t, "transient"); n != 1 {
			t.Fatalf("%d business rows", n)
		}

		r = e.runner(t, txmiddleware.WithMaxAttempts(3), txmiddleware.WithBackoff(time.Millisecond, time.Millisecond))
		runs.Store(0)
		out, err = r.Run(ctx, req(t, "always-transient"), func(ctx context.Context, tx *sql.Tx) (ledger.Result, error) {
			runs.Add(1)
			if err := e.WriteBiz(ctx, tx, "always-transient", 1); err != nil {
				return ledger.Result{}, err
			}
			return ledger.Result{}, ledger.ErrRetryable
		})
		if !errors.Is(err, ledger.ErrRetryable) || out.Attempts != 3 || runs.Load() != 3 || out.Executed {
			t.Fatalf("exhausted: %+v %v, %d runs", out, err, runs.Load())
		}
		e.assertNothing(t, "always-transient")
		waitIdle(t, e.DB)
	})
}

// A retry that would sleep past the context's deadline is not made.
func TestBackoffRespectsDeadline(t *testing.T) {
	forEachTarget(t, 2, func(t *testing.T, e *env) {
		r := e.runner(t, txmiddleware.WithBackoff(time.Second, time.Second))
		ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
		defer cancel()
		start := time.Now()
		out, err := r.Run(ctx, req(t, "deadline"), func(context.Context, *sql.Tx) (ledger.Result, error) {
			return ledger.Result{}, ledger.ErrRetryable
		})
		if took := time.Since(start); !errors.Is(err, ledger.ErrRetryable) || out.Attempts != 1 || took > 250*time.Millisecond {
			t.Fatalf("%+v %v after %v: want one attempt and an immediate ErrRetryable", out, err, took)
		}
		e.assertNothing(t, "deadline")
	})
}

// The context ends before the claim, inside the work, or just before
// COMMIT: nothing is recorded, nothing leaks, and a later call runs.
func TestContextCancelled(t *testing.T) {
	forEachTarget(t, 4, func(t *testing.T, e *env) {
		var runs atomic.Int64
		t.Run("before claim", func(t *testing.T) {
			ctx, cancel := context.WithCancel(context.Background())
			cancel()
			out, err := e.runner(t).Run(ctx, req(t, "cancel-before"), e.bizWork("cancel-before", 1, &runs))
			if !errors.Is(err, context.Canceled) || out.Executed || runs.Load() != 0 {
				t.Fatalf("%+v %v", out, err)
			}
			waitIdle(t, e.DB)
			e.assertNothing(t, "cancel-before")
		})
		t.Run("inside work", func(t *testing.T) {
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			out, err := e.runner(t).Run(ctx, req(t, "cancel-work"), func(ctx context.Context, tx *sql.Tx) (ledger.Result, error) {
				if err := e.WriteBiz(ctx, tx, "cancel-work", 1); err != nil {
					return ledger.Result{}, err
				}
				cancel()
				if err := e.WriteBiz(ctx, tx, "cancel-work", 2); err != nil {
					return ledger.Result{}, err
				}
				return ledger.Result{Response: []byte("late")}, nil
			})
			if !errors.Is(err, context.Canceled) || out.Executed {
				t.Fatalf("%+v %v", out, err)
			}
			waitIdle(t, e.DB)
			e.assertNothing(t, "cancel-work")
		})
		t.Run("before commit", func(t *testing.T) {
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			r := e.runner(t, txmiddleware.WithBeforeCommit(func(context.Context) { cancel() }))
			out, err := r.Run(ctx, req(t, "cancel-commit"), e.bizWork("cancel-commit", 1, &runs))
			if !errors.Is(err, context.Canceled) || out.Executed {
				t.Fatalf("%+v %v", out, err)
			}
			waitIdle(t, e.DB)
			e.assertNothing(t, "cancel-commit")
		})
		for _, key := range []string{"cancel-before", "cancel-work", "cancel-commit"} {
			out, err := e.runner(t).Run(context.Background(), req(t, key), e.bizWork(key, 9, &runs))
			if err != nil || !out.Executed || e.BizRows(t, key) != 1 {
				t.Fatalf("%s afterwards: %+v %v", key, out, err)
			}
		}
		waitIdle(t, e.DB)
	})
}

// A panic in the work rolls back and propagates; the connection returns
// to the pool and the next call runs the work.
func TestPanicRollsBack(t *testing.T) {
	forEachTarget(t, 2, func(t *testing.T, e *env) {
		for _, lockWait := range []time.Duration{0, time.Second} {
			if _, ok := e.Dialect.(dialects.LockWaiter); !ok && lockWait > 0 {
				continue
			}
			key := fmt.Sprintf("panic-%v", lockWait)
			r := e.runner(t, txmiddleware.WithLockWait(lockWait))
			func() {
				defer func() {
					if v := recover(); v != "boom" {
						t.Fatalf("recovered %v, want the work's panic", v)
					}
				}()
				r.Run(context.Background(), req(t, key), func(ctx context.Context, tx *sql.Tx) (ledger.Result, error) {
					if err := e.WriteBiz(ctx, tx, key, 1); err != nil {
						return ledger.Result{}, err
					}
					panic("boom")
				})
				t.Fatal("Run returned")
			}()
			waitIdle(t, e.DB)
			e.assertNothing(t, key)
			var runs atomic.Int64
			out, err := r.Run(context.Background(), req(t, key), e.bizWork(key, 2, &runs))
			if err != nil || !out.Executed {
				t.Fatalf("after the panic: %+v %v", out, err)
			}
		}
	})
}

// The key reused for another request is ledger.ErrKeyReused; the work
// does not run.
func TestKeyReused(t *testing.T) {
	forEachTarget(t, 2, func(t *testing.T, e *env) {
		ctx := context.Background()
		var runs atomic.Int64
		r := e.runner(t)
		if _, err := r.Run(ctx, req(t, "reused"), e.bizWork("reused", 1, &runs)); err != nil {
			t.Fatal(err)
		}
		other := req(t, "reused")
		other.Fingerprint = ledger.FingerprintOf([]byte("another request"))
		out, err := r.Run(ctx, other, e.bizWork("reused", 2, &runs))
		if !errors.Is(err, ledger.ErrKeyReused) || out.Executed || out.Replayed || runs.Load() != 1 {
			t.Fatalf("%+v %v", out, err)
		}
		waitIdle(t, e.DB)
	})
}

// TxFromContext gives deeper code the work's transaction.
func TestTxFromContext(t *testing.T) {
	forEachTarget(t, 2, func(t *testing.T, e *env) {
		if _, ok := txmiddleware.TxFromContext(context.Background()); ok {
			t.Fatal("a transaction in a bare context")
		}
		_, err := e.runner(t).Run(context.Background(), req(t, "ctx-tx"), func(ctx context.Context, tx *sql.Tx) (ledger.Result, error) {
			got, ok := txmiddleware.TxFromContext(context.WithValue(ctx, struct{}{}, 1))
			if !ok || got != tx {
				return ledger.Result{}, errors.New("TxFromContext did not return the work's tx")
			}
			return ledger.Result{}, e.WriteBiz(ctx, got, "ctx-tx", 1)
		})
		if err != nil || e.BizRows(t, "ctx-tx") != 1 {
			t.Fatal(err)
		}
	})
}

// A duplicate that arrives while another transaction holds the identity
// uncommitted waits at most the bound, then gets ErrInProgress; the
// connection's settings are as before afterwards.
func TestLockWaitInProgress(t *testing.T) {
	forEachTarget(t, 3, func(t *testing.T, e *env) {
		e.requireLockWaiter(t)
		ctx := context.Background()
		before := e.sessionTimeouts(t)
		holder, err := e.DB.BeginTx(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		c, err := e.l.Claim(ctx, holder, req(t, "held"))
		if err != nil || !c.Acquired() {
			holder.Rollback()
			t.Fatalf("holder: %v %v", c, err)
		}
		var runs atomic.Int64
		r := e.runner(t, txmiddleware.WithLockWait(300*time.Millisecond))
		start := time.Now()
		out, err := r.Run(ctx, req(t, "held"), e.bizWork("held", 1, &runs))
		took := time.Since(start)
		holder.Rollback()
		if !errors.Is(err, ledger.ErrInProgress) || errors.Is(err, ledger.ErrRetryable) || out.Attempts != 1 || runs.Load() != 0 {
			t.Fatalf("%+v %v, want ErrInProgress after one attempt", out, err)
		}
		if took < 250*time.Millisecond || took > 2*time.Second {
			t.Fatalf("returned after %v, want about the 300ms bound", took)
		}
		waitIdle(t, e.DB)
		if after := e.sessionTimeouts(t); fmt.Sprint(after) != fmt.Sprint(before) {
			t.Fatalf("session settings changed: before %v, after %v", before, after)
		}
		out, err = r.Run(ctx, req(t, "held"), e.bizWork("held", 2, &runs))
		if err != nil || !out.Executed {
			t.Fatalf("after the holder rolled back: %+v %v", out, err)
		}
	})
}

// sessionTimeouts reads the lock wait setting of every pooled connection.
func (e *env) sessionTimeouts(t *testing.T) []string {
	t.Helper()
	ctx := context.Background()
	n := e.DB.Stats().MaxOpenConnections
	var conns []*sql.Conn
	defer func() {
		for _, c := range conns {
			c.Close()
		}
	}()
	var out []string
	for range n {
		c, err := e.DB.Conn(ctx)
		if err != nil {
			t.Fatal(err)
		}
		conns = append(conns, c)
		q := "SHOW lock_timeout"
		switch e.Dialect.Name() {
		case "sqlite":
			q = "PRAGMA busy_timeout"
		case "mysql":
			q = "SELECT @@SESSION.innodb_lock_wait_timeout"
		}
		var v string
		if err := c.QueryRowContext(ctx, q).Scan(&v); err != nil {
			t.Fatal(err)
		}
		out = append(out, v)
	}
	return out
}

func TestOptions(t *testing.T) {
	forEachTarget(t, 1, func(t *testing.T, e *env) {
		for i, o := range []txmiddleware.Option{
			txmiddleware.WithMaxAttempts(0),
			txmiddleware.WithBackoff(0, time.Second),
			txmiddleware.WithBackoff(time.Second, time.Millisecond),
			txmiddleware.WithRandom(nil),
			txmiddleware.WithLockWait(-1),
			txmiddleware.WithSavepoint(0),
		} {
			if _, err := txmiddleware.New(e.DB, e.l, e.Dialect, o); err == nil {
				t.Errorf("option %d accepted", i)
			}
		}
		if _, err := txmiddleware.New(nil, e.l, e.Dialect); err == nil {
			t.Error("nil db accepted")
		}
		if _, err := e.runner(t).Run(context.Background(), req(t, "nil-work"), nil); err == nil {
			t.Error("nil work accepted")
		}
	})
}

func TestBackoffDelay(t *testing.T) {
	for _, c := range []struct {
		failed   int
		rnd      float64
		min, max time.Duration
	}{
		{1, 0, 5 * time.Millisecond, 5 * time.Millisecond},
		{1, 0.999, 5 * time.Millisecond, 10 * time.Millisecond},
		{2, 0, 10 * time.Millisecond, 10 * time.Millisecond},
		{3, 0.5, 20 * time.Millisecond, 40 * time.Millisecond},
		{40, 0.999, 250 * time.Millisecond, 500 * time.Millisecond},
	} {
		d, err := txmiddleware.BackoffDelay(c.failed, txmiddleware.WithRandom(func() float64 { return c.rnd }),
			txmiddleware.WithBackoff(10*time.Millisecond, 500*time.Millisecond))
		if err != nil || d < c.min || d > c.max {
			t.Errorf("failed %d rnd %v: %v %v, want [%v, %v]", c.failed, c.rnd, d, err, c.min, c.max)
		}
	}
}

func TestReplayError(t *testing.T) {
	if err := txmiddleware.ReplayError(ledger.Result{Response: []byte("x")}); err != nil {
		t.Fatal(err)
	}
	if s, _ := status.FromError(txmiddleware.ReplayError(ledger.Result{Code: 5, TypeName: "x.Y"})); s.Code() != codes.NotFound {
		t.Fatal(s)
	}
	if err := txmiddleware.ReplayError(ledger.Result{Code: 5, Response: []byte{0xff}, TypeName: txmiddleware.StatusTypeName}); err == nil {
		t.Fatal("garbage decoded")
	}
	st := status.New(codes.OutOfRange, "page 9 of 3")
	b, _ := proto.Marshal(st.Proto())
	if s, _ := status.FromError(txmiddleware.ReplayError(ledger.Result{Code: 11, Response: b, TypeName: txmiddleware.StatusTypeName})); !proto.Equal(s.Proto(), st.Proto()) {
		t.Fatal(s)
	}
	if _, ok := txmiddleware.FinalCodes(codes.Aborted)(status.Error(codes.Aborted, "x")); !ok {
		t.Fatal("FinalCodes")
	}
	if _, ok := txmiddleware.DefaultFinal(status.Error(codes.Aborted, "x")); ok {
		t.Fatal("Aborted is not final by default")
	}
	if _, ok := txmiddleware.DefaultFinal(errors.New("plain")); ok {
		t.Fatal("a plain error is not final")
	}
}

// TestHerdWinnerRollsBack: 64 concurrent calls with one key, and the
// first run of the work fails (not finally) after the others have piled
// up behind it. That caller gets its error; of the other 63 exactly one
// runs the work and the rest replay its result. On InnoDB the waiters
// deadlock when the holder rolls back (1213), and the runner retries them.
func TestHerdWinnerRollsBack(t *testing.T) {
	const callers = 64
	boom := errors.New("first run fails")
	forEachTarget(t, callers, func(t *testing.T, e *env) {
		for _, level := range e.IsolationLevels() {
			t.Run(level.String(), func(t *testing.T) {
				var retries atomic.Int64
				r := e.runner(t, txmiddleware.WithIsolation(level), txmiddleware.WithBackoff(time.Millisecond, 20*time.Millisecond),
					txmiddleware.WithOnRetry(func(context.Context, int, error, time.Duration) { retries.Add(1) }))
				ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
				defer cancel()
				key := "herd-rollback-" + level.String()
				var runs atomic.Int64
				work := func(ctx context.Context, tx *sql.Tx) (ledger.Result, error) {
					n := runs.Add(1)
					if err := e.WriteBiz(ctx, tx, key, int(n)); err != nil {
						return ledger.Result{}, err
					}
					if n == 1 {
						time.Sleep(200 * time.Millisecond)
						return ledger.Result{}, boom
					}
					return ledger.Result{Response: fmt.Appendf(nil, "run %d", n)}, nil
				}
				var wg sync.WaitGroup
				start := make(chan struct{})
				outs := make([]txmiddleware.Outcome, callers)
				errs := make([]error, callers)
				for w := range callers {
					wg.Add(1)
					go func() {
						defer wg.Done()
						<-start
						outs[w], errs[w] = r.Run(ctx, req(t, key), work)
					}()
				}
				close(start)
				wg.Wait()
				failed, executed, replayed, attempts := 0, 0, 0, 0
				for w := range callers {
					attempts += outs[w].Attempts
					switch {
					case errors.Is(errs[w], boom):
						failed++
					case errs[w] != nil:
						t.Fatalf("caller %d: %v", w, errs[w])
					case outs[w].Executed:
						executed++
					case outs[w].Replayed:
						replayed++
						if string(outs[w].Result.Response) != "run 2" {
							t.Fatalf("caller %d replayed %q", w, outs[w].Result.Response)
						}
					}
				}
				if failed != 1 || executed != 1 || replayed != callers-2 || runs.Load() != 2 {
					t.Fatalf("%d failed, %d executed, %d replayed, work ran %d times; want 1, 1, %d, 2", failed, executed, replayed, runs.Load(), callers-2)
				}
				if n := e.BizRows(t, key); n != 1 {
					t.Fatalf("%d business rows", n)
				}
				waitIdle(t, e.DB)
				t.Logf("%s %s: %d attempts for %d callers, %d retries", e.Name, level, attempts, callers, retries.Load())
			})
		}
	})
}
