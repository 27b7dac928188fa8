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

	"github.com/opledger/opledger/dialects"
	"github.com/opledger/opledger/internal/dialectkit"
	"github.com/opledger/opledger/internal/testkit/testdb"
	"github.com/opledger/opledger/internal/txledger"
	"github.com/opledger/opledger/ledger"
	"github.com/opledger/opledger/txmiddleware"
)

// TestHerd: 64 concurrent calls with one key, under each isolation level
// the dialect offers, in both orders: one call executes, 63 replay, all
// return the same result byte for byte, one business row. Claim first,
// the work runs exactly once; claim at commit, concurrent duplicates run
// it too, but only one run commits.
func TestHerd(t *testing.T) {
	// Not parallel with the other tests: each target takes a herd's pool
	// (see familyConns), and its 64 callers load the machine.
	const callers = herdCallers
	keys := 5
	if testing.Short() {
		keys = 2
	}
	forEachTarget(t, callers, func(t *testing.T, e *env) {
		for _, m := range runModes {
			for _, level := range e.IsolationLevels() {
				t.Run(m.name+"/"+level.String(), func(t *testing.T) {
					var retries atomic.Int64
					r := e.runner(t, append([]txmiddleware.Option{txmiddleware.WithIsolation(level), txmiddleware.WithTxBackoff(time.Millisecond, 20*time.Millisecond),
						txmiddleware.WithOnRetry(func(context.Context, int, error, time.Duration) { retries.Add(1) })}, m.opts...)...)
					ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
					defer cancel()
					var maxAttempts, totalAttempts int
					var workRuns int64
					for k := range keys {
						key := fmt.Sprintf("herd-%s-%s-%d", m.name, level, k)
						var (
							runs               atomic.Int64
							start              = make(chan struct{})
							wg                 sync.WaitGroup
							outs               = make([]txmiddleware.RunResult, callers)
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
						if executed != 1 || replayed != callers-1 || (!m.atCommit && runs.Load() != 1) {
							t.Fatalf("key %s: %d executed, %d replayed, work ran %d times; want 1, %d, 1", key, executed, replayed, runs.Load(), callers-1)
						}
						workRuns += runs.Load()
						if n := e.BizRows(t, key); n != 1 {
							t.Fatalf("key %s: %d business rows", key, n)
						}
						testdb.WaitIdle(t, e.DB)
					}
					if int(retries.Load()) != totalAttempts-keys*callers {
						t.Fatalf("retry hook saw %d retries, outcomes report %d", retries.Load(), totalAttempts-keys*callers)
					}
					t.Logf("%s %s %s: %d keys × %d callers: %d attempts in all, %d retries, at most %d attempts for one call, the work ran %d times",
						e.Name, m.name, level, keys, callers, totalAttempts, retries.Load(), maxAttempts, workRuns)
				})
			}
		}
	})
}

// runMode is one order of the protocol the runner can run.
type runMode struct {
	name     string
	atCommit bool
	opts     []txmiddleware.Option
}

var runModes = []runMode{
	{name: "claim-first"},
	{name: "claim-at-commit", atCommit: true, opts: []txmiddleware.Option{txmiddleware.WithClaimAtCommit()}},
}

// A final error: the work's transaction is rolled back whole, the
// codec's encoding is committed in a fresh transaction, and every later
// call gets the same error back, code and message, and the same stored
// result byte for byte, without the work running again. The work runs
// once on this path.
func TestFinalErrorReplayed(t *testing.T) {
	t.Parallel()
	forEachTarget(t, 4, func(t *testing.T, e *env) {
		ctx := context.Background()
		key := "final"
		var runs atomic.Int64
		work := func(ctx context.Context, tx *sql.Tx) (ledger.Result, error) {
			runs.Add(1)
			if err := e.WriteBiz(ctx, tx, key, 1); err != nil { // a partial write
				return ledger.Result{}, err
			}
			return ledger.Result{}, fmt.Errorf("transfer: %w", &finalErr{codeFailedPrecondition, "insufficient funds: balance 10 < 25"})
		}
		r := e.runner(t)
		out, err1 := r.Run(ctx, req(t, key), work)
		if !out.Executed || out.Replayed || out.Attempts != 1 || runs.Load() != 1 {
			t.Fatalf("first call: %+v, work ran %d times; want executed in 1 attempt, 1 run", out, runs.Load())
		}
		const msg = "transfer: insufficient funds: balance 10 < 25"
		assertFinal(t, "first call", err1, codeFailedPrecondition, msg)
		if want := (ledger.Result{Code: codeFailedPrecondition, Response: []byte(msg), TypeName: finalTypeName}); !sameResult(out.Result, want) {
			t.Fatalf("first call recorded %+v, want the codec's encoding %+v", out.Result, want)
		}
		if n := e.BizRows(t, key); n != 0 {
			t.Fatalf("the final error's partial write persisted: %d rows", n)
		}
		entry, err := e.lookup(t, key)
		if err != nil || entry.State != ledger.Completed || !sameResult(entry.Result, out.Result) {
			t.Fatalf("recorded entry: %+v %v, want %+v", entry, err, out.Result)
		}

		for i := range 3 {
			out2, err2 := r.Run(ctx, req(t, key), work)
			if !out2.Replayed || out2.Executed || out2.Attempts != 1 {
				t.Fatalf("replay %d: %+v", i, out2)
			}
			assertFinal(t, fmt.Sprintf("replay %d", i), err2, codeFailedPrecondition, err1.Error())
			if !sameResult(out2.Result, out.Result) {
				t.Fatalf("replay %d: result %+v, first call %+v", i, out2.Result, out.Result)
			}
		}
		if runs.Load() != 1 {
			t.Fatalf("the work ran on replay: %d runs", runs.Load())
		}
		testdb.WaitIdle(t, e.DB)
	})
}

// A final error whose operation another call completes between the
// rollback and the fresh transaction that records it, in either order
// (claim first, and claim at commit): the call returns the other call's
// result as a replay, records nothing, its work ran once, and only the
// other call's work commits.
func TestFinalErrorCompletedMeanwhile(t *testing.T) {
	t.Parallel()
	forEachTarget(t, 4, func(t *testing.T, e *env) {
		ctx := context.Background()
		for _, order := range []struct {
			name string
			opts []txmiddleware.Option
		}{{"claim first", nil}, {"claim at commit", []txmiddleware.Option{txmiddleware.WithClaimAtCommit()}}} {
			key := "final-meanwhile " + order.name
			var runs, otherRuns atomic.Int64
			other := e.runner(t, order.opts...)
			r := e.runner(t, append(order.opts, txmiddleware.WithAfterFinalRollback(func(ctx context.Context) {
				if out, err := other.Run(ctx, req(t, key), e.bizWork(key, 2, &otherRuns)); err != nil || !out.Executed {
					t.Errorf("%s: the other call: %+v %v; want executed", order.name, out, err)
				}
			}))...)
			out, err := r.Run(ctx, req(t, key), func(ctx context.Context, tx *sql.Tx) (ledger.Result, error) {
				runs.Add(1)
				if err := e.WriteBiz(ctx, tx, key, 1); err != nil {
					return ledger.Result{}, err
				}
				return ledger.Result{}, &finalErr{codeNotFound, "no such account"}
			})
			entry, lerr := e.lookup(t, key)
			if lerr != nil || entry.State != ledger.Completed {
				t.Fatalf("%s: entry: %+v %v", order.name, entry, lerr)
			}
			if err != nil || !out.Replayed || out.Executed || !sameResult(out.Result, entry.Result) || out.Result.Code != 0 ||
				string(out.Result.Response) != "done "+key+" by 2" {
				t.Fatalf("%s: %+v %v; want the other call's result %+v replayed", order.name, out, err, entry.Result)
			}
			if runs.Load() != 1 || otherRuns.Load() != 1 || e.BizRows(t, key) != 1 {
				t.Fatalf("%s: work ran %d times, the other %d, %d business rows; want 1, 1, 1", order.name, runs.Load(), otherRuns.Load(), e.BizRows(t, key))
			}
		}
		testdb.WaitIdle(t, e.DB)
	})
}

// sameResult compares two results byte for byte.
func sameResult(a, b ledger.Result) bool {
	return a.Code == b.Code && a.TypeName == b.TypeName && bytes.Equal(a.Response, b.Response)
}

// A work error that is not final rolls everything back and records
// nothing; the next call runs the work and succeeds. Not final: an error
// the codec does not encode, an encoding with code 0 from a codec that
// calls it final, and, without a codec, every error, a *finalErr too.
func TestNonFinalErrorRecordsNothing(t *testing.T) {
	t.Parallel()
	zeroCode := codecFuncs{
		encode: func(err error) (ledger.Result, bool) { return ledger.Result{Response: []byte(err.Error())}, true },
		decode: func(ledger.Result) error { return errors.New("never decoded") },
	}
	forEachTarget(t, 4, func(t *testing.T, e *env) {
		ctx := context.Background()
		for i, c := range []struct {
			name string
			opts []txmiddleware.Option
			werr error
		}{
			{"plain error", []txmiddleware.Option{txmiddleware.WithErrorCodec(testCodec{})}, errors.New("downstream unavailable")},
			{"code 0", []txmiddleware.Option{txmiddleware.WithErrorCodec(testCodec{})}, &finalErr{0, "no code"}},
			{"codec says final with code 0", []txmiddleware.Option{txmiddleware.WithErrorCodec(zeroCode)}, errors.New("try later")},
			{"no codec, plain error", nil, errors.New("bug")},
			{"no codec, final error", nil, &finalErr{codeFailedPrecondition, "insufficient funds"}},
		} {
			key := fmt.Sprintf("nonfinal-%d", i)
			var runs atomic.Int64
			r := e.noCodecRunner(t, c.opts...)
			out, err := r.Run(ctx, req(t, key), func(ctx context.Context, tx *sql.Tx) (ledger.Result, error) {
				runs.Add(1)
				if err := e.WriteBiz(ctx, tx, key, 1); err != nil {
					return ledger.Result{}, err
				}
				return ledger.Result{}, c.werr
			})
			if !errors.Is(err, c.werr) || out.Executed || out.Replayed || out.Attempts != 1 || runs.Load() != 1 || out.Result.Code != 0 || out.Result.Response != nil {
				t.Fatalf("%s: %+v %v, work ran %d times; want the work's error after one run, nothing recorded", c.name, out, err, runs.Load())
			}
			e.assertNothing(t, key)
			out, err = r.Run(ctx, req(t, key), e.bizWork(key, 2, &runs))
			if err != nil || !out.Executed || runs.Load() != 2 || e.BizRows(t, key) != 1 {
				t.Fatalf("%s: next call: %+v %v, %d runs", c.name, out, err, runs.Load())
			}
		}
		testdb.WaitIdle(t, e.DB)
	})
}

// The runner takes no savepoint on any path: success, final error, other
// error, with a codec or without. The work proves it by releasing the
// savepoint, which fails on every database when none was taken.
func TestNoSavepoint(t *testing.T) {
	t.Parallel()
	forEachTarget(t, 2, func(t *testing.T, e *env) {
		ctx := context.Background()
		for i, c := range []struct {
			name string
			opts []txmiddleware.Option
		}{
			{"no codec", nil},
			{"codec", []txmiddleware.Option{txmiddleware.WithErrorCodec(testCodec{})}},
		} {
			key := fmt.Sprintf("savepoint-%d", i)
			var runs atomic.Int64
			out, err := e.noCodecRunner(t, c.opts...).Run(ctx, req(t, key), func(ctx context.Context, tx *sql.Tx) (ledger.Result, error) {
				runs.Add(1)
				if err := e.WriteBiz(ctx, tx, key, 1); err != nil {
					return ledger.Result{}, err
				}
				if _, err := tx.ExecContext(ctx, "RELEASE SAVEPOINT opledger_work"); err != nil {
					// Final with the codec: recorded in a fresh transaction.
					return ledger.Result{}, &finalErr{codeFailedPrecondition, "released nothing"}
				}
				return ledger.Result{Response: []byte("released")}, nil
			})
			if err == nil {
				t.Fatalf("%s: RELEASE SAVEPOINT succeeded: the runner took a savepoint", c.name)
			}
			if runs.Load() != 1 || out.Attempts != 1 || e.BizRows(t, key) != 0 {
				t.Fatalf("%s: %+v %v, work ran %d times; want one run, nothing of it committed", c.name, out, err, runs.Load())
			}
		}
		testdb.WaitIdle(t, e.DB)
	})
}

// A stored final error replayed by a runner without a codec comes back as
// the stored Result with a nil error; a codec's Decode error comes back as
// it is.
func TestReplayWithoutCodec(t *testing.T) {
	t.Parallel()
	forEachTarget(t, 2, func(t *testing.T, e *env) {
		ctx := context.Background()
		key := "replay-no-codec"
		var runs atomic.Int64
		work := func(context.Context, *sql.Tx) (ledger.Result, error) {
			runs.Add(1)
			return ledger.Result{}, &finalErr{codeNotFound, "account 7 not found"}
		}
		first, err := e.runner(t).Run(ctx, req(t, key), work)
		assertFinal(t, "first call", err, codeNotFound, "account 7 not found")
		if !first.Executed || first.Result.Code != codeNotFound {
			t.Fatalf("first call: %+v", first)
		}
		out, err := e.noCodecRunner(t).Run(ctx, req(t, key), work)
		if err != nil || !out.Replayed || out.Executed || out.Attempts != 1 || !sameResult(out.Result, first.Result) || out.CompletedAt.IsZero() {
			t.Fatalf("replay without a codec: %+v %v; want a nil error and the stored result %+v", out, err, first.Result)
		}
		errUndecodable := errors.New("undecodable")
		refuses := codecFuncs{
			encode: testCodec{}.Encode,
			decode: func(r ledger.Result) error { return fmt.Errorf("%w: %d %q", errUndecodable, r.Code, r.Response) },
		}
		out, err = e.noCodecRunner(t, txmiddleware.WithErrorCodec(refuses)).Run(ctx, req(t, key), work)
		if !errors.Is(err, errUndecodable) || !out.Replayed || !sameResult(out.Result, first.Result) {
			t.Fatalf("replay with a codec that cannot decode: %+v %v", out, err)
		}
		// A successful result replays without an error, with or without a codec.
		if _, err := e.noCodecRunner(t).Run(ctx, req(t, "replay-ok"), e.bizWork("replay-ok", 1, &runs)); err != nil {
			t.Fatal(err)
		}
		for _, r := range []*txmiddleware.Runner{e.noCodecRunner(t), e.runner(t)} {
			out, err := r.Run(ctx, req(t, "replay-ok"), e.bizWork("replay-ok", 2, &runs))
			if err != nil || !out.Replayed || string(out.Result.Response) != "done replay-ok by 1" {
				t.Fatalf("replay of a success: %+v %v", out, err)
			}
		}
		if runs.Load() != 2 {
			t.Fatalf("the work ran %d times, want 2 (once per key)", runs.Load())
		}
		testdb.WaitIdle(t, e.DB)
	})
}

// A transient failure (here the work reports ErrRetryable on its first
// two runs) rolls back, leaves nothing, and the unit runs again; the
// attempts are reported. Past the bound the error matches ErrRetryable.
func TestTransientRetried(t *testing.T) {
	t.Parallel()
	forEachTarget(t, 4, func(t *testing.T, e *env) {
		ctx := context.Background()
		var runs atomic.Int64
		var hook []int
		r := e.runner(t, txmiddleware.WithTxBackoff(time.Millisecond, 2*time.Millisecond),
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

		r = e.runner(t, txmiddleware.WithMaxTxAttempts(3), txmiddleware.WithTxBackoff(time.Millisecond, time.Millisecond))
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
		testdb.WaitIdle(t, e.DB)
	})
}

// A retry that would sleep past the context's deadline is not made.
func TestBackoffRespectsDeadline(t *testing.T) {
	t.Parallel()
	forEachTarget(t, 2, func(t *testing.T, e *env) {
		// The backoff (a minute) passes the deadline (10 s, a generous hang
		// guard): the runner must give up at once, so the context is still
		// live when Run returns and the one attempt's error is the answer.
		r := e.runner(t, txmiddleware.WithTxBackoff(time.Minute, time.Minute))
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		out, err := r.Run(ctx, req(t, "deadline"), func(context.Context, *sql.Tx) (ledger.Result, error) {
			return ledger.Result{}, ledger.ErrRetryable
		})
		if !errors.Is(err, ledger.ErrRetryable) || errors.Is(err, context.DeadlineExceeded) || out.Attempts != 1 || ctx.Err() != nil {
			t.Fatalf("%+v %v (context: %v): want one attempt and ErrRetryable before the deadline", out, err, ctx.Err())
		}
		e.assertNothing(t, "deadline")
	})
}

// The context ends before the claim, inside the work, or just before
// COMMIT: nothing is recorded, nothing leaks, and a later call runs.
func TestContextCancelled(t *testing.T) {
	t.Parallel()
	forEachTarget(t, 4, func(t *testing.T, e *env) {
		var runs atomic.Int64
		t.Run("before claim", func(t *testing.T) {
			ctx, cancel := context.WithCancel(context.Background())
			cancel()
			out, err := e.runner(t).Run(ctx, req(t, "cancel-before"), e.bizWork("cancel-before", 1, &runs))
			if !errors.Is(err, context.Canceled) || out.Executed || runs.Load() != 0 {
				t.Fatalf("%+v %v", out, err)
			}
			testdb.WaitIdle(t, e.DB)
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
			testdb.WaitIdle(t, e.DB)
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
			testdb.WaitIdle(t, e.DB)
			e.assertNothing(t, "cancel-commit")
		})
		for _, key := range []string{"cancel-before", "cancel-work", "cancel-commit"} {
			out, err := e.runner(t).Run(context.Background(), req(t, key), e.bizWork(key, 9, &runs))
			if err != nil || !out.Executed || e.BizRows(t, key) != 1 {
				t.Fatalf("%s afterwards: %+v %v", key, out, err)
			}
		}
		testdb.WaitIdle(t, e.DB)
	})
}

// A panic in the work rolls back and propagates; the connection returns
// to the pool and the next call runs the work.
func TestPanicRollsBack(t *testing.T) {
	t.Parallel()
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
			testdb.WaitIdle(t, e.DB)
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
	t.Parallel()
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
		testdb.WaitIdle(t, e.DB)
	})
}

// TxFromContext gives deeper code the work's transaction.
func TestTxFromContext(t *testing.T) {
	t.Parallel()
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

// lockWaitSettings lists, per database family, the statement that reads
// a session's lock wait setting: genuinely database-specific SQL.
var lockWaitSettings = []struct{ family, query string }{
	{"sqlite", "PRAGMA busy_timeout"},
	{"postgres", "SHOW lock_timeout"},
	{"mysql", "SELECT @@SESSION.innodb_lock_wait_timeout"},
}

// A duplicate that arrives while another transaction holds the identity
// uncommitted waits at most the bound, then gets ErrInProgress; the
// connection's settings are as before afterwards. On SQLite the wait is
// for the database's single write lock, which says nothing of the
// identity, and the holder is not a call of the runner's: the answer is
// ErrBusy (TestPoolOfOne covers a holder that is).
func TestLockWaitInProgress(t *testing.T) {
	t.Parallel()
	for _, setting := range lockWaitSettings {
		forEachTarget(t, 3, func(t *testing.T, e *env) {
			e.requireLockWaiter(t)
			ctx := context.Background()
			before := e.sessionSettings(t, setting.query)
			holder, err := e.DB.BeginTx(ctx, nil)
			if err != nil {
				t.Fatal(err)
			}
			defer holder.Rollback()
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
			want := ledger.ErrInProgress
			if setting.family == "sqlite" {
				want = txmiddleware.ErrBusy
			}
			if !errors.Is(err, want) || errors.Is(err, ledger.ErrRetryable) || out.Attempts != 1 || runs.Load() != 0 {
				t.Fatalf("%+v %v, want %v after one attempt", out, err, want)
			}
			if took < 250*time.Millisecond || took > 10*time.Second {
				t.Fatalf("returned after %v, want about the 300ms bound", took)
			}
			testdb.WaitIdle(t, e.DB)
			if after := e.sessionSettings(t, setting.query); fmt.Sprint(after) != fmt.Sprint(before) {
				t.Fatalf("session settings changed: before %v, after %v", before, after)
			}
			out, err = r.Run(ctx, req(t, "held"), e.bizWork("held", 2, &runs))
			if err != nil || !out.Executed {
				t.Fatalf("after the holder rolled back: %+v %v", out, err)
			}
		}, setting.family)
	}
}

// sessionSettings reads a setting with query on every pooled connection.
func (e *env) sessionSettings(t *testing.T, query string) []string {
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
		var v string
		if err := c.QueryRowContext(ctx, query).Scan(&v); err != nil {
			t.Fatal(err)
		}
		out = append(out, v)
	}
	return out
}

// plainDialect hides every optional interface of the dialect it wraps
// (LockWaiter, Sessions, Described, Schema).
type plainDialect struct{ dialects.Dialect }

// dialectLedger is a Store that reports another dialect (nil included).
type dialectLedger struct {
	*ledger.Store
	d dialects.Dialect
}

func (l dialectLedger) Dialect() dialects.Dialect { return l.d }

// BoundsLockWait is the store's, for a dialect that can bound a claim.
func (l dialectLedger) BoundsLockWait() bool {
	_, ok := l.d.(dialectkit.StatementBounder)
	return ok && txledger.BoundsLockWait(l.Store)
}

// Bad configurations fail New with ErrInvalidConfig: a bad value, an
// option given twice, a zero Option, a nil database or ledger, a ledger
// without a dialect, and a lock wait bound the dialect cannot enforce.
func TestOptions(t *testing.T) {
	t.Parallel()
	forEachTarget(t, 1, func(t *testing.T, e *env) {
		onRetry := func(context.Context, int, error, time.Duration) {}
		random := func() float64 { return 0.5 }
		for _, c := range []struct {
			name string
			opts []txmiddleware.Option
		}{
			{"WithMaxTxAttempts(0)", []txmiddleware.Option{txmiddleware.WithMaxTxAttempts(0)}},
			{"WithTxBackoff(0, 1s)", []txmiddleware.Option{txmiddleware.WithTxBackoff(0, time.Second)}},
			{"WithTxBackoff(1s, 1ms)", []txmiddleware.Option{txmiddleware.WithTxBackoff(time.Second, time.Millisecond)}},
			{"WithRandom(nil)", []txmiddleware.Option{txmiddleware.WithRandom(nil)}},
			{"WithLockWait(-1)", []txmiddleware.Option{txmiddleware.WithLockWait(-1)}},
			{"WithErrorCodec(nil)", []txmiddleware.Option{txmiddleware.WithErrorCodec(nil)}},
			{"zero Option", []txmiddleware.Option{{}}},
			{"WithIsolation twice", []txmiddleware.Option{txmiddleware.WithIsolation(sql.LevelDefault), txmiddleware.WithIsolation(sql.LevelDefault)}},
			{"WithMaxTxAttempts twice", []txmiddleware.Option{txmiddleware.WithMaxTxAttempts(3), txmiddleware.WithMaxTxAttempts(4)}},
			{"WithTxBackoff twice", []txmiddleware.Option{txmiddleware.WithTxBackoff(time.Millisecond, time.Second), txmiddleware.WithTxBackoff(time.Millisecond, time.Second)}},
			{"WithRandom twice", []txmiddleware.Option{txmiddleware.WithRandom(random), txmiddleware.WithRandom(random)}},
			{"WithLockWait twice", []txmiddleware.Option{txmiddleware.WithLockWait(0), txmiddleware.WithLockWait(time.Second)}},
			{"WithOnRetry twice", []txmiddleware.Option{txmiddleware.WithOnRetry(onRetry), txmiddleware.WithOnRetry(onRetry)}},
			{"WithErrorCodec twice", []txmiddleware.Option{txmiddleware.WithErrorCodec(testCodec{}), txmiddleware.WithErrorCodec(testCodec{})}},
			{"WithBeforeCommit twice", []txmiddleware.Option{txmiddleware.WithBeforeCommit(nil), txmiddleware.WithBeforeCommit(nil)}},
		} {
			if r, err := txmiddleware.New(e.DB, e.l, c.opts...); !errors.Is(err, txmiddleware.ErrInvalidConfig) || r != nil {
				t.Errorf("%s: %v %v, want ErrInvalidConfig", c.name, r, err)
			}
		}
		// Every option once is fine.
		if _, err := txmiddleware.New(e.DB, e.l,
			txmiddleware.WithIsolation(sql.LevelDefault), txmiddleware.WithMaxTxAttempts(3),
			txmiddleware.WithTxBackoff(time.Millisecond, time.Second), txmiddleware.WithRandom(random),
			txmiddleware.WithLockWait(time.Second),
			txmiddleware.WithOnRetry(onRetry), txmiddleware.WithErrorCodec(testCodec{})); err != nil {
			t.Errorf("every option once: %v", err)
		}

		if _, err := txmiddleware.New(nil, e.l); !errors.Is(err, txmiddleware.ErrInvalidConfig) {
			t.Errorf("nil db: %v, want ErrInvalidConfig", err)
		}
		if _, err := txmiddleware.New(e.DB, nil); !errors.Is(err, txmiddleware.ErrInvalidConfig) {
			t.Errorf("nil ledger: %v, want ErrInvalidConfig", err)
		}
		if _, err := txmiddleware.New(e.DB, dialectLedger{e.l, nil}); !errors.Is(err, txmiddleware.ErrInvalidConfig) {
			t.Errorf("a ledger without a dialect: %v, want ErrInvalidConfig", err)
		}

		// A dialect without dialects.LockWaiter cannot take a bound, but
		// runs without one.
		plain := dialectLedger{e.l, plainDialect{e.Dialect}}
		if _, err := txmiddleware.New(e.DB, plain, txmiddleware.WithLockWait(time.Second)); !errors.Is(err, txmiddleware.ErrInvalidConfig) {
			t.Errorf("WithLockWait on a dialect without LockWaiter: %v, want ErrInvalidConfig", err)
		}
		r, err := txmiddleware.New(e.DB, plain, txmiddleware.WithLockWait(0), txmiddleware.WithErrorCodec(testCodec{}))
		if err != nil {
			t.Fatalf("WithLockWait(0) on a dialect without LockWaiter: %v", err)
		}
		var runs atomic.Int64
		if out, err := r.Run(context.Background(), req(t, "plain-dialect"), e.bizWork("plain-dialect", 1, &runs)); err != nil || !out.Executed || e.BizRows(t, "plain-dialect") != 1 {
			t.Errorf("run on a dialect without optional interfaces: %+v %v", out, err)
		}

		if _, err := e.runner(t).Run(context.Background(), req(t, "nil-work"), nil); err == nil {
			t.Error("nil work accepted")
		}
	})
}

func TestBackoffDelay(t *testing.T) {
	t.Parallel()
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
			txmiddleware.WithTxBackoff(10*time.Millisecond, 500*time.Millisecond))
		if err != nil || d < c.min || d > c.max {
			t.Errorf("failed %d rnd %v: %v %v, want [%v, %v]", c.failed, c.rnd, d, err, c.min, c.max)
		}
	}
	if _, err := txmiddleware.BackoffDelay(1, txmiddleware.WithTxBackoff(time.Millisecond, time.Second), txmiddleware.WithTxBackoff(time.Millisecond, time.Second)); err == nil {
		t.Error("WithTxBackoff twice accepted")
	}
}

// TestHerdWinnerRollsBack: 64 concurrent calls with one key, and the
// first run of the work fails (not finally) once the database shows the
// 63 others queued behind it. That caller gets its error; of the other 63
// exactly one runs the work and the rest replay its result. On InnoDB the
// waiters deadlock when the holder rolls back (1213), and the runner
// retries them.
func TestHerdWinnerRollsBack(t *testing.T) {
	// Not parallel with the other tests: each target takes a herd's pool
	// (see familyConns), and its 64 callers load the machine.
	const callers = herdCallers
	boom := errors.New("first run fails")
	for _, view := range claimWaiters {
		// callers+1: the test's own queries while every caller holds a
		// connection.
		forEachTarget(t, callers+1, func(t *testing.T, e *env) {
			_, sessions := e.Dialect.(dialectkit.Sessions)
			for _, level := range e.IsolationLevels() {
				t.Run(level.String(), func(t *testing.T) {
					var retries atomic.Int64
					r := e.runner(t, txmiddleware.WithIsolation(level), txmiddleware.WithTxBackoff(time.Millisecond, 20*time.Millisecond),
						txmiddleware.WithOnRetry(func(context.Context, int, error, time.Duration) { retries.Add(1) }))
					ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
					defer cancel()
					key := "herd-rollback-" + level.String()
					e.warm(t, callers+1)

					// The first run tells the test its session and holds the
					// claim until the test has seen the others wait for it.
					type holding struct {
						sid int64
						err error
					}
					held := make(chan holding, 1)
					release := make(chan struct{})
					var runs atomic.Int64
					work := func(ctx context.Context, tx *sql.Tx) (ledger.Result, error) {
						n := runs.Add(1)
						if err := e.WriteBiz(ctx, tx, key, int(n)); err != nil {
							return ledger.Result{}, err
						}
						if n == 1 {
							var h holding
							if sessions {
								h.sid, h.err = e.Dialect.(dialectkit.Sessions).SessionID(ctx, tx)
							}
							held <- h
							<-release
							return ledger.Result{}, boom
						}
						return ledger.Result{Response: fmt.Appendf(nil, "run %d", n)}, nil
					}
					var wg sync.WaitGroup
					start := make(chan struct{})
					returned := make(chan struct{}) // closed when the first call returns
					var returnedOnce, releaseOnce sync.Once
					outs := make([]txmiddleware.RunResult, callers)
					errs := make([]error, callers)
					for w := range callers {
						wg.Add(1)
						go func() {
							defer wg.Done()
							<-start
							outs[w], errs[w] = r.Run(ctx, req(t, key), work)
							returnedOnce.Do(func() { close(returned) })
						}()
					}
					finish := func() {
						releaseOnce.Do(func() { close(release) })
						wg.Wait()
					}
					defer finish() // also when the test fails while the holder holds
					close(start)
					var h holding
					select {
					case h = <-held:
					case <-returned:
						finish()
						t.Fatalf("a call returned before the work first ran: %v", errors.Join(errs...))
					}
					if h.err != nil {
						t.Fatalf("the holder's session id: %v", h.err)
					}
					waiting := view.query
					if testdb.TiDB(e.Dialect) {
						waiting = "" // no INNODB_TRX: TiDB's own view (DATA_LOCK_WAITS), through the dialect
					}
					e.waitQueued(t, h.sid, callers-1, returned, waiting)
					finish()

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
					testdb.WaitIdle(t, e.DB)
					t.Logf("%s %s: %d attempts for %d callers, %d retries", e.Name, level, attempts, callers, retries.Load())
				})
			}
		}, view.family)
	}
}
