package main

import (
	"bytes"
	"context"
	"database/sql"
	"errors"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/opledger/opledger/internal/harness/throwaway"
	"github.com/opledger/opledger/internal/wait"
	"github.com/opledger/opledger/ledger"
)

// crashPoolerMidRun supervises pb, a PgBouncer in front of backend that
// a chaos run reaches, as systemd would (a crashed pooler is started
// again), and SIGKILLs it once the run is under way: when the backend's
// ledger holds after entries. It returns the check to call after the run:
// the SIGKILL happened once and the pooler came back each time, and any
// other crash is a known PgBouncer bug (pgbouncer#801, see
// docs/poolers.md), logged, never an unexplained one.
func crashPoolerMidRun(t *testing.T, backend, pb *throwaway.Server, after int) (check func()) {
	t.Helper()
	pb.Supervise(t.Context())
	direct, err := sql.Open("pgx", backend.DSN())
	if err != nil {
		t.Fatal(err)
	}
	ctx, stop := context.WithCancel(t.Context())
	killed := make(chan error, 1)
	go func() {
		killed <- func() error {
			for {
				// The database's own view of the run's progress.
				var n int
				if err := direct.QueryRowContext(ctx, "SELECT count(*) FROM "+ledger.DefaultTable).Scan(&n); err != nil && ctx.Err() != nil {
					return err
				}
				// PID is 0 while the pooler is down (a crash of its own
				// being restarted): never signal 0, the process group.
				if pid := pb.PID(); n >= after && pid > 0 {
					return syscall.Kill(pid, syscall.SIGKILL)
				}
				if err := wait.Sleep(ctx, 10*time.Millisecond); err != nil { // the poll's pace
					return err
				}
			}
		}()
	}()
	t.Cleanup(func() { stop(); direct.Close() })
	return func() {
		t.Helper()
		stop()
		if err := <-killed; err != nil {
			t.Fatalf("the pooler was not killed mid-run: %v", err)
		}
		var ours int
		for _, c := range pb.Crashes() {
			t.Logf("pooler crash: %s", c)
			switch {
			case c.Restart != nil:
				t.Errorf("the pooler was not started again after %s", c)
			case c.Fatal == "" && c.Exit == "signal: killed":
				ours++
			case !knownPoolerBug(c.String()):
				t.Errorf("the pooler crashed, not of a known PgBouncer bug: %s", c)
			}
		}
		if ours != 1 {
			t.Errorf("%d SIGKILLs of the pooler seen, want 1: %v", ours, pb.Crashes())
		}
	}
}

// TestChaosPoolerRestarts: a run on the pgbouncer database supervises its
// PgBouncer; a crash of its (here a SIGKILL from outside, which no known
// bug explains) is restarted, counted in the report, listed under the
// table and, being unexplained, fails --strict.
func TestChaosPoolerRestarts(t *testing.T) {
	t.Parallel()
	backend := throwaway.Postgres(t)
	pb := throwaway.PgBouncer(t, backend, throwaway.PgBouncerOptions{})
	db := &serverDB{name: "postgres via pgbouncer (pgx)", srv: pb, restartee: backend, backend: backend, params: throwaway.PgxPoolerSetting}
	if (&serverDB{srv: backend, restartee: backend}).pooler() != nil || db.pooler() != pb {
		t.Fatal("pooler(): only a database behind a pooler has one")
	}
	report := supervisePooler(t.Context(), db)
	var rep chaosReport
	report(&rep)
	if rep.Pooler != "PgBouncer "+strings.TrimPrefix(rep.Pooler, "PgBouncer ") || rep.Pooler == "PgBouncer " || rep.PoolerRestarts != 0 || rep.PoolerCrashes != nil {
		t.Fatalf("before a crash: %q, %d restarts, %v", rep.Pooler, rep.PoolerRestarts, rep.PoolerCrashes)
	}
	if pid := pb.PID(); pid <= 0 || syscall.Kill(pid, syscall.SIGKILL) != nil {
		t.Fatalf("kill pid %d", pid)
	}
	deadline := time.Now().Add(time.Minute)
	for len(pb.Crashes()) == 0 && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond) // the poll's pace
	}
	report(&rep)
	if rep.PoolerRestarts != 1 || len(rep.PoolerCrashes) != 1 || rep.PoolerCrashes[0] != "signal: killed" || !pb.Running() {
		t.Fatalf("after a SIGKILL: %d restarts, %v, running %v", rep.PoolerRestarts, rep.PoolerCrashes, pb.Running())
	}
	if u := rep.unexplainedPoolerCrashes(); len(u) != 1 {
		t.Errorf("a SIGKILL is not a known bug: %v", u)
	}
	var out bytes.Buffer
	printChaos(&out, []chaosReport{rep, {Database: "sqlite"}})
	if !strings.Contains(out.String(), "pooler restarts (it crashed; started again)") ||
		!strings.Contains(out.String(), "the pooler ("+rep.Pooler+") crashed: signal: killed") {
		t.Errorf("the table:\n%s", out.String())
	}
	rep.PoolerCrashes = []string{"exit status 1: FATAL @src/objects.c:1060 in function disconnect_client(): bad client state: 0"}
	if u := rep.unexplainedPoolerCrashes(); len(u) != 0 {
		t.Errorf("PgBouncer's cancel crash is a known bug: %v", u)
	}
	if knownPoolerBug("exit status 1: FATAL cannot load config") || !knownPoolerBug("exit status 1: FATAL @src/server.c:591 in function server_proto(): server_proto: server in bad state: 11") {
		t.Error("knownPoolerBug")
	}
	if err := errors.Join(pb.Cleanup(), backend.Cleanup()); err != nil {
		t.Fatal(err)
	}
}
