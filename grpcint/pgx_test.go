package grpcint_test

import (
	"context"
	"database/sql"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/opledger/opledger/dialects/postgres"
	"github.com/opledger/opledger/grpcint"
	"github.com/opledger/opledger/internal/harness/throwaway"
	"github.com/opledger/opledger/internal/testkit/testdb"
	"github.com/opledger/opledger/internal/testkit/wallet"
	"github.com/opledger/opledger/internal/testkit/wallet/walletpb"
	"github.com/opledger/opledger/keyed"
	"github.com/opledger/opledger/ledger"
	"github.com/opledger/opledger/pgxledger"
	"github.com/opledger/opledger/txmiddleware"
)

// TestPgxRoundTrips counts, on a pool of one connection that counts its
// round trips, what a keyed gRPC call costs the database on the pgx path
// (grpcint.NewServerFor on pgxledger.Transactions, the example's Deposit
// writing through its pgx.Tx): exactly the round trips of the bare
// transaction that writes the same row (BEGIN, the INSERT, COMMIT: 3), in
// both claim orders; a replay costs 2 claim first ({BEGIN, claim}, {read,
// ROLLBACK}) and 4 at commit (the work runs first: BEGIN, the INSERT,
// {record, COMMIT}, {ROLLBACK, read}); a resolve 1. It counts twice, so
// that the second pass shows that nothing a call did (a replay's failed
// batch) costs a later call a round trip, with pgx's statement cache and
// in exec mode (for a transaction pooler).
func TestPgxRoundTrips(t *testing.T) {
	testdb.Parallel(t, "postgres", 2)
	ctx := context.Background()
	for _, mode := range []struct{ name, params string }{
		{"cache", ""}, {"exec", "&default_query_exec_mode=exec"},
	} {
		t.Run(mode.name, func(t *testing.T) {
			rt := &testdb.RoundTrips{}
			pool := testdb.OpenPgx(t, testdb.PgxConfig(t, mode.params, 1, rt))
			db := testdb.SQLDB(t, pool)
			table, biz := newTables(t, db, postgres.New())
			store, err := pgxledger.New(ledger.WithTable(table))
			if err != nil {
				t.Fatal(err)
			}
			insert := "INSERT INTO " + postgres.New().QuoteIdent(biz) +
				" (id, account, amount, reference) VALUES ($1, $2, $3, $4)"
			var bareID int64
			bare := func() error {
				tx, err := pool.Begin(ctx)
				if err != nil {
					return err
				}
				defer tx.Rollback(ctx)
				bareID++
				if _, err := tx.Exec(ctx, insert, bareID, "a", 1, "bare"); err != nil {
					return err
				}
				return tx.Commit(ctx)
			}
			for _, order := range []struct {
				name   string
				opts   []keyed.ServerOption
				replay int
			}{
				{"claim first", nil, 2},
				{"claim at commit", []keyed.ServerOption{keyed.WithClaimAtCommit(walletpb.DepositMethod)}, 4},
			} {
				t.Run(order.name, func(t *testing.T) {
					cat, err := wallet.Catalog()
					if err != nil {
						t.Fatal(err)
					}
					s, err := grpcint.NewServerFor(pgxledger.Transactions(pool, store), cat,
						grpcint.CallerFromTrustedHeader(callerHeader), order.opts...)
					if err != nil {
						t.Fatal(err)
					}
					e := serveKit(t, db, postgres.New(), biz, s, nil)
					call := func(key, ref string) (*walletpb.DepositReply, int, error) {
						rt.Reset()
						r, err := e.pc.Deposit(as(ctx, "alice", key), deposit(ref, 1))
						return r, rt.Count(), err
					}
					// Once each, so that pgx has prepared every statement on
					// the connection: the counts are the steady state.
					if err := bare(); err != nil {
						t.Fatal(err)
					}
					warm := "warm-" + order.name
					for range 2 {
						if _, _, err := call(warm, warm); err != nil {
							t.Fatal(err)
						}
					}
					resolve := func(key string) (*walletpb.DepositReply, int, error) {
						rt.Reset()
						var reply walletpb.DepositReply
						err := grpcint.Resolve(as(ctx, "alice", ""), e.conn, walletpb.DepositMethod, key, &walletpb.DepositRequest{}, &reply)
						return &reply, rt.Count(), err
					}
					if _, _, err := resolve(warm); err != nil {
						t.Fatal(err)
					}
					for pass := range 2 {
						rt.Reset()
						if err := bare(); err != nil {
							t.Fatal(err)
						}
						want := rt.Count()
						if want != 3 {
							t.Errorf("the bare transaction: %d round trips, want 3", want)
						}
						key, ref := fmt.Sprintf("k-%s-%d", order.name, pass), fmt.Sprintf("r-%s-%d", order.name, pass)
						first, n, err := call(key, ref)
						if err != nil {
							t.Fatal(err)
						}
						t.Logf("pass %d: bare %d, keyed call %d round trips", pass, want, n)
						if n != want {
							t.Errorf("pass %d: a keyed call: %d round trips, want the bare transaction's %d", pass, n, want)
						}
						again, n, err := call(key, ref)
						if err != nil || again.GetDepositId() != first.GetDepositId() {
							t.Fatalf("replay: %v, %v; want deposit %d", again, err, first.GetDepositId())
						}
						t.Logf("pass %d: replay %d round trips", pass, n)
						if n != order.replay {
							t.Errorf("pass %d: a replay: %d round trips, want %d", pass, n, order.replay)
						}
						if order.name == "claim first" && n > 2 {
							t.Errorf("a replay claim first costs %d round trips, more than 2", n)
						}
						reply, n, err := resolve(key)
						if err != nil || reply.GetDepositId() != first.GetDepositId() {
							t.Fatalf("resolve: %v, %v", reply, err)
						}
						if n != 1 {
							t.Errorf("pass %d: a resolve: %d round trips, want 1", pass, n)
						}
						if rows := e.rows(t, ref); rows != 1 {
							t.Errorf("%d deposits with reference %s, want 1", rows, ref)
						}
					}
					if st := s.Stats(); st.Executed != 3 || st.Replayed != 3 {
						t.Errorf("stats %+v, want 3 executed and 3 replayed", st)
					}
				})
			}
			if d := rt.Dials(); d != 1 {
				t.Errorf("%d connections dialled, want the pool's one", d)
			}
		})
	}
}

// TestPgxHerd: 64 concurrent keyed gRPC calls per key, 16 keys, on the
// pgx path (grpcint.NewServerFor on pgxledger.Transactions, a pool of 16)
// at READ COMMITTED, REPEATABLE READ and SERIALIZABLE, claim first and at
// commit, against PostgreSQL and behind a throw-away PgBouncer in
// transaction mode (pgx in exec mode, 16 server connections): every call
// gets the one committed deposit, one row per key, one execution per key
// and the other 63 calls replayed. (pgxconformance's TestHerd runs the
// ledger's herd over the pgx path at 50 keys; this one adds the gRPC
// transport on top.)
func TestPgxHerd(t *testing.T) {
	const callers = 64
	keys := 16
	if testing.Short() {
		keys = 4
	}
	herd := func(t *testing.T, pool *pgxpool.Pool, direct *sql.DB) {
		ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
		defer cancel()
		cat, err := wallet.Catalog()
		if err != nil {
			t.Fatal(err)
		}
		for _, level := range []struct {
			name string
			l    sql.IsolationLevel
		}{
			{"read_committed", sql.LevelReadCommitted}, {"repeatable_read", sql.LevelRepeatableRead}, {"serializable", sql.LevelSerializable},
		} {
			for _, order := range []struct {
				name string
				opts []keyed.ServerOption
			}{
				{"claim-first", nil}, {"claim-at-commit", []keyed.ServerOption{keyed.WithClaimAtCommit(walletpb.DepositMethod)}},
			} {
				t.Run(level.name+"/"+order.name, func(t *testing.T) {
					table, biz := newTables(t, direct, postgres.New())
					store, err := pgxledger.New(ledger.WithTable(table))
					if err != nil {
						t.Fatal(err)
					}
					s, err := grpcint.NewServerFor(pgxledger.Transactions(pool, store), cat, grpcint.CallerFromTrustedHeader(callerHeader),
						append([]keyed.ServerOption{keyed.WithLockWait(10 * time.Second),
							keyed.WithTxOptions(txmiddleware.WithIsolation(level.l))}, order.opts...)...)
					if err != nil {
						t.Fatal(err)
					}
					e := serveKit(t, direct, postgres.New(), biz, s, nil)
					for k := range keys {
						ref := fmt.Sprintf("herd-%d", k)
						var wg sync.WaitGroup
						start := make(chan struct{})
						ids := make([]int64, callers)
						errs := make([]error, callers)
						for w := range callers {
							wg.Add(1)
							go func() {
								defer wg.Done()
								<-start
								r, err := e.pc.Deposit(as(ctx, "alice", ref), deposit(ref, 1))
								ids[w], errs[w] = r.GetDepositId(), err
							}()
						}
						close(start)
						wg.Wait()
						for w := range callers {
							if errs[w] != nil || ids[w] != ids[0] {
								t.Fatalf("key %s call %d: deposit %d, %v; want deposit %d", ref, w, ids[w], errs[w], ids[0])
							}
						}
						if n := e.rows(t, ref); n != 1 {
							t.Fatalf("key %s: %d deposits", ref, n)
						}
					}
					st := s.Stats()
					if st.Executed != int64(keys) || st.Replayed != int64(keys*(callers-1)) {
						t.Errorf("stats %+v: want %d executed and %d replayed", st, keys, keys*(callers-1))
					}
					t.Logf("%d keys × %d concurrent calls: %+v", keys, callers, st)
				})
			}
		}
	}
	t.Run("postgres", func(t *testing.T) {
		testdb.Parallel(t, "postgres", 16)
		pool := testdb.OpenPgx(t, testdb.PgxConfig(t, "", 16, nil))
		herd(t, pool, testdb.SQLDB(t, pool))
	})
	t.Run("pgbouncer", func(t *testing.T) {
		t.Parallel()
		pg := throwaway.Postgres(t)
		pb := throwaway.PgBouncer(t, pg, throwaway.PgBouncerOptions{PoolSize: 16})
		direct := testdb.SQLDB(t, testdb.OpenPgx(t, testdb.PgxConfigDSN(t, pg.DSN(), 4, nil))) // the migrations and the checks
		pool := testdb.OpenPgx(t, testdb.PgxConfigDSN(t, pb.DSN()+throwaway.PgxPoolerSetting, 16, nil))
		herd(t, pool, direct)
	})
}
