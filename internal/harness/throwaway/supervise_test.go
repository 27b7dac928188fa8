package throwaway_test

import (
	"context"
	"database/sql"
	"errors"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/opledger/opledger/internal/harness/faultproxy"
	"github.com/opledger/opledger/internal/harness/throwaway"
)

// waitFor polls cond (the server's own view: its process, its answers)
// until it holds, bounded by a generous hang guard.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("waited a minute for %s", what)
		}
		time.Sleep(5 * time.Millisecond) // the poll's pace
	}
}

// TestSupervise: a supervised server that dies by itself (SIGKILL from
// outside, as the OOM killer would) is started again and the crash
// recorded; Stop, Kill and Restart are not crashes, and a server stopped
// on purpose stays down.
func TestSupervise(t *testing.T) {
	t.Parallel()
	pg := throwaway.Postgres(t)
	pb := throwaway.PgBouncer(t, pg, throwaway.PgBouncerOptions{PoolSize: 2})
	pb.Supervise(t.Context())
	ping := func() error { return answers(t, "postgres", pb.DriverDSN("postgres")) }
	if err := ping(); err != nil {
		t.Fatal(err)
	}

	pid := pb.PID()
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the crash to be recorded", func() bool { return len(pb.Crashes()) == 1 })
	c := pb.Crashes()[0]
	if c.Restart != nil || c.Exit != "signal: killed" || !pb.Running() || pb.PID() == pid || pb.Starts() != 2 {
		t.Fatalf("after a SIGKILL: crash %q (restart error %v), running %v, pid %d (was %d), %d starts", c, c.Restart, pb.Running(), pb.PID(), pid, pb.Starts())
	}
	if err := ping(); err != nil {
		t.Fatalf("restarted, it does not answer: %v", err)
	}

	ctx := t.Context()
	if err := pb.Restart(ctx); err != nil {
		t.Fatal(err)
	}
	if err := pb.Kill(ctx); err != nil {
		t.Fatal(err)
	}
	if err := pb.Start(ctx); err != nil {
		t.Fatal(err)
	}
	if err := pb.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	// Stopped on purpose: it stays down, and none of these is a crash.
	if pb.Running() || len(pb.Crashes()) != 1 || pb.Starts() != 4 {
		t.Fatalf("after Restart, Kill, Start, Stop: running %v, crashes %v, %d starts", pb.Running(), pb.Crashes(), pb.Starts())
	}
}

// TestPgBouncerCancelCrash pins down how PgBouncer 1.18.0 to 1.19.0 die
// under a chaos run (pgbouncer#801, fixed in 1.19.1): a query's context is
// cancelled, the driver (pgx and lib/pq alike) sends a cancel request on a
// connection of its own, and that connection closes (a network cut, the
// client process killed) while PgBouncer still forwards the cancel to
// PostgreSQL. PgBouncer frees the cancel's client, then disconnects it
// again when PostgreSQL answers: "FATAL … disconnect_client(): bad client
// state". PostgreSQL is held (SIGSTOP) while the cancel is in flight to
// make the window certain. Under supervision the crash is recorded and the
// pooler answers again. A PgBouncer without the bug stays up: the test
// then checks only that.
func TestPgBouncerCancelCrash(t *testing.T) {
	t.Parallel()
	for _, drv := range []string{"pgx", "postgres"} {
		t.Run(drv, func(t *testing.T) {
			t.Parallel()
			pg := throwaway.Postgres(t)
			pb := throwaway.PgBouncer(t, pg, throwaway.PgBouncerOptions{PoolSize: 2})
			pb.Supervise(t.Context())
			cut, err := faultproxy.New(pb.Addr())
			if err != nil {
				t.Fatal(err)
			}
			defer cut.Close()
			db := open(t, drv, strings.Replace(pb.DriverDSN(drv), pb.Addr(), cut.Addr(), 1))
			direct := open(t, "pgx", pg.DSN())
			admin := open(t, "postgres", strings.Replace(pb.DSN(), "/postgres?", "/pgbouncer?", 1))

			if activeCancels(t, admin) == -2 {
				t.Skip("this PgBouncer's SHOW POOLS has no cancel counters: it is older than 1.18.0, whose cancel handling has the bug")
			}
			ctx, cancel := context.WithCancel(t.Context())
			defer cancel()
			done := make(chan error, 1)
			go func() { _, err := db.ExecContext(ctx, "SELECT pg_sleep(60)"); done <- err }()
			waitFor(t, "the query to run", func() bool {
				var n int
				err := direct.QueryRow("SELECT count(*) FROM pg_stat_activity WHERE query = 'SELECT pg_sleep(60)' AND state = 'active'").Scan(&n)
				return err == nil && n == 1
			})
			pid := pg.PID()
			if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
				t.Fatal(err)
			}
			held := true
			resume := func() {
				if held {
					held = false
					_ = syscall.Kill(pid, syscall.SIGCONT)
				}
			}
			defer resume()
			cancel() // the driver sends a cancel request
			waitFor(t, "PgBouncer to forward the cancel request", func() bool { return activeCancels(t, admin) > 0 })
			cut.Cut() // its connection closes first
			waitFor(t, "PgBouncer to see the cancel's client go", func() bool { return activeCancelClients(t, admin) == 0 })
			resume() // PostgreSQL answers the cancel
			if err := <-done; !errors.Is(err, context.Canceled) {
				t.Logf("the cancelled query: %v", err)
			}
			// PgBouncer has answered the cancel (and lives) or died of it.
			waitFor(t, "the cancel to end", func() bool {
				return len(pb.Crashes()) > 0 || pb.Running() && activeCancels(t, admin) == 0
			})
			crashes := pb.Crashes()
			t.Logf("%s: %d crashes %v", pb.LogPath(), len(crashes), crashes)
			for _, c := range crashes {
				if c.Restart != nil || !strings.Contains(c.Fatal, "bad client state") {
					t.Errorf("crash: %s", c)
				}
			}
			if err := answers(t, drv, pb.DriverDSN(drv)); err != nil || !pb.Running() {
				t.Fatalf("after the cancel: running %v, %v", pb.Running(), err)
			}
		})
	}
}

// answers pings dsn over a new connection.
func answers(t *testing.T, driver, dsn string) error {
	t.Helper()
	db, err := sql.Open(driver, dsn)
	if err != nil {
		return err
	}
	defer db.Close()
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	return db.PingContext(ctx)
}

// activeCancels returns the cancel requests PgBouncer is forwarding
// (SHOW POOLS: sv_active_cancel, sv_being_canceled), -1 when it does not
// answer.
func activeCancels(t *testing.T, admin *sql.DB) int {
	return poolColumns(t, admin, "sv_active_cancel", "cl_active_cancel_req")
}

// activeCancelClients returns the cancel requests' clients PgBouncer
// holds (cl_active_cancel_req, cl_waiting_cancel_req).
func activeCancelClients(t *testing.T, admin *sql.DB) int {
	return poolColumns(t, admin, "cl_active_cancel_req", "cl_waiting_cancel_req")
}

// poolColumns sums the named columns of SHOW POOLS over every pool, -1
// when PgBouncer does not answer, -2 when it has none of the columns.
func poolColumns(t *testing.T, admin *sql.DB, names ...string) int {
	t.Helper()
	rows, err := admin.Query("SHOW POOLS")
	if err != nil {
		return -1
	}
	defer rows.Close()
	cols, err := rows.Columns()
	if err != nil {
		return -1
	}
	found := false
	for _, c := range cols {
		for _, n := range names {
			found = found || c == n
		}
	}
	if !found {
		return -2
	}
	sum := 0
	for rows.Next() {
		vals := make([]sql.NullString, len(cols))
		ptrs := make([]any, len(cols))
		for i := range vals {
			ptrs[i] = &vals[i]
		}
		if err := rows.Scan(ptrs...); err != nil {
			return -1
		}
		for i, c := range cols {
			for _, n := range names {
				if c == n {
					v, _ := strconv.Atoi(vals[i].String)
					sum += v
				}
			}
		}
	}
	if rows.Err() != nil {
		return -1
	}
	return sum
}
