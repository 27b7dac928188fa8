package pgxledger_test

import (
	"context"
	"database/sql"
	"fmt"
	"reflect"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/opledger/opledger/dialects/postgres"
	"github.com/opledger/opledger/internal/testkit/testdb"
	"github.com/opledger/opledger/ledger"
	"github.com/opledger/opledger/txmiddleware"
)

// TestNothingButATransaction: pgx.Tx, what Claim, Complete, Record and
// the Runner's work take, is an interface that neither a pool nor a
// connection implements, so no autocommit handle can be passed where the
// ledger needs the caller's transaction.
func TestNothingButATransaction(t *testing.T) {
	tx := reflect.TypeFor[pgx.Tx]()
	for _, typ := range []reflect.Type{
		reflect.TypeFor[*pgxpool.Pool](), reflect.TypeFor[*pgxpool.Conn](), reflect.TypeFor[*pgx.Conn](),
	} {
		if typ.Implements(tx) {
			t.Errorf("%v implements pgx.Tx: it could be passed where a transaction is required", typ)
		}
	}
	if !reflect.TypeFor[*pgxpool.Tx]().Implements(tx) {
		t.Errorf("*pgxpool.Tx does not implement pgx.Tx")
	}
}

// path is one way of running a unit of work on the pgx path, the key's
// business row written in it.
type path struct {
	name string
	// want is the round trips it costs: the bare transaction's 3 for
	// every pipelined path that commits.
	want int
	run  func(ctx context.Context, e *env, req ledger.ClaimRequest, key string) (ledger.ClaimOutcome, error)
}

var paths = []path{
	{"bare", 3, func(ctx context.Context, e *env, _ ledger.ClaimRequest, key string) (ledger.ClaimOutcome, error) {
		tx, err := e.pool.Begin(ctx)
		if err != nil {
			return 0, err
		}
		defer tx.Rollback(ctx)
		if err := e.writeBiz(ctx, tx, key, 1); err != nil {
			return 0, err
		}
		return ledger.Acquired, tx.Commit(ctx)
	}},
	// In the caller's transaction: BEGIN, claim, work, complete, COMMIT.
	{"claim first", 5, func(ctx context.Context, e *env, req ledger.ClaimRequest, key string) (ledger.ClaimOutcome, error) {
		tx, err := e.pool.Begin(ctx)
		if err != nil {
			return 0, err
		}
		defer tx.Rollback(ctx)
		c, err := e.s.Claim(ctx, tx, req)
		if err != nil || !c.Acquired() {
			return outcome(c), err
		}
		if err := e.writeBiz(ctx, tx, key, 1); err != nil {
			return 0, err
		}
		if err := e.s.Complete(ctx, tx, c, result(key)); err != nil {
			return 0, err
		}
		return c.Outcome, tx.Commit(ctx)
	}},
	// BEGIN, work, record, COMMIT.
	{"claim at commit", 4, func(ctx context.Context, e *env, req ledger.ClaimRequest, key string) (ledger.ClaimOutcome, error) {
		tx, err := e.pool.Begin(ctx)
		if err != nil {
			return 0, err
		}
		defer tx.Rollback(ctx)
		if err := e.writeBiz(ctx, tx, key, 1); err != nil {
			return 0, err
		}
		c, err := e.s.Record(ctx, tx, req, result(key))
		if err != nil || !c.Recorded() {
			return outcome(c), err
		}
		return c.Outcome, tx.Commit(ctx)
	}},
	// {BEGIN, claim}, work, {complete, COMMIT}.
	{"pipelined claim first", 3, func(ctx context.Context, e *env, req ledger.ClaimRequest, key string) (ledger.ClaimOutcome, error) {
		tx, c, err := e.s.BeginClaim(ctx, e.pool, pgx.TxOptions{}, req)
		if err != nil || !c.Acquired() {
			return outcome(c), err
		}
		if err := e.writeBiz(ctx, tx, key, 1); err != nil {
			tx.Rollback(ctx)
			return 0, err
		}
		return c.Outcome, e.s.CompleteCommit(ctx, tx, c, result(key))
	}},
	// BEGIN, work, {record, COMMIT}.
	{"pipelined claim at commit", 3, func(ctx context.Context, e *env, req ledger.ClaimRequest, key string) (ledger.ClaimOutcome, error) {
		tx, err := e.s.Begin(ctx, e.pool, pgx.TxOptions{})
		if err != nil {
			return 0, err
		}
		if err := e.writeBiz(ctx, tx, key, 1); err != nil {
			tx.Rollback(ctx)
			return 0, err
		}
		c, err := e.s.RecordCommit(ctx, tx, req, result(key))
		return outcome(c), err
	}},
}

func outcome(c *ledger.Claim) ledger.ClaimOutcome {
	if c == nil {
		return 0
	}
	return c.Outcome
}

// replays is what a retry of a completed call costs on each path: the
// claim-first paths read the stored entry and roll back without running
// the work (BEGIN, the claim, the read, ROLLBACK: 4 in the caller's
// transaction; {BEGIN, claim}, {read, ROLLBACK}: 2 pipelined); the
// claim-at-commit paths run the work first (BEGIN, work, record, read,
// ROLLBACK: 5; BEGIN, work, {record, COMMIT}, {ROLLBACK, read}: 4).
var replays = map[string]int{
	"claim first":               4,
	"claim at commit":           5,
	"pipelined claim first":     2,
	"pipelined claim at commit": 4,
}

// TestRoundTrips counts, on a connection that counts its round trips,
// what each path of a keyed unit costs, a new key and a replay of a
// completed one; the pipelined paths cost exactly the bare transaction's
// round trips (3), and their replays at most 2 claim first. It counts
// twice, so that the second pass shows that no replay (a pipelined record
// that conflicts fails its batch by design) costs a later call a round
// trip; with pgx's default statement cache and in exec mode (for a
// transaction pooler).
func TestRoundTrips(t *testing.T) {
	testdb.Parallel(t, "postgres", 2)
	for _, mode := range []struct{ name, params string }{
		{"cache", ""}, {"exec", "&default_query_exec_mode=exec"},
	} {
		t.Run(mode.name, func(t *testing.T) {
			rt := &testdb.RoundTrips{}
			e := newEnvOn(t, testdb.OpenPgx(t, testdb.PgxConfig(t, mode.params, 1, rt)), rt)
			ctx := context.Background()
			// Once each (twice: a replay too), so that pgx has prepared
			// every statement on the connection: the counts are the steady
			// state.
			for _, p := range paths {
				for _, k := range []string{"warm-" + p.name, "warm-" + p.name} {
					if _, err := p.run(ctx, e, req(t, k), k); err != nil {
						t.Fatalf("%s: warm-up: %v", p.name, err)
					}
				}
			}
			for pass := range 2 {
				for i, p := range paths {
					key := fmt.Sprintf("rt-%d-%d", pass, i)
					e.rt.Reset()
					got, err := p.run(ctx, e, req(t, key), key)
					if err != nil {
						t.Fatalf("%s: %v", p.name, err)
					}
					n := e.rt.Count()
					t.Logf("%-33s %d round trips (%v)", p.name, n, got)
					if n != p.want {
						t.Errorf("%s: %d round trips, want %d", p.name, n, p.want)
					}
					if p.name == "bare" {
						continue
					}
					if got != ledger.Acquired && got != ledger.Recorded {
						t.Errorf("%s: outcome %v, want it to acquire or record", p.name, got)
					}
					e.rt.Reset()
					got, err = p.run(ctx, e, req(t, key), key+"-again")
					if err != nil {
						t.Fatalf("%s replay: %v", p.name, err)
					}
					n = e.rt.Count()
					t.Logf("%-33s %d round trips (%v)", p.name+" replay", n, got)
					if got != ledger.Replay || n != replays[p.name] {
						t.Errorf("%s replay: %v in %d round trips, want a replay in %d", p.name, got, n, replays[p.name])
					}
					if rows := e.bizRows(t, key+"-again"); rows != 0 {
						t.Errorf("%s replay: the work's row committed", p.name)
					}
				}
			}
			if d := e.rt.Dials(); d != 1 {
				t.Errorf("%d connections dialled, want the pool's one", d)
			}
		})
	}
}

// TestSQLRoundTrips counts the round trips of the database/sql paths
// (pgx's stdlib driver, on a connection that counts them), to set beside
// the pgx paths': every statement is one, so a keyed call claim first
// costs the bare transaction's 3 plus 2, at commit plus 1, in the
// caller's transaction and through txmiddleware's Runner alike.
func TestSQLRoundTrips(t *testing.T) {
	testdb.Parallel(t, "postgres", 1)
	e := newEnv(t, 1)
	ctx := context.Background()
	store, err := ledger.New(postgres.New(), ledger.WithTable(e.table))
	if err != nil {
		t.Fatal(err)
	}
	first, err := txmiddleware.New(e.db, store)
	if err != nil {
		t.Fatal(err)
	}
	atCommit, err := txmiddleware.New(e.db, store, txmiddleware.WithClaimAtCommit())
	if err != nil {
		t.Fatal(err)
	}
	work := func(key string) txmiddleware.Work {
		return func(ctx context.Context, tx *sql.Tx) (ledger.Result, error) {
			_, err := tx.ExecContext(ctx, "INSERT INTO "+e.biz+" (k, worker) VALUES ($1, $2)", key, 1)
			return result(key), err
		}
	}
	sqlPaths := []struct {
		name           string
		want, wantRepl int
		run            func(key string) (ledger.ClaimOutcome, error)
	}{
		{"bare", 3, 0, func(key string) (ledger.ClaimOutcome, error) {
			return ledger.Acquired, testdb.InTx(ctx, e.db, func(tx *sql.Tx) error { _, err := work(key)(ctx, tx); return err })
		}},
		{"claim first", 5, 4, func(key string) (ledger.ClaimOutcome, error) {
			var o ledger.ClaimOutcome
			err := testdb.InTx(ctx, e.db, func(tx *sql.Tx) error {
				c, err := store.Claim(ctx, tx, req(t, key))
				if err != nil || !c.Acquired() {
					o = outcome(c)
					return err
				}
				if _, err := work(key)(ctx, tx); err != nil {
					return err
				}
				o = c.Outcome
				return store.Complete(ctx, tx, c, result(key))
			})
			return o, err
		}},
		{"runner", 5, 4, func(key string) (ledger.ClaimOutcome, error) {
			out, err := first.Run(ctx, req(t, key), work(key+"-w"))
			return runOutcome(out), err
		}},
		{"runner at commit", 4, 5, func(key string) (ledger.ClaimOutcome, error) {
			out, err := atCommit.Run(ctx, req(t, key), work(key+"-w"))
			return runOutcome(out), err
		}},
	}
	for _, p := range sqlPaths {
		for _, k := range []string{"warm-" + p.name, "warm-" + p.name} {
			if _, err := p.run(k); err != nil {
				t.Fatalf("%s: warm-up: %v", p.name, err)
			}
		}
	}
	for _, p := range sqlPaths {
		key := "sqlrt-" + p.name
		e.rt.Reset()
		if _, err := p.run(key); err != nil {
			t.Fatal(err)
		}
		n := e.rt.Count()
		t.Logf("database/sql %-18s %d round trips", p.name, n)
		if n != p.want {
			t.Errorf("database/sql %s: %d round trips, want %d", p.name, n, p.want)
		}
		if p.wantRepl == 0 {
			continue
		}
		e.rt.Reset()
		got, err := p.run(key)
		n = e.rt.Count()
		t.Logf("database/sql %-18s %d round trips (%v)", p.name+" replay", n, got)
		if err != nil || got != ledger.Replay || n != p.wantRepl {
			t.Errorf("database/sql %s replay: %v %v in %d round trips, want a replay in %d", p.name, got, err, n, p.wantRepl)
		}
	}
}

func runOutcome(out txmiddleware.RunResult) ledger.ClaimOutcome {
	switch {
	case out.Replayed:
		return ledger.Replay
	case out.Executed:
		return ledger.Acquired
	}
	return 0
}
