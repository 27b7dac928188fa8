package main

import (
	"context"
	"database/sql"
	"syscall"
	"testing"
	"time"

	"github.com/opledger/opledger/cmd/opledger/internal/chaos"
	"github.com/opledger/opledger/internal/harness/throwaway"
	"github.com/opledger/opledger/internal/wait"
	"github.com/opledger/opledger/ledger"
)

// crashPoolerMidRun supervises pb, a PgBouncer in front of backend that
// a chaos run reaches, as systemd would (a crashed pooler is started
// again), and SIGKILLs it once the run is under way: when the backend's
// ledger holds after entries. It returns the check to call after the run:
// the SIGKILL happened once (or, before the run reached it, PgBouncer
// died of a known bug of its own: that crash stands for it) and the
// pooler came back each time, and any
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
		notKilled := <-killed
		var ours, own int
		for _, c := range pb.Crashes() {
			t.Logf("pooler crash: %s", c)
			switch {
			case c.Restart != nil:
				t.Errorf("the pooler was not started again after %s", c)
			case c.Fatal == "" && c.Exit == "signal: killed":
				ours++
			case chaos.KnownPoolerBug(c.String()):
				own++
			default:
				t.Errorf("the pooler crashed, not of a known PgBouncer bug: %s", c)
			}
		}
		switch {
		case notKilled != nil && own == 0:
			t.Fatalf("the pooler was not killed mid-run: %v", notKilled)
		case notKilled != nil:
			// PgBouncer died of its own known bug mid-run and was
			// restarted before the run reached the kill: that crash
			// stands for the one this test makes.
			t.Logf("the pooler crashed on its own mid-run, not killed by the test: %v", notKilled)
		case ours != 1:
			t.Errorf("%d SIGKILLs of the pooler seen, want 1: %v", ours, pb.Crashes())
		}
	}
}
