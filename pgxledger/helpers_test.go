package pgxledger_test

import (
	"context"
	"database/sql"
	"net/url"
	"os"
	"strconv"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/opledger/opledger/dialects/postgres"
	"github.com/opledger/opledger/internal/testkit/testdb"
	"github.com/opledger/opledger/ledger"
	"github.com/opledger/opledger/pgxledger"
)

// env is a pgx pool on the test database with a fresh ledger table
// (migrated through database/sql on the same pool), a business table and
// a Store on them.
type env struct {
	pool  *pgxpool.Pool
	db    *sql.DB // database/sql on pool: the tests' bookkeeping
	table string
	biz   string // quoted
	s     *pgxledger.Store
	rt    *testdb.RoundTrips
}

// newEnv opens a pool of maxConns whose connections count their round
// trips in e.rt.
func newEnv(t testing.TB, maxConns int, opts ...ledger.Option) *env {
	t.Helper()
	rt := &testdb.RoundTrips{}
	return newEnvOn(t, testdb.OpenPgx(t, testdb.PgxConfig(t, "", maxConns, rt)), rt, opts...)
}

// newEnvOn is newEnv on a pool of the caller's.
func newEnvOn(t testing.TB, pool *pgxpool.Pool, rt *testdb.RoundTrips, opts ...ledger.Option) *env {
	t.Helper()
	db := testdb.SQLDB(t, pool)
	table := testdb.NewTable(t, db, postgres.New())
	biz := postgres.New().QuoteIdent(table + "_biz")
	if _, err := db.Exec("CREATE TABLE " + biz + " (k VARCHAR(255) NOT NULL, worker INTEGER NOT NULL)"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Exec("DROP TABLE " + biz) })
	s, err := pgxledger.New(append([]ledger.Option{ledger.WithTable(table)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	return &env{pool: pool, db: db, table: table, biz: biz, s: s, rt: rt}
}

func (e *env) writeBiz(ctx context.Context, tx pgx.Tx, key string, worker int) error {
	_, err := tx.Exec(ctx, "INSERT INTO "+e.biz+" (k, worker) VALUES ($1, $2)", key, worker)
	return err
}

func (e *env) count(t testing.TB, query string, args ...any) int {
	t.Helper()
	var n int
	if err := e.db.QueryRow(query, args...).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

func (e *env) bizRows(t testing.TB, key string) int {
	return e.count(t, "SELECT COUNT(*) FROM "+e.biz+" WHERE k = $1", key)
}

func (e *env) ledgerRows(t testing.TB) int {
	return e.count(t, "SELECT COUNT(*) FROM "+postgres.New().QuoteIdent(e.table))
}

func req(t testing.TB, key string) ledger.ClaimRequest {
	t.Helper()
	id, err := ledger.NewIdentity("svc-a", "/pay.v1.Payments/Create", key)
	if err != nil {
		t.Fatal(err)
	}
	return ledger.ClaimRequest{Identity: id, Fingerprint: ledger.FingerprintOf([]byte("request " + key))}
}

func result(key string) ledger.Result {
	return ledger.Result{Response: []byte("done " + key), TypeName: "pay.v1.CreateResponse"}
}

func sameResult(a, b ledger.Result) bool {
	return a.Code == b.Code && a.TypeName == b.TypeName && string(a.Response) == string(b.Response)
}

func itoa(n int) string { return strconv.Itoa(n) }

// proxyDSN is the test database's DSN with addr (host:port) in place of
// its server's.
func proxyDSN(t testing.TB, addr string) string {
	t.Helper()
	u, err := url.Parse(os.Getenv(testdb.EnvPostgres))
	if err != nil {
		t.Fatal(err)
	}
	u.Host = addr
	return u.String()
}
