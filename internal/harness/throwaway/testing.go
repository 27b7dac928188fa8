package throwaway

import (
	"context"
	"errors"
	"os"
	"testing"
	"time"
)

// envRequire is internal/testkit/testdb's EnvRequire: with it set to 1 a missing
// server binary fails the test instead of skipping it.
const envRequire = "OPLEDGER_TEST_REQUIRE_DBS"

// startTimeout bounds a test helper's start of a server.
const startTimeout = 2 * time.Minute

// Postgres starts a throw-away PostgreSQL for t (StartPostgres) and removes
// it when t ends. Without the binaries the test skips, or fails when
// OPLEDGER_TEST_REQUIRE_DBS=1.
func Postgres(t testing.TB) *Server {
	t.Helper()
	return forTest(t, "PostgreSQL (initdb, postgres)", StartPostgres)
}

// MariaDB starts a throw-away MariaDB for t (StartMariaDB) and removes it
// when t ends. Without the binaries the test skips, or fails when
// OPLEDGER_TEST_REQUIRE_DBS=1.
func MariaDB(t testing.TB) *Server {
	t.Helper()
	return forTest(t, "MariaDB (mariadbd, mariadb-install-db)", StartMariaDB)
}

// PgBouncer starts a throw-away PgBouncer in transaction pooling mode in
// front of backend for t (StartPgBouncer) and removes it when t ends
// (before the backend, whose Cleanup was registered earlier). Without
// pgbouncer the test skips, or fails when OPLEDGER_TEST_REQUIRE_DBS=1.
func PgBouncer(t testing.TB, backend *Server, opts PgBouncerOptions) *Server {
	t.Helper()
	return forTest(t, "PgBouncer (pgbouncer)", func(ctx context.Context) (*Server, error) {
		return StartPgBouncer(ctx, backend, opts)
	})
}

func forTest(t testing.TB, what string, start func(context.Context) (*Server, error)) *Server {
	t.Helper()
	return started(t, what, start, func(s *Server) []*Server { return []*Server{s} }, (*Server).Cleanup)
}

// started starts what (a server or a pair of them) for t, skipping or
// failing t when its binaries are missing, and removes it when t ends,
// logging its servers' states and logs when t failed.
func started[T any](t testing.TB, what string, start func(context.Context) (T, error), servers func(T) []*Server, cleanup func(T) error) T {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), startTimeout)
	defer cancel()
	s, err := start(ctx)
	if errors.Is(err, ErrNotInstalled) {
		if os.Getenv(envRequire) == "1" {
			t.Fatalf("%v, and %s=1 requires every database", err, envRequire)
		}
		t.Skipf("install %s to run this test against a throw-away server: %v", what, err)
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			// What the server did, for the failure's diagnosis: whether it
			// still ran, how its last process ended, the end of its log.
			for _, s := range servers(s) {
				t.Logf("throwaway %s on port %d: %s; log %s:\n%s", s.Kind(), s.Port(), s.state(), s.LogPath(), s.logTail())
			}
		}
		if err := cleanup(s); err != nil {
			t.Errorf("throwaway cleanup: %v", err)
		}
	})
	return s
}

// ReplicatedPostgres starts a throw-away primary and standby for t
// (StartPostgresPair) and removes them when t ends. Without the binaries
// the test skips, or fails when OPLEDGER_TEST_REQUIRE_DBS=1.
func ReplicatedPostgres(t testing.TB, opts PairOptions) *PostgresPair {
	t.Helper()
	return started(t, "PostgreSQL (initdb, postgres, pg_basebackup, pg_ctl, pg_rewind)",
		func(ctx context.Context) (*PostgresPair, error) { return StartPostgresPair(ctx, opts) },
		func(p *PostgresPair) []*Server { n := p.Nodes(); return n[:] }, (*PostgresPair).Cleanup)
}

// ReplicatedMariaDB starts a throw-away MariaDB primary and replica for t
// (StartMariaDBPair) and removes them when t ends. Without the binaries
// the test skips, or fails when OPLEDGER_TEST_REQUIRE_DBS=1.
func ReplicatedMariaDB(t testing.TB, opts MariaDBPairOptions) *MariaDBPair {
	t.Helper()
	return started(t, "MariaDB (mariadbd, mariadb-install-db)",
		func(ctx context.Context) (*MariaDBPair, error) { return StartMariaDBPair(ctx, opts) },
		func(p *MariaDBPair) []*Server { n := p.Nodes(); return n[:] }, (*MariaDBPair).Cleanup)
}
