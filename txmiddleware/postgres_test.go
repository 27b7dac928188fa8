package txmiddleware_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/opledger/opledger/dialects"
	"github.com/opledger/opledger/internal/testkit/testdb"
	"github.com/opledger/opledger/ledger"
	"github.com/opledger/opledger/txmiddleware"
)

// terminate kills a backend from another connection of the pool.
func (e *env) terminate(t *testing.T, pid int) {
	t.Helper()
	var ok bool
	if err := e.DB.QueryRow("SELECT pg_terminate_backend($1)", pid).Scan(&ok); err != nil || !ok {
		t.Errorf("pg_terminate_backend(%d): %v %v", pid, ok, err)
	}
}

// backendWait bounds how long awaitBackend polls pg_stat_activity.
const backendWait = 20 * time.Second

// awaitBackend polls pg_stat_activity, from another connection of the
// pool, until it shows want rows for backend pid that satisfy cond (SQL
// over pg_stat_activity's columns, "true" for any row): want 0 and cond
// "true" wait until the backend has exited. It returns an error after
// backendWait rather than failing the test, so that goroutines can use it.
func (e *env) awaitBackend(pid int, cond string, want int) error {
	deadline := time.Now().Add(backendWait)
	for {
		var n int
		if err := e.DB.QueryRow("SELECT count(*) FROM pg_stat_activity WHERE pid = $1 AND ("+cond+")", pid).Scan(&n); err != nil {
			return fmt.Errorf("pg_stat_activity: %w", err)
		}
		if n == want {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("after %v pg_stat_activity shows %d rows for backend %d where %s, want %d", backendWait, n, pid, cond, want)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// inPgSleep is the pg_stat_activity condition of a backend running
// pg_sleep.
const inPgSleep = "state = 'active' AND wait_event = 'PgSleep'"

// The work's backend is killed while the work runs, either between two
// statements or in the middle of one: the call is retried to a single
// execution, or fails cleanly; the work's writes never commit twice.
func TestPostgresBackendKilledDuringWork(t *testing.T) {
	t.Parallel()
	forEachPostgres(t, 4, func(t *testing.T, e *env) {
		for _, during := range []string{"between statements", "inside a statement"} {
			t.Run(during, func(t *testing.T) {
				key := "killed-" + during
				var runs atomic.Int64
				var retried []error
				r := e.runner(t, txmiddleware.WithTxBackoff(time.Millisecond, 10*time.Millisecond),
					txmiddleware.WithOnRetry(func(_ context.Context, _ int, err error, _ time.Duration) { retried = append(retried, err) }))
				ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
				defer cancel()
				var killer sync.WaitGroup
				out, err := r.Run(ctx, req(t, key), func(ctx context.Context, tx *sql.Tx) (ledger.Result, error) {
					n := runs.Add(1)
					if err := e.WriteBiz(ctx, tx, key, int(n)); err != nil {
						return ledger.Result{}, err
					}
					if n == 1 {
						var pid int
						if err := tx.QueryRowContext(ctx, "SELECT pg_backend_pid()").Scan(&pid); err != nil {
							return ledger.Result{}, err
						}
						if during == "between statements" {
							e.terminate(t, pid)
							// The backend sends its FATAL before it exits.
							if err := e.awaitBackend(pid, "true", 0); err != nil {
								t.Fatalf("terminated backend: %v", err)
							}
						} else {
							killer.Go(func() {
								// Killed once inside pg_sleep, which would
								// otherwise outlast the test.
								if err := e.awaitBackend(pid, inPgSleep, 1); err != nil {
									t.Errorf("the work's statement: %v", err)
								}
								e.terminate(t, pid)
							})
							if _, err := tx.ExecContext(ctx, "SELECT pg_sleep(60)"); err != nil {
								return ledger.Result{}, fmt.Errorf("sleeping: %w", err)
							}
						}
					}
					if err := e.WriteBiz(ctx, tx, key, int(n)); err != nil {
						return ledger.Result{}, err
					}
					return ledger.Result{Response: fmt.Appendf(nil, "run %d", n)}, nil
				})
				killer.Wait()
				rows := e.BizRows(t, key)
				t.Logf("%s: outcome %+v, err %v, work ran %d times, retried after %v, %d business rows", e.Name, out, err, runs.Load(), retried, rows)
				switch {
				case err == nil:
					if !out.Executed || out.Attempts != 2 || string(out.Result.Response) != "run 2" || rows != 2 {
						t.Fatalf("retried: %+v, %d rows; want the second run committed alone (2 rows)", out, rows)
					}
					if len(retried) != 1 || e.Dialect.Classify(retried[0]) != dialects.ClassConnection {
						t.Fatalf("retried after %v, want one connection failure", retried)
					}
				default:
					if out.Executed || rows != 0 {
						t.Fatalf("failed with %v but %d rows persisted", err, rows)
					}
					e.assertNothing(t, key)
				}
				testdb.WaitIdle(t, e.DB)
			})
		}
	})
}

// slowCommitTable creates a table whose inserted rows make COMMIT sleep
// for seconds (a deferred constraint trigger runs pg_sleep at commit
// time), dropped when the test ends, and returns its quoted name.
func (e *env) slowCommitTable(t *testing.T, seconds int) string {
	t.Helper()
	slow := e.Dialect.QuoteIdent(e.Table + "_slow")
	fn := e.Dialect.QuoteIdent(e.Table + "_slow_commit")
	for _, q := range []string{
		"CREATE TABLE " + slow + " (k text NOT NULL)",
		"CREATE FUNCTION " + fn + "() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN PERFORM pg_sleep(" + strconv.Itoa(seconds) + "); RETURN NULL; END $$",
		"CREATE CONSTRAINT TRIGGER slow_commit AFTER INSERT ON " + slow + " DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION " + fn + "()",
	} {
		if _, err := e.DB.Exec(q); err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(func() {
		e.DB.Exec("DROP TABLE " + slow)
		e.DB.Exec("DROP FUNCTION " + fn + "()")
	})
	return slow
}

// The backend is killed while COMMIT runs (a deferred constraint trigger
// sleeps at commit time): the outcome is unknown to the client, and Run
// says so with ErrCommitUnknown, never success or a plain failure. The
// caller resolves with Lookup, then runs again.
func TestPostgresCommitUnknown(t *testing.T) {
	t.Parallel()
	forEachPostgres(t, 4, func(t *testing.T, e *env) {
		ctx := context.Background()
		slow := e.slowCommitTable(t, 60)

		key := "commit-unknown"
		var runs atomic.Int64
		var killer sync.WaitGroup
		out, err := e.runner(t).Run(ctx, req(t, key), func(ctx context.Context, tx *sql.Tx) (ledger.Result, error) {
			runs.Add(1)
			var pid int
			if err := tx.QueryRowContext(ctx, "SELECT pg_backend_pid()").Scan(&pid); err != nil {
				return ledger.Result{}, err
			}
			if _, err := tx.ExecContext(ctx, "INSERT INTO "+slow+" (k) VALUES ($1)", key); err != nil {
				return ledger.Result{}, err
			}
			killer.Go(func() {
				// COMMIT runs the deferred trigger, whose pg_sleep only
				// the kill ends.
				if err := e.awaitBackend(pid, "lower(query) = 'commit' AND "+inPgSleep, 1); err != nil {
					t.Errorf("COMMIT: %v", err)
				}
				e.terminate(t, pid)
			})
			return ledger.Result{Response: []byte("done")}, e.WriteBiz(ctx, tx, key, 1)
		})
		killer.Wait()
		if !errors.Is(err, txmiddleware.ErrCommitUnknown) || out.Executed || out.Attempts != 1 || runs.Load() != 1 {
			t.Fatalf("%+v %v; want ErrCommitUnknown after one attempt", out, err)
		}
		if e.Dialect.Classify(err) != dialects.ClassConnection {
			t.Fatalf("the driver's error is not reachable: %v", err)
		}
		t.Logf("%s: %v", e.Name, err)
		testdb.WaitIdle(t, e.DB)
		// Resolve: the commit had not happened.
		e.assertNothing(t, key)
		if _, err := e.DB.Exec("DROP TRIGGER slow_commit ON " + slow); err != nil {
			t.Fatal(err)
		}
		out, err = e.runner(t).Run(ctx, req(t, key), e.bizWork(key, 2, &runs))
		if err != nil || !out.Executed || e.BizRows(t, key) != 1 {
			t.Fatalf("after resolving: %+v %v", out, err)
		}
	})
}

// The context ends while COMMIT runs (a deferred constraint trigger
// sleeps at commit time). pgx gives up on COMMIT's answer, so the outcome
// is unknown: Run says ErrCommitUnknown (matching the context's error
// too), never a plain context error that would read as "not committed".
// lib/pq cancels the statement instead, and the database answers with a
// rollback (57014): that is a definite "not committed", the context's
// error, and never a lock timeout that would read as "in progress".
func TestPostgresDeadlineDuringCommit(t *testing.T) {
	t.Parallel()
	forEachPostgres(t, 4, func(t *testing.T, e *env) {
		slow := e.slowCommitTable(t, 1)
		key := "deadline-in-commit"
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		var watcher sync.WaitGroup
		out, err := e.runner(t).Run(ctx, req(t, key), func(ctx context.Context, tx *sql.Tx) (ledger.Result, error) {
			var pid int
			if err := tx.QueryRowContext(ctx, "SELECT pg_backend_pid()").Scan(&pid); err != nil {
				return ledger.Result{}, err
			}
			if _, err := tx.ExecContext(ctx, "INSERT INTO "+slow+" (k) VALUES ($1)", key); err != nil {
				return ledger.Result{}, err
			}
			watcher.Go(func() {
				// Cancel once COMMIT is in the trigger's pg_sleep.
				if err := e.awaitBackend(pid, "lower(query) = 'commit' AND "+inPgSleep, 1); err != nil {
					t.Errorf("COMMIT: %v", err)
				}
				cancel()
			})
			return ledger.Result{Response: []byte("done")}, e.WriteBiz(ctx, tx, key, 1)
		})
		watcher.Wait()
		if !errors.Is(err, context.Canceled) || out.Executed || errors.Is(err, ledger.ErrInProgress) {
			t.Fatalf("%+v %v; want an error matching context.Canceled", out, err)
		}
		testdb.WaitIdle(t, e.DB)
		committed := e.BizRows(t, key) == 1
		if unknown := errors.Is(err, txmiddleware.ErrCommitUnknown); !unknown && committed {
			t.Fatalf("%v: said not committed, but the transfer committed", err)
		}
		t.Logf("%s: %v (committed: %v)", e.Name, err, committed)
	})
}

// A final error after a statement that aborted the PostgreSQL transaction
// (25P02 follows): the aborted transaction is rolled back whole and the
// error is recorded in a fresh one, then replayed.
func TestPostgresFinalErrorAfterAbortedStatement(t *testing.T) {
	t.Parallel()
	forEachPostgres(t, 2, func(t *testing.T, e *env) {
		ctx := context.Background()
		key := "aborted"
		r := e.runner(t)
		var runs atomic.Int64
		work := func(ctx context.Context, tx *sql.Tx) (ledger.Result, error) {
			runs.Add(1)
			if err := e.WriteBiz(ctx, tx, key, 1); err != nil {
				return ledger.Result{}, err
			}
			var x int
			if err := tx.QueryRowContext(ctx, "SELECT 1/0").Scan(&x); err == nil {
				return ledger.Result{}, errors.New("1/0 succeeded")
			}
			return ledger.Result{}, &finalErr{codeNotFound, "account 7 not found"}
		}
		out, err := r.Run(ctx, req(t, key), work)
		assertFinal(t, "first call", err, codeNotFound, "account 7 not found")
		if !out.Executed || out.Attempts != 1 {
			t.Fatalf("%+v %v", out, err)
		}
		out, err = r.Run(ctx, req(t, key), work)
		assertFinal(t, "replay", err, codeNotFound, "account 7 not found")
		if !out.Replayed {
			t.Fatalf("replay: %+v %v", out, err)
		}
		if n := e.BizRows(t, key); n != 0 || runs.Load() != 1 {
			t.Fatalf("%d business rows, %d runs; want 0, 1", n, runs.Load())
		}
		testdb.WaitIdle(t, e.DB)
	})
}

// Serialization failures and deadlocks raised by the work's own
// statements or by COMMIT are retried: two calls with different keys
// collide on business rows (write skew under SERIALIZABLE; opposite lock
// order under READ COMMITTED); both end executed, one after a retry.
func TestPostgresWorkConflictsRetried(t *testing.T) {
	t.Parallel()
	forEachPostgres(t, 4, func(t *testing.T, e *env) {
		for _, c := range []struct {
			name  string
			level sql.IsolationLevel
			class dialects.Class
		}{
			{"write skew", sql.LevelSerializable, dialects.ClassSerialization},
			{"deadlock", sql.LevelReadCommitted, dialects.ClassDeadlock},
		} {
			t.Run(c.name, func(t *testing.T) {
				ctx := context.Background()
				shared := "shared-" + c.name
				for i := range 2 {
					if _, err := e.DB.Exec("INSERT INTO "+e.Biz+" (k, worker) VALUES ($1, $2)", shared, i); err != nil {
						t.Fatal(err)
					}
				}
				var mu sync.Mutex
				var classes []dialects.Class
				r := e.runner(t, txmiddleware.WithIsolation(c.level), txmiddleware.WithTxBackoff(time.Millisecond, 5*time.Millisecond),
					txmiddleware.WithOnRetry(func(_ context.Context, _ int, err error, _ time.Duration) {
						mu.Lock()
						classes = append(classes, e.Dialect.Classify(err))
						mu.Unlock()
					}))
				var barrier sync.WaitGroup
				barrier.Add(2)
				var wg sync.WaitGroup
				outs := make([]txmiddleware.RunResult, 2)
				errs := make([]error, 2)
				for w := range 2 {
					wg.Add(1)
					go func() {
						defer wg.Done()
						key := fmt.Sprintf("%s-%d", c.name, w)
						var runs int
						outs[w], errs[w] = r.Run(ctx, req(t, key), func(ctx context.Context, tx *sql.Tx) (ledger.Result, error) {
							runs++
							first := runs == 1
							if c.class == dialects.ClassSerialization {
								var n int
								if err := tx.QueryRowContext(ctx, "SELECT COUNT(*) FROM "+e.Biz+" WHERE k = $1", shared).Scan(&n); err != nil {
									return ledger.Result{}, err
								}
								if first {
									barrier.Done()
									barrier.Wait()
								}
								if _, err := tx.ExecContext(ctx, "INSERT INTO "+e.Biz+" (k, worker) VALUES ($1, $2)", shared, 10+n); err != nil {
									return ledger.Result{}, err
								}
							} else {
								a, b := w, 1-w
								if _, err := tx.ExecContext(ctx, "UPDATE "+e.Biz+" SET worker = worker WHERE k = $1 AND worker = $2", shared, a); err != nil {
									return ledger.Result{}, err
								}
								if first {
									barrier.Done()
									barrier.Wait()
								}
								if _, err := tx.ExecContext(ctx, "UPDATE "+e.Biz+" SET worker = worker WHERE k = $1 AND worker = $2", shared, b); err != nil {
									return ledger.Result{}, err
								}
							}
							return ledger.Result{Response: []byte(key)}, nil
						})
					}()
				}
				wg.Wait()
				attempts := 0
				for w := range 2 {
					if errs[w] != nil || !outs[w].Executed {
						t.Fatalf("call %d: %+v %v", w, outs[w], errs[w])
					}
					attempts += outs[w].Attempts
				}
				t.Logf("%s %s: %d attempts for 2 calls, retried after %v", e.Name, c.name, attempts, classes)
				if attempts < 3 || len(classes) == 0 || classes[0] != c.class {
					t.Fatalf("want a retry after a %v, got attempts %d, classes %v", c.class, attempts, classes)
				}
				if c.class == dialects.ClassSerialization {
					// Serializable: the two inserts saw 2 and 3 rows, never both 2.
					if n := e.Count(t, "SELECT COUNT(DISTINCT worker) FROM "+e.Biz+" WHERE k = $1 AND worker >= 10", shared); n != 2 {
						t.Fatalf("write skew committed: %d distinct counts", n)
					}
				}
				testdb.WaitIdle(t, e.DB)
			})
		}
	})
}
