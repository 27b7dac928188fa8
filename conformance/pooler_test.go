package conformance_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/opledger/opledger/conformance"
	"github.com/opledger/opledger/dialects/mysql"
	"github.com/opledger/opledger/dialects/postgres"
	"github.com/opledger/opledger/internal/harness/throwaway"
	"github.com/opledger/opledger/internal/testkit/testdb"
)

// poolerDrivers are the two PostgreSQL drivers with the DSN setting each
// needs behind PgBouncer in transaction mode (docs/poolers.md).
var poolerDrivers = []struct{ name, driver, params string }{
	{"pq", "postgres", "&binary_parameters=yes"},
	{"pgx", "pgx", "&default_query_exec_mode=exec"},
}

// TestStorePgBouncer: the kit's ledger passes the whole suite through a
// PgBouncer in transaction pooling mode (4 server connections for the
// suite's 20 clients) with either driver, configured as docs/poolers.md
// says.
func TestStorePgBouncer(t *testing.T) {
	t.Parallel()
	pg := throwaway.Postgres(t)
	pb := throwaway.PgBouncer(t, pg, throwaway.PgBouncerOptions{PoolSize: 4})
	for _, c := range poolerDrivers {
		t.Run(c.name, func(t *testing.T) {
			db := testdb.OpenDSN(t, c.driver, pb.DSN()+c.params, conformance.DefaultConcurrency+4)
			conformance.Run(t, conformance.StoreTarget("pgbouncer/"+c.name, db, postgres.New()), conformance.WithKeys(10))
		})
	}
}

// TestPgBouncerMisconfigured: with the drivers' defaults (pgx's statement
// cache, lib/pq's separate Parse round trip) the suite stops before its
// cases with the documented error, instead of failing them at random.
func TestPgBouncerMisconfigured(t *testing.T) {
	t.Parallel()
	pg := throwaway.Postgres(t)
	pb := throwaway.PgBouncer(t, pg, throwaway.PgBouncerOptions{PoolSize: 4})
	for _, driver := range []string{"postgres", "pgx"} {
		t.Run(driver, func(t *testing.T) {
			db := testdb.OpenDSN(t, driver, pb.DSN(), conformance.DefaultConcurrency+4)
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			rep := conformance.Check(ctx, conformance.StoreTarget("pgbouncer/"+driver, db, postgres.New()), conformance.WithKeys(5))
			if len(rep.Results) != 1 || rep.Results[0].Name != "target" || rep.Results[0].Verdict != conformance.Fail {
				t.Fatalf("want one failed target result, got %+v", rep.Results)
			}
			msg := strings.Join(rep.Results[0].Messages, "\n")
			if !strings.Contains(msg, postgres.ErrStatementPooling.Error()) {
				t.Fatalf("message does not explain the setting:\n%s", msg)
			}
			t.Logf("%s", msg)
		})
	}
}

// TestStoreThrowawayMariaDB: the suite passes on a MariaDB of its own,
// started for the test (as `opledger chaos` starts it).
func TestStoreThrowawayMariaDB(t *testing.T) {
	t.Parallel()
	m := throwaway.MariaDB(t)
	cfg, err := mysql.Config(m.DSN())
	if err != nil {
		t.Fatal(err)
	}
	db := testdb.OpenDSN(t, "mysql", cfg.FormatDSN(), conformance.DefaultConcurrency+4)
	conformance.Run(t, conformance.StoreTarget("mariadb/throwaway", db, mysql.New()), conformance.WithKeys(10))
}
