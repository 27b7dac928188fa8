package postgres_test

import (
	"context"
	"database/sql"
	"errors"
	"testing"
	"time"

	"github.com/opledger/opledger/dialects"
	"github.com/opledger/opledger/dialects/postgres"
	"github.com/opledger/opledger/internal/harness/throwaway"
	"github.com/opledger/opledger/internal/testkit/testdb"
)

// driverSettings are the DSN settings each driver needs behind PgBouncer
// in transaction mode (docs/poolers.md).
var driverSettings = map[string]string{
	"postgres": "&binary_parameters=yes",
	"pgx":      "&default_query_exec_mode=exec",
}

// TestCheckPoolingDirect: a direct connection passes the probe with the
// drivers' defaults.
func TestCheckPoolingDirect(t *testing.T) {
	t.Parallel()
	testdb.ForEachTarget(t, 6, func(t *testing.T, tg testdb.Target) {
		db := tg.Open(t, 6)
		if err := postgres.New().CheckPooling(context.Background(), db); err != nil {
			t.Fatal(err)
		}
	}, "postgres")
}

// TestCheckPoolingPgBouncer: behind PgBouncer in transaction mode the
// drivers' defaults fail the probe with ErrStatementPooling, and the
// documented settings pass it.
func TestCheckPoolingPgBouncer(t *testing.T) {
	t.Parallel()
	pg := throwaway.Postgres(t)
	pb := throwaway.PgBouncer(t, pg, throwaway.PgBouncerOptions{PoolSize: 3})
	var pc dialects.PoolingChecker = postgres.New()
	for _, driver := range []string{"postgres", "pgx"} {
		t.Run(driver, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			bad := testdb.OpenDSN(t, driver, pb.DSN(), 9)
			err := pc.CheckPooling(ctx, bad)
			if !errors.Is(err, postgres.ErrStatementPooling) {
				t.Fatalf("defaults behind PgBouncer: %v, want ErrStatementPooling", err)
			}
			t.Logf("defaults: %v", err)
			good := testdb.OpenDSN(t, driver, pb.DSN()+driverSettings[driver], 9)
			if err := pc.CheckPooling(ctx, good); err != nil {
				t.Fatalf("with %s: %v", driverSettings[driver], err)
			}
		})
	}
}

// TestBeginBoundedPgBouncer: the lock-wait bound BeginBounded sets is
// transaction-scoped, so behind PgBouncer with a single server connection
// it is not visible to the next transaction of another client on that
// same server connection; a session-scoped SET, shown for contrast, is.
func TestBeginBoundedPgBouncer(t *testing.T) {
	t.Parallel()
	pg := throwaway.Postgres(t)
	pb := throwaway.PgBouncer(t, pg, throwaway.PgBouncerOptions{PoolSize: 1})
	for driver, params := range driverSettings {
		t.Run(driver, func(t *testing.T) {
			ctx := context.Background()
			a := testdb.OpenDSN(t, driver, pb.DSN()+params, 1)
			b := testdb.OpenDSN(t, driver, pb.DSN()+params, 1)
			inTx := func(db *sql.DB) (pid int64, timeout string) {
				t.Helper()
				tx, err := db.BeginTx(ctx, nil)
				if err != nil {
					t.Fatal(err)
				}
				defer tx.Rollback()
				if err := tx.QueryRowContext(ctx, "SELECT pg_backend_pid(), current_setting('lock_timeout')").Scan(&pid, &timeout); err != nil {
					t.Fatal(err)
				}
				return pid, timeout
			}
			basePID, base := inTx(b)

			tx, release, err := postgres.New().BeginBounded(ctx, a, nil, 1234*time.Millisecond)
			if err != nil {
				t.Fatal(err)
			}
			var pid int64
			var set string
			if err := tx.QueryRowContext(ctx, "SELECT pg_backend_pid(), current_setting('lock_timeout')").Scan(&pid, &set); err != nil {
				t.Fatal(err)
			}
			if err := tx.Commit(); err != nil {
				t.Fatal(err)
			}
			release()
			if set != "1234ms" || pid != basePID {
				t.Fatalf("inside the bounded transaction: lock_timeout %q on backend %d, want 1234ms on the pool's one backend %d", set, pid, basePID)
			}
			if pidB, got := inTx(b); pidB != basePID || got != base {
				t.Fatalf("the other client's next transaction sees lock_timeout %q on backend %d, want %q (the bound leaked)", got, pidB, base)
			}

			// Contrast: a session-scoped SET from a leaks to b.
			if _, err := a.ExecContext(ctx, "SET lock_timeout = 4321"); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _, _ = a.ExecContext(ctx, "RESET lock_timeout") })
			if _, got := inTx(b); got != "4321ms" {
				t.Fatalf("a session-scoped SET did not reach the other client (%q): the test cannot see a leak", got)
			}
			if _, err := a.ExecContext(ctx, "RESET lock_timeout"); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// TestAdvisoryLockHeldBySession: a session that already holds the kit's
// migration lock (behind a transaction pooler: another client's session)
// is refused with ErrTransactionPooling instead of taking the re-entrant
// lock again, which would protect nothing.
func TestAdvisoryLockHeldBySession(t *testing.T) {
	t.Parallel()
	testdb.ForEachTarget(t, 2, func(t *testing.T, tg testdb.Target) {
		db := tg.Open(t, 2)
		ctx := context.Background()
		conn, err := db.Conn(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		first, second := postgres.New().Migrations().Lock("a"), postgres.New().Migrations().Lock("a")
		if err := first.SessionLock(ctx, conn); err != nil {
			t.Fatal(err)
		}
		if err := second.SessionLock(ctx, conn); !errors.Is(err, postgres.ErrTransactionPooling) {
			t.Fatalf("SessionLock on a session holding the lock: %v, want ErrTransactionPooling", err)
		}
		if err := first.SessionUnlock(ctx, conn); err != nil {
			t.Fatal(err)
		}
		var held int
		if err := conn.QueryRowContext(ctx, "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND pid = pg_backend_pid()").Scan(&held); err != nil {
			t.Fatal(err)
		}
		if held != 0 {
			t.Fatalf("%d advisory locks left on the session", held)
		}
	}, "postgres")
}
