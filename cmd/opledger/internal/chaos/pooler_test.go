package chaos

import (
	"bytes"
	"errors"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/opledger/opledger/internal/harness/throwaway"
)

// TestPoolerRestarts: a run on the pgbouncer database supervises its
// PgBouncer; a crash of its (here a SIGKILL from outside, which no known
// bug explains) is restarted, counted in the report, listed under the
// table and, being unexplained, fails --strict.
func TestPoolerRestarts(t *testing.T) {
	t.Parallel()
	backend := throwaway.Postgres(t)
	pb := throwaway.PgBouncer(t, backend, throwaway.PgBouncerOptions{})
	db := &serverDB{name: "postgres via pgbouncer (pgx)", srv: pb, restartee: backend, backend: backend, params: throwaway.PgxPoolerSetting}
	if (&serverDB{srv: backend, restartee: backend}).pooler() != nil || db.pooler() != pb {
		t.Fatal("pooler(): only a database behind a pooler has one")
	}
	report := supervisePooler(t.Context(), db)
	var rep Report
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
	PrintTable(&out, []Report{rep, {Database: "sqlite"}})
	if !strings.Contains(out.String(), "pooler restarts (it crashed; started again)") ||
		!strings.Contains(out.String(), "the pooler ("+rep.Pooler+") crashed: signal: killed") {
		t.Errorf("the table:\n%s", out.String())
	}
	rep.PoolerCrashes = []string{"exit status 1: FATAL @src/objects.c:1060 in function disconnect_client(): bad client state: 0"}
	if u := rep.unexplainedPoolerCrashes(); len(u) != 0 {
		t.Errorf("PgBouncer's cancel crash is a known bug: %v", u)
	}
	if KnownPoolerBug("exit status 1: FATAL cannot load config") || !KnownPoolerBug("exit status 1: FATAL @src/server.c:591 in function server_proto(): server_proto: server in bad state: 11") {
		t.Error("KnownPoolerBug")
	}
	if err := errors.Join(pb.Cleanup(), backend.Cleanup()); err != nil {
		t.Fatal(err)
	}
}
