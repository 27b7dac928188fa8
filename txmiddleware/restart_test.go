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

	"github.com/opledger/opledger/dialects"
	"github.com/opledger/opledger/dialects/mysql"
	"github.com/opledger/opledger/dialects/postgres"
	"github.com/opledger/opledger/internal/harness/throwaway"
	"github.com/opledger/opledger/internal/testkit/testdb"
	"github.com/opledger/opledger/ledger"
	"github.com/opledger/opledger/txmiddleware"
)

// restartTargets are the databases a test may restart: throw-away servers
// of its own, never the shared ones. start returns the server to restart
// and the address the clients connect to (PgBouncer's, for the pooled
// targets, whose backend is the server restarted).
var restartTargets = []struct {
	name    string
	driver  string
	dialect dialects.Dialect
	start   func(testing.TB) (*throwaway.Server, string)
	dsn     func(addr string) string
}{
	{"postgres/pq", "postgres", postgres.New(), direct(throwaway.Postgres), pgDSN("")},
	{"postgres/pgx", "pgx", postgres.New(), direct(throwaway.Postgres), pgDSN("")},
	{"pgbouncer/pq", "postgres", postgres.New(), pooled, pgDSN("&binary_parameters=yes")},
	{"pgbouncer/pgx", "pgx", postgres.New(), pooled, pgDSN("&default_query_exec_mode=exec")},
	{"mariadb", "mysql", mysql.New(), direct(throwaway.MariaDB), func(a string) string {
		cfg, _ := mysql.Config("root@tcp(" + a + ")/test")
		return cfg.FormatDSN()
	}},
}

func direct(start func(testing.TB) *throwaway.Server) func(testing.TB) (*throwaway.Server, string) {
	return func(t testing.TB) (*throwaway.Server, string) {
		s := start(t)
		return s, s.Addr()
	}
}

// pooled starts a PostgreSQL behind a PgBouncer in transaction mode with
// two server connections.
func pooled(t testing.TB) (*throwaway.Server, string) {
	pg := throwaway.Postgres(t)
	pb := throwaway.PgBouncer(t, pg, throwaway.PgBouncerOptions{PoolSize: 2})
	return pg, pb.Addr()
}

func pgDSN(params string) func(string) string {
	return func(a string) string { return "postgres://postgres@" + a + "/postgres?sslmode=disable" + params }
}

// TestDatabaseRestart: a database (PostgreSQL, also behind PgBouncer in
// transaction mode, and MariaDB) restarted (cleanly or by SIGKILL) while
// a unit's work runs, after its claim, or killed while its COMMIT is in
// flight, never gives a wrong answer. Mid-work the runner surfaces a
// connection failure, retries on the restarted server and executes once,
// or returns an error matching ledger.ErrRetryable with nothing written.
// During COMMIT it returns ErrCommitUnknown; once the server is back,
// Lookup resolves that to a definite outcome (completed, with its one
// business row, or not found, with none), and a retry with the same key
// replays or executes accordingly: one business row in the end, always.
func TestDatabaseRestart(t *testing.T) {
	t.Parallel()
	for _, tg := range restartTargets {
		t.Run(tg.name, func(t *testing.T) {
			t.Parallel()
			srv, addr := tg.start(t)
			proxy := testdb.NewCutProxy(t, addr)
			db := testdb.OpenDSN(t, tg.driver, tg.dsn(proxy.Addr()), 4)
			e := withStore(t, testdb.NewEnv(t, tg.name, tg.dialect, db))
			r := e.runner(t, txmiddleware.WithTxBackoff(10*time.Millisecond, 100*time.Millisecond), txmiddleware.WithMaxTxAttempts(10))
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()

			midWork := func(t *testing.T, key string, fault func(context.Context) error) {
				var runs atomic.Int64
				claimed, resume := make(chan struct{}), make(chan struct{})
				biz := e.bizWork(key, 1, &runs)
				done := make(chan struct{})
				var out txmiddleware.RunResult
				var err error
				go func() {
					defer close(done)
					out, err = r.Run(ctx, req(t, key), func(ctx context.Context, tx *sql.Tx) (ledger.Result, error) {
						if runs.Load() == 0 {
							close(claimed)
							<-resume
						}
						return biz(ctx, tx)
					})
				}()
				<-claimed
				if ferr := fault(ctx); ferr != nil {
					t.Fatalf("restart: %v", ferr)
				}
				close(resume)
				<-done
				settle(t, e, key, out, err)
			}

			t.Run("work/restart", func(t *testing.T) { midWork(t, "work-restart", srv.Restart) })
			t.Run("work/crash", func(t *testing.T) { midWork(t, "work-crash", srv.Crash) })

			duringCommit := func(t *testing.T, key string, forward bool) {
				var runs atomic.Int64
				proxy.ArmFunc(func(fwd func() <-chan struct{}) {
					if forward {
						select { // the server committed; its answer is dropped
						case <-fwd():
						case <-time.After(10 * time.Second):
							t.Errorf("no answer to COMMIT within 10s")
						}
					}
					if err := srv.Kill(ctx); err != nil {
						t.Errorf("kill: %v", err)
					}
				})
				out, err := r.Run(ctx, req(t, key), e.bizWork(key, 1, &runs))
				if !errors.Is(err, txmiddleware.ErrCommitUnknown) {
					t.Fatalf("COMMIT cut by a crash: %+v, %v; want ErrCommitUnknown", out, err)
				}
				if err := srv.Start(ctx); err != nil {
					t.Fatal(err)
				}
				// Resolve: the database's answer, now that it is back.
				entry, lerr := e.l.Lookup(ctx, e.DB, mustID(t, key))
				rows := e.BizRows(t, key)
				switch {
				case lerr == nil && entry.State == ledger.Completed:
					if rows != 1 {
						t.Fatalf("resolved as committed with %d business rows", rows)
					}
				case errors.Is(lerr, ledger.ErrNotFound):
					if rows != 0 {
						t.Fatalf("resolved as not committed with %d business rows", rows)
					}
				default:
					t.Fatalf("resolve: entry %+v, %v: not a definite outcome", entry, lerr)
				}
				out2, err := r.Run(ctx, req(t, key), e.bizWork(key, 2, &runs))
				if err != nil {
					t.Fatalf("retry with the same key: %v", err)
				}
				if committed := lerr == nil; out2.Replayed != committed || out2.Executed == committed {
					t.Fatalf("retry: %+v, first COMMIT committed: %v", out2, committed)
				}
				if committed := lerr == nil; committed != forward {
					t.Fatalf("COMMIT forwarded %v (and answered) but committed %v", forward, committed)
				}
				if n := e.BizRows(t, key); n != 1 {
					t.Fatalf("%d business rows after the retry, want 1", n)
				}
				t.Logf("COMMIT %s the crash: committed %v, retry %s", map[bool]string{true: "reached the server before", false: "held back by"}[forward],
					lerr == nil, map[bool]string{true: "replayed", false: "executed"}[out2.Replayed])
			}
			t.Run("commit/crash-after-send", func(t *testing.T) { duringCommit(t, "cut-after", true) })
			t.Run("commit/crash-before-send", func(t *testing.T) { duringCommit(t, "cut-before", false) })
		})
	}
}

// settle checks a unit's answer against the database after a restart, and
// then that a retry with the same key ends with exactly one business row.
func settle(t *testing.T, e *env, key string, out txmiddleware.RunResult, err error) {
	t.Helper()
	rows := e.BizRows(t, key)
	entry, lerr := e.l.Lookup(context.Background(), e.DB, mustID(t, key))
	switch {
	case err == nil:
		if !out.Executed || rows != 1 || lerr != nil || entry.State != ledger.Completed {
			t.Fatalf("OK answer %+v but %d business rows, entry %+v (%v)", out, rows, entry, lerr)
		}
	case errors.Is(err, txmiddleware.ErrCommitUnknown):
		t.Fatalf("commit unknown for a restart before COMMIT: %v", err)
	case errors.Is(err, ledger.ErrRetryable):
		if rows != 0 || !errors.Is(lerr, ledger.ErrNotFound) {
			t.Fatalf("retryable answer %v but %d business rows, entry %v", err, rows, lerr)
		}
	default:
		t.Fatalf("unexpected answer after a restart mid-work: %+v, %v", out, err)
	}
	t.Logf("answer after %d attempts: %v", out.Attempts, fmt.Sprint(err))
}

// TestDatabaseRestartUnderLoad: eight callers run 160 keyed units while
// the database is killed (SIGKILL) and restarted twice and cleanly
// restarted once, each fault once a given number of calls have answered.
// Every answer is checked against the database: an OK has its one
// business row and a completed entry; a retryable error has neither; a
// commit-unknown resolves, once the database is back, to one or the other.
// Then every key is run again with the same key: it replays when it had
// committed and executes otherwise, and each key ends with exactly one
// business row.
func TestDatabaseRestartUnderLoad(t *testing.T) {
	t.Parallel()
	const workers, perWorker = 8, 20
	for _, tg := range restartTargets {
		t.Run(tg.name, func(t *testing.T) {
			t.Parallel()
			srv, addr := tg.start(t)
			db := testdb.OpenDSN(t, tg.driver, tg.dsn(addr), workers+2)
			e := withStore(t, testdb.NewEnv(t, tg.name, tg.dialect, db))
			r := e.runner(t, txmiddleware.WithTxBackoff(10*time.Millisecond, 200*time.Millisecond), txmiddleware.WithMaxTxAttempts(30))
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()

			var answered atomic.Int64
			faults := []struct {
				after int64
				do    func(context.Context) error
			}{{30, srv.Crash}, {80, srv.Restart}, {120, srv.Crash}}
			faultsDone := make(chan error, 1)
			go func() {
				for _, f := range faults {
					for answered.Load() < f.after && ctx.Err() == nil {
						time.Sleep(time.Millisecond) // the poll's pace: waits on the calls' own count
					}
					if err := f.do(ctx); err != nil {
						faultsDone <- err
						return
					}
				}
				faultsDone <- nil
			}()

			type answer struct {
				key string
				out txmiddleware.RunResult
				err error
			}
			answers := make([]answer, workers*perWorker)
			var runs atomic.Int64
			var wg sync.WaitGroup
			for w := range workers {
				wg.Go(func() {
					for i := range perWorker {
						key := fmt.Sprintf("load-%d-%d", w, i)
						out, err := r.Run(ctx, req(t, key), e.bizWork(key, w, &runs))
						answers[w*perWorker+i] = answer{key, out, err}
						answered.Add(1)
					}
				})
			}
			wg.Wait()
			if err := <-faultsDone; err != nil {
				t.Fatalf("fault: %v", err)
			}
			var ok, retryable, unknown int
			for _, a := range answers {
				rows := e.BizRows(t, a.key)
				entry, lerr := e.l.Lookup(ctx, e.DB, mustID(t, a.key))
				committed := lerr == nil && entry.State == ledger.Completed
				if lerr != nil && !errors.Is(lerr, ledger.ErrNotFound) {
					t.Fatalf("key %s: lookup: %v", a.key, lerr)
				}
				if committed != (rows == 1) || rows > 1 {
					t.Fatalf("key %s: entry committed %v with %d business rows", a.key, committed, rows)
				}
				switch {
				case a.err == nil:
					ok++
					if !committed || !a.out.Executed {
						t.Fatalf("key %s: OK answer %+v, but committed %v", a.key, a.out, committed)
					}
				case errors.Is(a.err, txmiddleware.ErrCommitUnknown):
					unknown++ // resolved by the lookup above: committed or not
				case errors.Is(a.err, ledger.ErrRetryable):
					retryable++
					if committed {
						t.Fatalf("key %s: retryable answer %v, but committed", a.key, a.err)
					}
				default:
					t.Fatalf("key %s: answer %+v, %v: neither OK, retryable nor commit-unknown", a.key, a.out, a.err)
				}
				out, err := r.Run(ctx, req(t, a.key), e.bizWork(a.key, 99, &runs))
				if err != nil || out.Replayed != committed || out.Executed == committed {
					t.Fatalf("key %s: same-key retry %+v, %v (committed before: %v)", a.key, out, err, committed)
				}
				if n := e.BizRows(t, a.key); n != 1 {
					t.Fatalf("key %s: %d business rows after the retry", a.key, n)
				}
			}
			if n := e.Count(t, "SELECT COUNT(*) FROM "+e.Biz); n != len(answers) {
				t.Fatalf("%d business rows for %d keys", n, len(answers))
			}
			t.Logf("%s: %d calls across %d faults (server started %d times): %d OK, %d retryable, %d commit-unknown; work ran %d times",
				tg.name, len(answers), len(faults), srv.Starts(), ok, retryable, unknown, runs.Load())
		})
	}
}
