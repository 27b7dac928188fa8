package txmiddleware_test

import (
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

	"github.com/opledger/opledger/dialects"
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

// The work's backend is killed while the work runs, either between two
// statements or in the middle of one: the call is retried to a single
// execution, or fails cleanly; the work's writes never commit twice.
func TestPostgresBackendKilledDuringWork(t *testing.T) {
	forEachPostgres(t, 4, func(t *testing.T, e *env) {
		for _, during := range []string{"between statements", "inside a statement"} {
			t.Run(during, func(t *testing.T) {
				key := "killed-" + during
				var runs atomic.Int64
				var retried []error
				r := e.runner(t, txmiddleware.WithBackoff(time.Millisecond, 10*time.Millisecond),
					txmiddleware.WithOnRetry(func(_ context.Context, _ int, err error, _ time.Duration) { retried = append(retried, err) }))
				ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
				defer cancel()
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
							time.Sleep(50 * time.Millisecond) // let the FATAL arrive
						} else {
							go func() {
								time.Sleep(200 * time.Millisecond)
								e.terminate(t, pid)
							}()
							if _, err := tx.ExecContext(ctx, "SELECT pg_sleep(5)"); err != nil {
								return ledger.Result{}, fmt.Errorf("sleeping: %w", err)
							}
						}
					}
					if err := e.WriteBiz(ctx, tx, key, int(n)); err != nil {
						return ledger.Result{}, err
					}
					return ledger.Result{Response: fmt.Appendf(nil, "run %d", n)}, nil
				})
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
				waitIdle(t, e.DB)
			})
		}
	})
}

// The backend is killed while COMMIT runs (a deferred constraint trigger
// sleeps at commit time): the outcome is unknown to the client, and Run
// says so with ErrCommitUnknown, never success or a plain failure. The
// caller resolves with Lookup, then runs again.
func TestPostgresCommitUnknown(t *testing.T) {
	forEachPostgres(t, 4, func(t *testing.T, e *env) {
		ctx := context.Background()
		slow := e.Dialect.QuoteIdent(e.Table + "_slow")
		fn := e.Dialect.QuoteIdent(e.Table + "_slow_commit")
		for _, q := range []string{
			"CREATE TABLE " + slow + " (k text NOT NULL)",
			"CREATE FUNCTION " + fn + "() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN PERFORM pg_sleep(3); RETURN NULL; END $$",
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

		key := "commit-unknown"
		var runs atomic.Int64
		killed := make(chan struct{})
		out, err := e.runner(t).Run(ctx, req(t, key), func(ctx context.Context, tx *sql.Tx) (ledger.Result, error) {
			runs.Add(1)
			var pid int
			if err := tx.QueryRowContext(ctx, "SELECT pg_backend_pid()").Scan(&pid); err != nil {
				return ledger.Result{}, err
			}
			if _, err := tx.ExecContext(ctx, "INSERT INTO "+slow+" (k) VALUES ($1)", key); err != nil {
				return ledger.Result{}, err
			}
			go func() {
				defer close(killed)
				for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
					var n int
					if err := e.DB.QueryRow("SELECT COUNT(*) FROM pg_stat_activity WHERE pid = $1 AND state = 'active' AND lower(query) = 'commit'", pid).Scan(&n); err != nil {
						t.Error(err)
						return
					}
					if n == 1 {
						e.terminate(t, pid)
						return
					}
				}
				t.Error("COMMIT never showed up in pg_stat_activity")
			}()
			return ledger.Result{Response: []byte("done")}, e.WriteBiz(ctx, tx, key, 1)
		})
		<-killed
		if !errors.Is(err, txmiddleware.ErrCommitUnknown) || out.Executed || out.Attempts != 1 || runs.Load() != 1 {
			t.Fatalf("%+v %v; want ErrCommitUnknown after one attempt", out, err)
		}
		if e.Dialect.Classify(err) != dialects.ClassConnection {
			t.Fatalf("the driver's error is not reachable: %v", err)
		}
		t.Logf("%s: %v", e.Name, err)
		waitIdle(t, e.DB)
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

// A final error after a statement that aborted the PostgreSQL transaction
// (25P02 follows): ROLLBACK TO SAVEPOINT makes the transaction usable, and
// the error is recorded and replayed.
func TestPostgresFinalErrorAfterAbortedStatement(t *testing.T) {
	forEachPostgres(t, 2, func(t *testing.T, e *env) {
		for _, mode := range []txmiddleware.SavepointMode{txmiddleware.SavepointAlways, txmiddleware.SavepointOnFinalError} {
			ctx := context.Background()
			key := "aborted-" + mode.String()
			r := e.runner(t, txmiddleware.WithSavepoint(mode))
			work := func(ctx context.Context, tx *sql.Tx) (ledger.Result, error) {
				if err := e.WriteBiz(ctx, tx, key, 1); err != nil {
					return ledger.Result{}, err
				}
				var x int
				if err := tx.QueryRowContext(ctx, "SELECT 1/0").Scan(&x); err == nil {
					return ledger.Result{}, errors.New("1/0 succeeded")
				}
				return ledger.Result{}, status.Error(codes.NotFound, "account 7 not found")
			}
			out, err := r.Run(ctx, req(t, key), work)
			if status.Code(err) != codes.NotFound || !out.Executed {
				t.Fatalf("%s: %+v %v", mode, out, err)
			}
			out, err = r.Run(ctx, req(t, key), work)
			if s, _ := status.FromError(err); !out.Replayed || s.Code() != codes.NotFound || s.Message() != "account 7 not found" {
				t.Fatalf("%s replay: %+v %v", mode, out, err)
			}
			if n := e.BizRows(t, key); n != 0 {
				t.Fatalf("%d business rows", n)
			}
		}
		waitIdle(t, e.DB)
	})
}

// Serialization failures and deadlocks raised by the work's own
// statements or by COMMIT are retried: two calls with different keys
// collide on business rows (write skew under SERIALIZABLE; opposite lock
// order under READ COMMITTED); both end executed, one after a retry.
func TestPostgresWorkConflictsRetried(t *testing.T) {
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
				r := e.runner(t, txmiddleware.WithIsolation(c.level), txmiddleware.WithBackoff(time.Millisecond, 5*time.Millisecond),
					txmiddleware.WithOnRetry(func(_ context.Context, _ int, err error, _ time.Duration) {
						mu.Lock()
						classes = append(classes, e.Dialect.Classify(err))
						mu.Unlock()
					}))
				var barrier sync.WaitGroup
				barrier.Add(2)
				var wg sync.WaitGroup
				outs := make([]txmiddleware.Outcome, 2)
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
				waitIdle(t, e.DB)
			})
		}
	})
}
