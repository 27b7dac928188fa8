package pgdialect_test

import (
	"context"
	"database/sql"
	"errors"
	"testing"
	"time"

	"github.com/opledger/opledger/internal/dialectkit"
	"github.com/opledger/opledger/internal/harness/throwaway"
	"github.com/opledger/opledger/internal/pgdialect"
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
		if err := pgdialect.New().CheckPooling(context.Background(), db); err != nil {
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
	var pc dialectkit.PoolingChecker = pgdialect.New()
	for _, driver := range []string{"postgres", "pgx"} {
		t.Run(driver, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			bad := testdb.OpenDSN(t, driver, pb.DSN(), 9)
			err := pc.CheckPooling(ctx, bad)
			if !errors.Is(err, pgdialect.ErrStatementPooling) {
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

			tx, release, err := pgdialect.New().BeginBounded(ctx, a, nil, 1234*time.Millisecond)
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
		_, conn := sessionOf(t, tg)
		ctx := context.Background()
		first, second := pgdialect.New().Migrations().Lock("a"), pgdialect.New().Migrations().Lock("a")
		if err := first.SessionLock(ctx, conn); err != nil {
			t.Fatal(err)
		}
		if err := second.SessionLock(ctx, conn); !errors.Is(err, pgdialect.ErrTransactionPooling) {
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

// TestAdvisoryLockGrantedAsTimeoutFires: when lock_timeout fires just as
// the holder releases the lock, PostgreSQL can grant the session lock and
// raise the timeout all the same, and the rollback that follows keeps a
// session lock. SessionLock reads the grant back and keeps it; before it
// did, the next try found its own session holding the lock and refused it
// as a pooler's (a CI run met that race). The race is made here by a
// statement that takes the lock and then raises the timeout's SQLSTATE.
// A timeout with no grant stays one: the wait goes on until ctx ends.
func TestAdvisoryLockGrantedAsTimeoutFires(t *testing.T) {
	t.Parallel()
	testdb.ForEachTarget(t, 2, func(t *testing.T, tg testdb.Target) {
		db, conn := sessionOf(t, tg)
		ctx := context.Background()
		var pid int64
		if err := conn.QueryRowContext(ctx, "SELECT pg_backend_pid()").Scan(&pid); err != nil {
			t.Fatal(err)
		}
		if _, err := conn.ExecContext(ctx, `CREATE FUNCTION pg_temp.opledger_lock_then_timeout(k bigint, take boolean) RETURNS void
			LANGUAGE plpgsql AS $$ BEGIN
				IF take THEN PERFORM pg_advisory_lock(k); END IF;
				RAISE EXCEPTION USING ERRCODE = '55P03', MESSAGE = 'canceling statement due to lock timeout (test)';
			END $$`); err != nil {
			t.Fatal(err)
		}

		granted := pgdialect.NewLockWithSQL("SELECT pg_temp.opledger_lock_then_timeout($1, true)")
		if err := granted.SessionLock(ctx, conn); err != nil {
			t.Fatalf("SessionLock when the grant raced the timeout: %v, want the lock", err)
		}
		if n := heldAdvisory(t, db, pid); n != 1 {
			t.Fatalf("the session holds the kit's lock %d times after SessionLock, want 1", n)
		}
		if err := granted.SessionUnlock(ctx, conn); err != nil {
			t.Fatal(err)
		}
		if n := heldAdvisory(t, db, pid); n != 0 {
			t.Fatalf("the session holds the kit's lock %d times after SessionUnlock, want 0", n)
		}

		cctx, cancel := context.WithCancel(ctx)
		cancel()
		refused := pgdialect.NewLockWithSQL("SELECT pg_temp.opledger_lock_then_timeout($1, false)")
		if err := refused.SessionLock(cctx, conn); !errors.Is(err, context.Canceled) {
			t.Fatalf("SessionLock on a timeout with no grant and an ended context: %v, want context.Canceled", err)
		}
		if n := heldAdvisory(t, db, pid); n != 0 {
			t.Fatalf("the session holds the kit's lock %d times after a timeout, want 0", n)
		}
	}, "postgres")
}

// sessionOf opens tg's database and one session of it, closed when t ends.
func sessionOf(t *testing.T, tg testdb.Target) (*sql.DB, *sql.Conn) {
	t.Helper()
	db := tg.Open(t, 2)
	conn, err := db.Conn(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	return db, conn
}
