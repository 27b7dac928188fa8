package ledger_test

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

	gomysql "github.com/go-sql-driver/mysql"

	"github.com/opledger/opledger/dialects"
	"github.com/opledger/opledger/dialects/mysql"
	"github.com/opledger/opledger/internal/dialectkit"
	"github.com/opledger/opledger/internal/testkit/testdb"
	"github.com/opledger/opledger/ledger"
)

// forEachMySQL runs f on the MySQL target, with a pool of conns.
func forEachMySQL(t *testing.T, conns int, f func(t *testing.T, e *env)) {
	t.Helper()
	forEachTarget(t, conns, f, "mysql")
}

var mysqlLevels = []sql.IsolationLevel{sql.LevelReadCommitted, sql.LevelRepeatableRead}

// sessionLockWait gives a dedicated connection a short
// innodb_lock_wait_timeout and restores the previous value (and closes
// the connection) when the test ends.
func sessionLockWait(t *testing.T, db *sql.DB, seconds int) *sql.Conn {
	t.Helper()
	ctx := context.Background()
	conn, err := db.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var prev int64
	if err := conn.QueryRowContext(ctx, "SELECT @@SESSION.innodb_lock_wait_timeout").Scan(&prev); err != nil {
		t.Fatal(err)
	}
	if _, err := conn.ExecContext(ctx, fmt.Sprintf("SET SESSION innodb_lock_wait_timeout = %d", seconds)); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if _, err := conn.ExecContext(context.Background(), fmt.Sprintf("SET SESSION innodb_lock_wait_timeout = %d", prev)); err != nil {
			t.Errorf("restore innodb_lock_wait_timeout: %v", err)
		}
		conn.Close()
	})
	return conn
}

// InnoDB's plain INSERT waits on an uncommitted duplicate; when the holder
// commits, the waiter's 1062 rolls back only the statement and the
// locking read-back sees the winner, at both levels.
func TestMySQLWaitThenCommit(t *testing.T) {
	t.Parallel()
	forEachMySQL(t, 8, func(t *testing.T, e *env) {
		for _, level := range mysqlLevels {
			r := holdAndRace(t, e, "wait-commit-"+level.String(), level, (*sql.Tx).Commit)
			if r.err != nil || r.c.Outcome != ledger.Replay || string(r.c.Result.Response) != "A's result" {
				r.tx.Rollback()
				t.Fatalf("%s: B: %+v %v, want replay of A's result", level, r.c, r.err)
			}
			if err := e.WriteBiz(context.Background(), r.tx, "after-wait-"+level.String(), 1); err != nil {
				t.Fatal(err)
			}
			if err := r.tx.Commit(); err != nil {
				t.Fatalf("%s: B's transaction cannot commit: %v", level, err)
			}
			if n := e.BizRows(t, "after-wait-"+level.String()); n != 1 {
				t.Fatalf("%s: %d rows written after the replay, want 1", level, n)
			}
		}
	})
}

func TestMySQLWaitThenRollback(t *testing.T) {
	t.Parallel()
	forEachMySQL(t, 8, func(t *testing.T, e *env) {
		for _, level := range mysqlLevels {
			r := holdAndRace(t, e, "wait-rollback-"+level.String(), level, (*sql.Tx).Rollback)
			if r.err != nil || !r.c.Acquired() {
				r.tx.Rollback()
				t.Fatalf("%s: B: %+v %v, want acquired after A rolled back", level, r.c, r.err)
			}
			if err := e.l.Complete(context.Background(), r.tx, r.c, ledger.Result{Response: []byte("B")}); err != nil {
				t.Fatal(err)
			}
			if err := r.tx.Commit(); err != nil {
				t.Fatal(err)
			}
		}
	})
}

// When the holder rolls back while two others wait on the same key,
// InnoDB answers one of them with deadlock 1213 and rolls back its whole
// transaction. Exactly one waiter acquires; the other resolves either as
// a retryable error (the deadlock; its retry replays) or, if InnoDB let it
// wait, as a replay once the winner commits. Never as a second owner or an
// empty replay.
func TestMySQLThreeWaiterRollback(t *testing.T) {
	t.Parallel()
	forEachMySQL(t, 8, func(t *testing.T, e *env) {
		testdb.SkipOnTiDB(t, e.Dialect, "a holder's rollback answers one of two waiters with deadlock 1213, which this test requires")
		ctx := context.Background()
		deadlocks := 0
		const rounds = 5
		for _, level := range mysqlLevels {
			for round := 0; round < rounds; round++ {
				key := fmt.Sprintf("three-%s-%d", level, round)
				id := testdb.ID(t, "tenant-a", method, key)
				req := ledger.ClaimRequest{Identity: id, Fingerprint: fp(key)}
				a, err := e.DB.BeginTx(ctx, nil)
				if err != nil {
					t.Fatal(err)
				}
				defer a.Rollback()
				if c, err := e.l.Claim(ctx, a, req); err != nil || !c.Acquired() {
					t.Fatalf("A: %+v %v", c, err)
				}
				holder := testdb.SessionID(t, e.Dialect, a)
				done := make(chan claimResult, 2)
				returned := make(chan struct{})
				var once sync.Once
				for w := 0; w < 2; w++ {
					tx, err := e.DB.BeginTx(ctx, &sql.TxOptions{Isolation: level})
					if err != nil {
						t.Fatal(err)
					}
					defer tx.Rollback()
					go func() {
						c, err := e.l.Claim(ctx, tx, req)
						done <- claimResult{c: c, err: err, tx: tx, at: time.Now()}
						once.Do(func() { close(returned) })
					}()
				}
				// Both waiters queue behind A, as InnoDB shows, before A rolls back.
				testdb.WaitBlocked(t, e.DB, e.Dialect, holder, 2, returned)
				if err := a.Rollback(); err != nil {
					t.Fatal(err)
				}

				// The first to return is the winner or the deadlock victim.
				var winner *claimResult
				var pending []claimResult
				first := <-done
				pending = append(pending, first)
				// The second may be waiting on the winner's row: resolve
				// the first before reading it.
				resolve := func(r claimResult) {
					switch {
					case r.err == nil && r.c.Acquired():
						if winner != nil {
							t.Fatalf("%s: two waiters acquired %s", level, key)
						}
						w := r
						winner = &w
						if err := e.WriteBiz(ctx, r.tx, key, 1); err != nil {
							t.Fatal(err)
						}
						if err := e.l.Complete(ctx, r.tx, r.c, ledger.Result{Response: []byte("winner")}); err != nil {
							t.Fatal(err)
						}
						if err := r.tx.Commit(); err != nil {
							t.Fatal(err)
						}
					case r.err != nil:
						r.tx.Rollback()
						var dbe *ledger.DBError
						if !errors.Is(r.err, ledger.ErrRetryable) || !errors.As(r.err, &dbe) || dbe.Class != dialects.ClassDeadlock {
							t.Fatalf("%s: waiter failed with %v, want a retryable deadlock", level, r.err)
						}
						var me *gomysql.MySQLError
						if !errors.As(r.err, &me) || me.Number != 1213 {
							t.Fatalf("%s: %v, want MySQL error 1213", level, r.err)
						}
						deadlocks++
					default:
						r.tx.Rollback()
						if string(r.c.Result.Response) != "winner" {
							t.Fatalf("%s: waiter replayed %q, want the winner's result", level, r.c.Result.Response)
						}
					}
				}
				resolve(first)
				second := <-done
				resolve(second)
				if winner == nil {
					t.Fatalf("%s round %d: nobody acquired after the holder rolled back", level, round)
				}
				// Every attempt resolves: a retry of the victim replays.
				c, err := claimOnce(t, e, e.l, id, fp(key), "never")
				if err != nil || c.Outcome != ledger.Replay || string(c.Result.Response) != "winner" {
					t.Fatalf("%s: retry: %+v %v, want replay of the winner", level, c, err)
				}
				if n := e.BizRows(t, key); n != 1 {
					t.Fatalf("%s: %d business rows, want 1", level, n)
				}
			}
		}
		t.Logf("%d of %d rounds answered one waiter with deadlock 1213", deadlocks, rounds*len(mysqlLevels))
		if deadlocks == 0 {
			t.Fatalf("no round saw InnoDB's documented 1213: the test no longer exercises the deadlock path")
		}
	})
}

// Under REPEATABLE READ a transaction that read anything before claiming
// reads from that first snapshot: a plain SELECT misses a row committed
// since. The claim's locking read-back must still return the committed
// row (replay), never "absent".
func TestMySQLPriorReadRepeatableRead(t *testing.T) {
	t.Parallel()
	forEachMySQL(t, 8, func(t *testing.T, e *env) {
		ctx := context.Background()
		tbl := e.Dialect.QuoteIdent(e.Table)

		// Committed before the claim.
		id := testdb.ID(t, "tenant-a", method, "prior-read")
		b, err := e.DB.BeginTx(ctx, &sql.TxOptions{Isolation: sql.LevelRepeatableRead})
		if err != nil {
			t.Fatal(err)
		}
		defer b.Rollback()
		var n int
		if err := b.QueryRowContext(ctx, "SELECT COUNT(*) FROM "+tbl).Scan(&n); err != nil {
			t.Fatal(err)
		}
		if _, err := claimOnce(t, e, e.l, id, fp("p"), "A's result"); err != nil {
			t.Fatal(err)
		}
		idb := id.ID()
		if err := b.QueryRowContext(ctx, "SELECT COUNT(*) FROM "+tbl+" WHERE id = ?", idb[:]).Scan(&n); err != nil || n != 0 {
			t.Fatalf("plain SELECT in the old snapshot saw %d rows (%v): the trap this test pins is gone", n, err)
		}
		if _, err := e.l.Lookup(ctx, b, id); !errors.Is(err, ledger.ErrNotFound) {
			t.Fatalf("Lookup (a plain read) in the old snapshot: %v, want ErrNotFound", err)
		}
		c, err := e.l.Claim(ctx, b, ledger.ClaimRequest{Identity: id, Fingerprint: fp("p")})
		if err != nil || c.Outcome != ledger.Replay || string(c.Result.Response) != "A's result" {
			t.Fatalf("claim after a prior read: %+v %v, want replay of A's result", c, err)
		}
		if err := b.Commit(); err != nil {
			t.Fatal(err)
		}

		// Read first, then wait on a holder that commits.
		id2 := testdb.ID(t, "tenant-a", method, "prior-read-wait")
		b2, err := e.DB.BeginTx(ctx, &sql.TxOptions{Isolation: sql.LevelRepeatableRead})
		if err != nil {
			t.Fatal(err)
		}
		defer b2.Rollback()
		if err := b2.QueryRowContext(ctx, "SELECT COUNT(*) FROM "+tbl).Scan(&n); err != nil {
			t.Fatal(err)
		}
		a, err := e.DB.BeginTx(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		defer a.Rollback()
		ca, err := e.l.Claim(ctx, a, ledger.ClaimRequest{Identity: id2, Fingerprint: fp("w")})
		if err != nil || !ca.Acquired() {
			t.Fatalf("A: %+v %v", ca, err)
		}
		if err := e.l.Complete(ctx, a, ca, ledger.Result{Response: []byte("A2")}); err != nil {
			t.Fatal(err)
		}
		done := make(chan claimResult, 1)
		returned := make(chan struct{})
		go func() {
			defer close(returned)
			c, err := e.l.Claim(ctx, b2, ledger.ClaimRequest{Identity: id2, Fingerprint: fp("w")})
			done <- claimResult{c: c, err: err}
		}()
		testdb.WaitBlocked(t, e.DB, e.Dialect, testdb.SessionID(t, e.Dialect, a), 1, returned)
		if err := a.Commit(); err != nil {
			t.Fatal(err)
		}
		r := <-done
		if r.err != nil || r.c.Outcome != ledger.Replay || string(r.c.Result.Response) != "A2" {
			t.Fatalf("claim after a prior read and a wait: %+v %v, want replay of A2", r.c, r.err)
		}
	})
}

// With clientFoundRows=true, MySQL reports matched rather than changed
// rows. The ledger decides by rows affected only for TakeOver and
// Complete, whose UPDATEs always change the row they match, so the answer
// is the same; ownership of a new claim is told by the INSERT's 1062,
// never by a count.
func TestMySQLClientFoundRows(t *testing.T) {
	t.Parallel()
	for _, tg := range testdb.Targets() {
		if tg.Family() != "mysql" {
			continue
		}
		t.Run(tg.Name, func(t *testing.T) {
			testdb.Parallel(t, "mysql", 4)
			db := testdb.OpenMySQL(func(c *gomysql.Config) { c.ClientFoundRows = true })(t, 4)
			e := newEnv(t, tg.Name, tg.Dialect, db)
			ctx := context.Background()

			// The option is really on: a no-op UPDATE reports its matched row.
			if _, err := db.ExecContext(ctx, "INSERT INTO "+e.Biz+" (k, worker) VALUES ('found', 1)"); err != nil {
				t.Fatal(err)
			}
			res, err := db.ExecContext(ctx, "UPDATE "+e.Biz+" SET worker = 1 WHERE k = 'found'")
			if err != nil {
				t.Fatal(err)
			}
			if n, _ := res.RowsAffected(); n != 1 {
				t.Fatalf("no-op UPDATE affected %d rows with clientFoundRows=true, want 1 (matched)", n)
			}

			id := testdb.ID(t, "tenant-a", method, "found-rows")
			c, err := claimOnce(t, e, e.l, id, fp("f"), "first")
			if err != nil || !c.Acquired() {
				t.Fatalf("first claim: %+v %v, want acquired", c, err)
			}
			c, err = claimOnce(t, e, e.l, id, fp("f"), "never")
			if err != nil || c.Outcome != ledger.Replay || string(c.Result.Response) != "first" {
				t.Fatalf("second claim: %+v %v, want replay", c, err)
			}

			// Completing twice: the second UPDATE matches nothing.
			tx, err := db.BeginTx(ctx, nil)
			if err != nil {
				t.Fatal(err)
			}
			defer tx.Rollback()
			c2, err := e.l.Claim(ctx, tx, ledger.ClaimRequest{Identity: testdb.ID(t, "tenant-a", method, "found-rows-2"), Fingerprint: fp("g")})
			if err != nil || !c2.Acquired() {
				t.Fatal(c2, err)
			}
			if err := e.l.Complete(ctx, tx, c2, ledger.Result{Response: []byte("x")}); err != nil {
				t.Fatal(err)
			}
			if err := e.l.Complete(ctx, tx, c2, ledger.Result{Response: []byte("x")}); !errors.Is(err, ledger.ErrNotAcquired) {
				t.Fatalf("second complete: %v, want ErrNotAcquired", err)
			}
			if err := tx.Commit(); err != nil {
				t.Fatal(err)
			}

			// Re-acquiring an expired entry, and not re-acquiring a live one.
			t0 := time.Now().Add(-3 * time.Hour)
			old := e.store(t, ledger.WithRetention(time.Hour), ledger.WithClock(func() time.Time { return t0 }))
			exp := testdb.ID(t, "tenant-a", method, "found-rows-expired")
			if _, err := claimOnce(t, e, old, exp, fp("old"), "old"); err != nil {
				t.Fatal(err)
			}
			c3, err := claimOnce(t, e, e.l, exp, fp("new"), "new")
			if err != nil || !c3.Acquired() {
				t.Fatalf("claim of expired entry: %+v %v, want acquired", c3, err)
			}
			c4, err := claimOnce(t, e, e.l, exp, fp("new"), "never")
			if err != nil || c4.Outcome != ledger.Replay || string(c4.Result.Response) != "new" {
				t.Fatalf("claim after re-acquire: %+v %v, want replay of new", c4, err)
			}
		})
	}
}

// Identity columns compare bytes: callers that differ only by letter case
// or trailing spaces get independent entries, and the stored caller
// matches only itself.
func TestMySQLCallerBytes(t *testing.T) {
	t.Parallel()
	forEachMySQL(t, 4, func(t *testing.T, e *env) {
		callers := []string{"tenant-a", "Tenant-A", "TENANT-A", "tenant-a ", "tenant-a  "}
		for i, caller := range callers {
			c, err := claimOnce(t, e, e.l, testdb.ID(t, caller, method, "same-key"), fp("req"), fmt.Sprintf("result-%d", i))
			if err != nil || !c.Acquired() {
				t.Fatalf("caller %q: %+v %v, want acquired (independent entry)", caller, c, err)
			}
		}
		for i, caller := range callers {
			c, err := claimOnce(t, e, e.l, testdb.ID(t, caller, method, "same-key"), fp("req"), "never")
			if err != nil || c.Outcome != ledger.Replay || string(c.Result.Response) != fmt.Sprintf("result-%d", i) {
				t.Fatalf("caller %q: %+v %v, want its own result", caller, c, err)
			}
			if n := e.Count(t, "SELECT COUNT(*) FROM "+e.Dialect.QuoteIdent(e.Table)+" WHERE caller = ?", caller); n != 1 {
				t.Fatalf("caller %q matches %d stored callers, want 1 (byte comparison)", caller, n)
			}
		}
		if n := e.LedgerRows(t); n != len(callers) {
			t.Fatalf("%d rows, want %d", n, len(callers))
		}
		// Methods differing by case are distinct too.
		c, err := claimOnce(t, e, e.l, testdb.ID(t, "tenant-a", "/pay.v1.Payments/transfer", "same-key"), fp("req"), "lower")
		if err != nil || !c.Acquired() {
			t.Fatalf("method differing by case: %+v %v, want acquired", c, err)
		}
	})
}

// Lock wait timeout 1205 maps to ErrInProgress and rolls back only the
// statement: the transaction's earlier write is still there and commits
// (InnoDB with innodb_rollback_on_timeout=OFF, its default, and TiDB's
// pessimistic transactions).
func TestMySQLLockWaitTimeout(t *testing.T) {
	t.Parallel()
	forEachMySQL(t, 4, func(t *testing.T, e *env) {
		ctx := context.Background()
		id := testdb.ID(t, "tenant-a", method, "lock-wait")
		a, err := e.DB.BeginTx(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		defer a.Rollback()
		if c, err := e.l.Claim(ctx, a, ledger.ClaimRequest{Identity: id, Fingerprint: fp("l")}); err != nil || !c.Acquired() {
			t.Fatalf("A: %+v %v", c, err)
		}
		conn := sessionLockWait(t, e.DB, 1)
		b, err := conn.BeginTx(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		defer b.Rollback()
		if err := e.WriteBiz(ctx, b, "before-timeout", 1); err != nil {
			t.Fatal(err)
		}
		start := time.Now()
		_, err = e.l.Claim(ctx, b, ledger.ClaimRequest{Identity: id, Fingerprint: fp("l")})
		took := time.Since(start)
		if !errors.Is(err, ledger.ErrInProgress) || errors.Is(err, ledger.ErrRetryable) {
			t.Fatalf("claim: %v, want ErrInProgress (and not retryable)", err)
		}
		var me *gomysql.MySQLError
		if !errors.As(err, &me) || me.Number != 1205 {
			t.Fatalf("claim: %v, want MySQL error 1205", err)
		}
		if took < 900*time.Millisecond || took > 10*time.Second {
			t.Fatalf("timed out after %v with innodb_lock_wait_timeout=1", took)
		}
		var n int
		if err := b.QueryRowContext(ctx, "SELECT COUNT(*) FROM "+e.Biz+" WHERE k = 'before-timeout'").Scan(&n); err != nil || n != 1 {
			t.Fatalf("the earlier write is gone after 1205: %d %v", n, err)
		}
		if err := b.Commit(); err != nil {
			t.Fatalf("commit after 1205: %v", err)
		}
		if n := e.BizRows(t, "before-timeout"); n != 1 {
			t.Fatalf("%d rows committed, want 1", n)
		}
	})
}

// After a 1062, InnoDB holds a shared lock on the duplicate row until the
// claiming transaction ends, so the delete race that PostgreSQL must loop
// over cannot happen here: a DELETE from another session waits (and with a
// 1 s bound times out), and the claim replays.
func TestMySQLDeleteBlockedAfterConflict(t *testing.T) {
	t.Parallel()
	forEachMySQL(t, 4, func(t *testing.T, e *env) {
		testdb.SkipOnTiDB(t, e.Dialect, "InnoDB's 1062 leaves a shared lock on the duplicate row; TiDB's leaves none (its read-back, FOR UPDATE, locks the row instead)")
		conn := sessionLockWait(t, e.DB, 1)
		for _, level := range mysqlLevels {
			id := testdb.ID(t, "tenant-a", method, "delete-blocked-"+level.String())
			if _, err := claimOnce(t, e, e.l, id, fp("d"), "old"); err != nil {
				t.Fatal(err)
			}
			l := e.store(t)
			var delErr error
			ledger.SetAfterConflict(l, func() {
				idb := id.ID()
				_, delErr = conn.ExecContext(context.Background(), "DELETE FROM "+e.Dialect.QuoteIdent(e.Table)+" WHERE id = ?", idb[:])
			})
			ctx := context.Background()
			tx, err := e.DB.BeginTx(ctx, &sql.TxOptions{Isolation: level})
			if err != nil {
				t.Fatal(err)
			}
			defer tx.Rollback()
			c, err := l.Claim(ctx, tx, ledger.ClaimRequest{Identity: id, Fingerprint: fp("d")})
			tx.Rollback()
			if err != nil || c.Outcome != ledger.Replay || string(c.Result.Response) != "old" {
				t.Fatalf("%s: claim: %+v %v, want replay", level, c, err)
			}
			if e.Dialect.Classify(delErr) != dialects.ClassLockTimeout {
				t.Fatalf("%s: DELETE inside the claim's window: %v, want a lock wait timeout", level, delErr)
			}
		}
	})
}

var errAbortAttempt = errors.New("test: owner rolls back")

// TestMySQLHerdWithRollbacks: 16 transactions race on each key and the
// first two owners of every key roll back, so InnoDB repeatedly sees a
// holder roll back with many waiters and answers some with deadlock 1213.
// Every attempt still resolves: exactly one committed owner and one
// business row per key, everyone else replays its result.
func TestMySQLHerdWithRollbacks(t *testing.T) {
	t.Parallel()
	const workers, aborts = 16, 2
	keys := 30
	if testing.Short() {
		keys = 5
	}
	// One more connection than workers: the owner reads InnoDB's lock waits
	// while every worker holds a transaction.
	forEachMySQL(t, workers+1, func(t *testing.T, e *env) {
		for _, level := range mysqlLevels {
			t.Run(level.String(), func(t *testing.T) {
				ctx := context.Background()
				var retries, deadlocks atomic.Int64
				for k := 0; k < keys; k++ {
					key := fmt.Sprintf("%s-abort-herd-%d", level, k)
					id := testdb.ID(t, "tenant-a", method, key)
					var aborted, committed, replayed atomic.Int64
					var wg sync.WaitGroup
					start := make(chan struct{})
					errs := make(chan error, workers)
					for w := 0; w < workers; w++ {
						wg.Add(1)
						go func() {
							defer wg.Done()
							<-start
							for {
								var acquired bool
								err := e.unit(ctx, level, &retries, func(tx *sql.Tx) error {
									c, err := e.l.Claim(ctx, tx, ledger.ClaimRequest{Identity: id, Fingerprint: fp(key)})
									var dbe *ledger.DBError
									if errors.As(err, &dbe) && dbe.Class == dialects.ClassDeadlock {
										deadlocks.Add(1)
									}
									if err != nil {
										return err
									}
									if !c.Acquired() {
										if string(c.Result.Response) != key {
											return fmt.Errorf("replayed %q", c.Result.Response)
										}
										acquired = false
										return nil
									}
									if err := e.WriteBiz(ctx, tx, key, w); err != nil {
										return err
									}
									if aborted.Add(1) <= aborts {
										// Let the others queue up behind this owner, as
										// InnoDB shows, then roll back under them.
										sid, err := e.Dialect.(dialectkit.Sessions).SessionID(ctx, tx)
										if err != nil {
											return err
										}
										if err := testdb.AwaitBlocked(ctx, e.DB, e.Dialect, sid, workers-1, 20*time.Second); err != nil {
											return err
										}
										return errAbortAttempt
									}
									acquired = true
									return e.l.Complete(ctx, tx, c, ledger.Result{Response: []byte(key)})
								})
								if errors.Is(err, errAbortAttempt) {
									continue
								}
								if err != nil {
									errs <- err
								} else if acquired {
									committed.Add(1)
								} else {
									replayed.Add(1)
								}
								return
							}
						}()
					}
					close(start)
					wg.Wait()
					close(errs)
					for err := range errs {
						t.Fatalf("key %s: %v", key, err)
					}
					if committed.Load() != 1 || replayed.Load() != workers-1 || e.BizRows(t, key) != 1 {
						t.Fatalf("key %s: %d committed owners, %d replays, %d business rows; want 1, %d, 1",
							key, committed.Load(), replayed.Load(), e.BizRows(t, key), workers-1)
					}
				}
				t.Logf("%s: %d keys × %d workers, %d owners rolled back per key: %d deadlocks (1213), %d whole-transaction retries",
					level, keys, workers, aborts, deadlocks.Load(), retries.Load())
				// InnoDB answers some waiters of a holder that rolls back
				// with 1213; TiDB need not (every key above still had one
				// owner, one row and the replays).
				if deadlocks.Load() == 0 && !testdb.TiDB(e.Dialect) {
					t.Fatalf("no deadlock seen: the test no longer exercises 1213")
				}
			})
		}
	})
}

// TestMySQLBoundLockWaitClaim: the dialect's LockWaiter bounds a claim's
// wait on a held key (ErrInProgress after about a second, not 50 s) and
// release restores the connection's setting afterwards.
func TestMySQLBoundLockWaitClaim(t *testing.T) {
	t.Parallel()
	forEachMySQL(t, 4, func(t *testing.T, e *env) {
		ctx := context.Background()
		lw, ok := e.Dialect.(dialects.LockWaiter)
		if !ok {
			t.Fatal("the MySQL dialect is not a dialects.LockWaiter")
		}
		id := testdb.ID(t, "tenant-a", method, "bounded")
		a, err := e.DB.BeginTx(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		defer a.Rollback()
		if c, err := e.l.Claim(ctx, a, ledger.ClaimRequest{Identity: id, Fingerprint: fp("b")}); err != nil || !c.Acquired() {
			t.Fatalf("A: %+v %v", c, err)
		}
		var before int64
		if err := e.DB.QueryRowContext(ctx, "SELECT @@SESSION.innodb_lock_wait_timeout").Scan(&before); err != nil {
			t.Fatal(err)
		}
		b, release, err := lw.BeginBounded(ctx, e.DB, nil, 200*time.Millisecond)
		if err != nil {
			t.Fatal(err)
		}
		sid := testdb.SessionID(t, e.Dialect, b)
		start := time.Now()
		_, err = e.l.Claim(ctx, b, ledger.ClaimRequest{Identity: id, Fingerprint: fp("b")})
		took := time.Since(start)
		b.Rollback()
		release()
		if !errors.Is(err, ledger.ErrInProgress) || took > 10*time.Second {
			t.Fatalf("bounded claim: %v after %v, want ErrInProgress after about 1 s", err, took)
		}
		a.Rollback()
		conn, ok := testdb.PooledConns(t, e.DB, e.Dialect)[sid]
		if !ok {
			t.Fatalf("the bounded session %d did not come back to the pool", sid)
		}
		var after int64
		if err := conn.QueryRowContext(ctx, "SELECT @@SESSION.innodb_lock_wait_timeout").Scan(&after); err != nil || after != before {
			t.Fatalf("after release: %d %v, want %d", after, err, before)
		}
	})
}

// TestInnoDBDialectOnTiDB: the MySQL/MariaDB dialect, mysql.New(), on the
// MySQL target's server. On MySQL and MariaDB a claim of a committed
// entry replays. On TiDB it fails with an error that names the dialect to
// use (mysql.ErrTiDBServer: mysql.NewTiDB(), mysql.Detect), not with
// TiDB's bare 1235, and leaves the transaction to roll back.
func TestInnoDBDialectOnTiDB(t *testing.T) {
	t.Parallel()
	forEachMySQL(t, 2, func(t *testing.T, e *env) {
		innodb, err := ledger.New(mysql.New(), ledger.WithTable(e.Table))
		if err != nil {
			t.Fatal(err)
		}
		id := testdb.ID(t, "tenant-a", method, "innodb-dialect")
		if c, err := claimOnce(t, e, innodb, id, fp("i"), "first"); err != nil || !c.Acquired() {
			t.Fatalf("first claim with mysql.New(): %+v %v, want acquired (the read-back is not needed)", c, err)
		}
		c, err := claimOnce(t, e, innodb, id, fp("i"), "never")
		if !testdb.TiDB(e.Dialect) {
			if err != nil || c.Outcome != ledger.Replay || string(c.Result.Response) != "first" {
				t.Fatalf("claim of a committed entry with mysql.New(): %+v %v, want replay of first", c, err)
			}
			return
		}
		var me *gomysql.MySQLError
		if !errors.Is(err, mysql.ErrTiDBServer) || !errors.As(err, &me) || me.Number != 1235 ||
			!strings.Contains(err.Error(), "mysql.NewTiDB()") || !strings.Contains(err.Error(), "mysql.Detect") {
			t.Fatalf("claim of a committed entry with mysql.New() on TiDB: %+v %v, want mysql.ErrTiDBServer wrapping error 1235", c, err)
		}
		// The TiDB variant, on the same entry, replays.
		if c, err := claimOnce(t, e, e.l, id, fp("i"), "never"); err != nil || c.Outcome != ledger.Replay || string(c.Result.Response) != "first" {
			t.Fatalf("claim with the detected dialect: %+v %v, want replay of first", c, err)
		}
	})
}
