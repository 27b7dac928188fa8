package pgxconformance_test

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/opledger/opledger/conformance"
	"github.com/opledger/opledger/internal/harness/throwaway"
	"github.com/opledger/opledger/internal/testkit/testdb"
	"github.com/opledger/opledger/pgxledger/pgxconformance"
)

// keys is the herd's key count in these tests (OPLEDGER_CONFORMANCE_KEYS
// overrides it).
func keys(t *testing.T) int { return testdb.Keys(t, 30) }

// forms are the four forms of the pgx path the suite runs over: in the
// caller's transaction and pipelined, claim first and at commit.
func forms(tg conformance.Target) []conformance.Target {
	return []conformance.Target{tg, tg.AtCommit(), tg.Pipelined(), tg.Pipelined().AtCommit()}
}

// openPool opens a pgx pool of maxConns on the test database.
func openPool(t *testing.T, params string, maxConns int) *pgxpool.Pool {
	t.Helper()
	return testdb.OpenPgx(t, testdb.PgxConfig(t, params, maxConns, nil))
}

// TestStore: the kit's pgxledger.Store passes every case of the suite,
// at every isolation level, in all four forms.
func TestStore(t *testing.T) {
	testdb.Parallel(t, "postgres", conformance.DefaultConcurrency+4)
	pool := openPool(t, "", conformance.DefaultConcurrency+4)
	db := testdb.SQLDB(t, pool)
	for _, tg := range forms(pgxconformance.NewTarget("postgres/pgx-native", pool, db)) {
		t.Run(tg.Name, func(t *testing.T) {
			start := time.Now()
			conformance.Run(t, tg, conformance.WithKeys(keys(t)))
			t.Logf("suite took %v", time.Since(start).Round(time.Millisecond))
		})
	}
}

// TestHerd: the herd case with 64 claimants × 50 keys at READ COMMITTED,
// REPEATABLE READ and SERIALIZABLE, over the pgx path in all four forms,
// against PostgreSQL and behind a PgBouncer in transaction mode (pgx in
// exec mode, as docs/poolers.md says), with 16 server connections for the
// 68 clients.
func TestHerd(t *testing.T) {
	const claimants, herdKeys = 64, 50
	n := herdKeys
	if testing.Short() {
		n = 10
	}
	opts := []conformance.Option{conformance.WithCases("herd"), conformance.WithConcurrency(claimants), conformance.WithKeys(n)}
	t.Run("postgres", func(t *testing.T) {
		testdb.Parallel(t, "postgres", claimants+4)
		pool := openPool(t, "", claimants+4)
		db := testdb.SQLDB(t, pool)
		for _, tg := range forms(pgxconformance.NewTarget("postgres/pgx-native", pool, db)) {
			t.Run(tg.Name, func(t *testing.T) { conformance.Run(t, tg, opts...) })
		}
	})
	t.Run("pgbouncer", func(t *testing.T) {
		t.Parallel()
		pg := throwaway.Postgres(t)
		pb := throwaway.PgBouncer(t, pg, throwaway.PgBouncerOptions{PoolSize: 16})
		pool := testdb.OpenPgx(t, testdb.PgxConfigDSN(t, pb.DSN()+"&default_query_exec_mode=exec", claimants+4, nil))
		db := testdb.SQLDB(t, pool)
		for _, tg := range forms(pgxconformance.NewTarget("pgbouncer/pgx-native", pool, db)) {
			t.Run(tg.Name, func(t *testing.T) { conformance.Run(t, tg, opts...) })
		}
	})
}

// TestSuiteHasTeeth runs broken ledgers on pgx through the suite (via
// Check, so that their failures are data) and asserts which cases catch
// each: the naive read-then-insert ledger and the one that claims in a
// transaction of its own, as on database/sql; the recorder that records in
// a transaction of its own (at commit); and two broken pipelined forms: a
// record sent with COMMIT that does nothing on a conflict (so a
// duplicate's work commits), and a claim committed with BEGIN in a
// transaction of its own.
func TestSuiteHasTeeth(t *testing.T) {
	testdb.Parallel(t, "postgres", conformance.DefaultConcurrency+4)
	pool := openPool(t, "", conformance.DefaultConcurrency+4)
	db := testdb.SQLDB(t, pool)
	opts := []conformance.Option{conformance.WithKeys(8), conformance.WithCaseTimeout(20 * time.Second)}
	levels := []string{"read_committed", "repeatable_read", "serializable"}
	perLevel := func(cases ...string) []string {
		var out []string
		for _, c := range cases {
			for _, l := range levels {
				out = append(out, c+"/"+l)
			}
		}
		return out
	}
	for _, bad := range []struct {
		kind  string
		form  func(conformance.Target) conformance.Target
		catch []string
	}{
		{"naive", func(tg conformance.Target) conformance.Target { return tg }, []string{"herd/read_committed", "herd/repeatable_read",
			"wait-then-commit/read_committed", "snapshot/repeatable_read", "prior-read/read_committed",
			"three-waiter-rollback/read_committed", "expiry/read_committed"}},
		{"own-tx", func(tg conformance.Target) conformance.Target { return tg },
			append([]string{"atomicity", "faults", "in-progress"}, perLevel("herd", "wait-then-commit", "wait-then-rollback", "three-waiter-rollback")...)},
		{"own-tx-record", conformance.Target.AtCommit,
			append([]string{"atomicity", "faults", "in-progress"}, perLevel("wait-then-commit", "wait-then-rollback", "three-waiter-rollback")...)},
		{"lenient-record", func(tg conformance.Target) conformance.Target { return tg.Pipelined().AtCommit() },
			perLevel("herd", "wait-then-commit", "three-waiter-rollback")},
		{"own-tx-begin", conformance.Target.Pipelined,
			append([]string{"atomicity", "faults", "in-progress"}, perLevel("herd", "wait-then-commit", "wait-then-rollback", "three-waiter-rollback")...)},
	} {
		t.Run(bad.kind, func(t *testing.T) {
			tg := bad.form(badTarget(pool, db, bad.kind))
			rep := conformance.Check(context.Background(), tg, opts...)
			caught := rep.Failures()
			t.Logf("%s, caught by %d of %d: %s", tg.Name, len(caught), len(rep.Results), strings.Join(caught, " "))
			for _, w := range bad.catch {
				if !slices.Contains(caught, w) {
					t.Errorf("%s: case %s passed; it must catch this ledger", tg.Name, w)
				}
			}
			if t.Failed() || testing.Verbose() {
				for _, r := range rep.Results {
					msg := ""
					if len(r.Messages) > 0 {
						msg = r.Messages[0]
					}
					t.Logf("  %-40s %-4s %s | %.160s", r.Name, r.Verdict, r.Figures, msg)
				}
			}
		})
	}
}

// TestStorePgBouncer: the whole suite, in all four forms, through a
// PgBouncer in transaction mode (pgx in exec mode) with 4 server
// connections for the suite's 36 clients.
func TestStorePgBouncer(t *testing.T) {
	t.Parallel()
	pg := throwaway.Postgres(t)
	pb := throwaway.PgBouncer(t, pg, throwaway.PgBouncerOptions{PoolSize: 4})
	pool := testdb.OpenPgx(t, testdb.PgxConfigDSN(t, pb.DSN()+"&default_query_exec_mode=exec", conformance.DefaultConcurrency+4, nil))
	db := testdb.SQLDB(t, pool)
	for _, tg := range forms(pgxconformance.NewTarget("pgbouncer/pgx-native", pool, db)) {
		t.Run(tg.Name, func(t *testing.T) { conformance.Run(t, tg, conformance.WithKeys(10)) })
	}
}
