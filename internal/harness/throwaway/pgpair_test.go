package throwaway_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/opledger/opledger/internal/harness/throwaway"
)

// TestPostgresPairLifecycle: in each mode the pair replicates, through
// both drivers' multi-host DSNs; the primary is killed and the standby
// promoted, the pools follow it and no committed row is lost (sync); the
// old primary rejoins (pg_rewind) and replicates; a second failover goes
// back, and a rejoin by a fresh base backup; Cleanup removes everything.
func TestPostgresPairLifecycle(t *testing.T) {
	t.Parallel()
	for _, repl := range []throwaway.Replication{throwaway.ReplicationSync, throwaway.ReplicationRemoteApply, throwaway.ReplicationAsync} {
		t.Run(string(repl), func(t *testing.T) {
			t.Parallel()
			pairLifecycle(t, repl)
		})
	}
}

func pairLifecycle(t *testing.T, repl throwaway.Replication) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	p := throwaway.ReplicatedPostgres(t, throwaway.PairOptions{Replication: repl})
	nodes := p.Nodes()
	if p.Primary() != nodes[0] || p.Standby() != nodes[1] || p.Replication() != repl || nodes[0].Port() == nodes[1].Port() ||
		nodes[0].Dir() == nodes[1].Dir() {
		t.Fatalf("pair: primary %d, standby %d, mode %s", p.Primary().Port(), p.Standby().Port(), p.Replication())
	}
	pools := map[string]string{
		"pgx":      throwaway.MultiHostDSN("pgx", nodes[0].Addr(), nodes[1].Addr()),
		"postgres": throwaway.MultiHostDSN("postgres", nodes[0].Addr(), nodes[1].Addr()),
	}
	dbs := map[string]*sqlDB{}
	for driver, dsn := range pools {
		dbs[driver] = &sqlDB{open(t, driver, dsn)}
	}
	standbyOf := func() *sqlDB { return &sqlDB{open(t, "postgres", p.Standby().DSN())} }
	if _, err := dbs["pgx"].Exec("CREATE TABLE kept (k INTEGER PRIMARY KEY, driver TEXT)"); err != nil {
		t.Fatal(err)
	}
	k := 0
	write := func(stage string) {
		t.Helper()
		for driver, db := range dbs {
			k++
			if _, err := db.ExecContext(ctx, "INSERT INTO kept VALUES ($1, $2)", k, driver); err != nil {
				t.Fatalf("%s: insert through %s's multi-host DSN: %v", stage, driver, err)
			}
		}
	}
	// onStandby checks that the standby has every row written so far.
	onStandby := func(stage string) {
		t.Helper()
		if err := p.WaitReplicated(ctx); err != nil {
			t.Fatalf("%s: %v", stage, err)
		}
		sb := standbyOf()
		defer sb.Close()
		if n := sb.count(t, "kept"); n != k {
			t.Fatalf("%s: %d rows on the standby, want %d", stage, n, k)
		}
		var inRecovery bool
		if err := sb.QueryRow("SELECT pg_is_in_recovery()").Scan(&inRecovery); err != nil || !inRecovery {
			t.Fatalf("%s: the standby is not in recovery (%v)", stage, err)
		}
	}
	write("first primary")
	if repl == throwaway.ReplicationRemoteApply {
		// Applied on the standby before the COMMIT returned: no wait.
		sb := standbyOf()
		if n := sb.count(t, "kept"); n != k {
			t.Fatalf("remote_apply: %d rows on the standby right after the commits, want %d", n, k)
		}
		sb.Close()
	}
	onStandby("first primary")
	checkSync(t, p, repl)

	failover := func(stage string) {
		t.Helper()
		failOver(ctx, t, stage, p, func(ctx context.Context) error { return p.Rejoin(ctx, throwaway.RejoinRewind) })
		// Every row committed on the old primary is on the new one (in
		// async mode too here: WaitReplicated ran before the kill).
		for driver, db := range dbs {
			if n := db.count(t, "kept"); n != k {
				t.Fatalf("%s: %d rows through %s on the new primary, want %d", stage, n, driver, k)
			}
		}
		write(stage + ", alone")
	}
	failover("first failover")
	if err := p.Rejoin(ctx, throwaway.RejoinRewind); err != nil {
		t.Fatalf("rejoin (pg_rewind): %v", err)
	}
	write("after the rejoin")
	onStandby("after the rejoin")
	checkSync(t, p, repl)

	failover("second failover")
	if p.Primary() != nodes[0] || p.Promotions() != 2 {
		t.Fatalf("after two failovers: primary on %d, %d promotions", p.Primary().Port(), p.Promotions())
	}
	if err := p.Rejoin(ctx, throwaway.RejoinBaseBackup); err != nil {
		t.Fatalf("rejoin (pg_basebackup): %v", err)
	}
	write("after the second rejoin")
	onStandby("after the second rejoin")
	checkSync(t, p, repl)

	for _, db := range dbs {
		db.Close()
	}
	if err := p.Cleanup(); err != nil {
		t.Fatal(err)
	}
	for _, s := range nodes {
		if _, err := os.Stat(s.Dir()); !os.IsNotExist(err) || s.Running() {
			t.Fatalf("%s still there after Cleanup (%v), running %v", s.Dir(), err, s.Running())
		}
	}
}

// checkSync checks the primary's view of its standby: synchronous in the
// synchronous modes, asynchronous otherwise.
func checkSync(t *testing.T, p *throwaway.PostgresPair, repl throwaway.Replication) {
	t.Helper()
	db := &sqlDB{open(t, "postgres", p.Primary().DSN())}
	defer db.Close()
	var names, commit, state string
	if err := db.QueryRow("SELECT current_setting('synchronous_standby_names'), current_setting('synchronous_commit'), "+
		"(SELECT sync_state FROM pg_stat_replication)").Scan(&names, &commit, &state); err != nil {
		t.Fatal(err)
	}
	standby := "node0"
	if p.Standby() == p.Nodes()[1] {
		standby = "node1"
	}
	want := map[throwaway.Replication]string{throwaway.ReplicationAsync: " on async", throwaway.ReplicationSync: standby + " on sync",
		throwaway.ReplicationRemoteApply: standby + " remote_apply sync"}[repl]
	if got := fmt.Sprintf("%s %s %s", names, commit, state); got != want {
		t.Fatalf("%s: synchronous_standby_names, synchronous_commit, sync_state = %q, want %q", repl, got, want)
	}
}

// pairSteps are the steps both throw-away pairs take.
type pairSteps interface {
	KillPrimary(context.Context) error
	Promote(context.Context) error
	Primary() *throwaway.Server
	Standby() *throwaway.Server
}

// failOver kills p's primary and promotes its standby, checking that a
// rejoin before the promotion and a second promotion are refused, and
// that the roles swapped.
func failOver(ctx context.Context, t *testing.T, stage string, p pairSteps, rejoin func(context.Context) error) {
	t.Helper()
	before := p.Primary()
	if err := p.KillPrimary(ctx); err != nil {
		t.Fatalf("%s: kill: %v", stage, err)
	}
	if before.Running() {
		t.Fatalf("%s: the killed primary runs", stage)
	}
	if err := rejoin(ctx); !errors.Is(err, throwaway.ErrNotPrimary) {
		t.Fatalf("%s: a rejoin before the promotion: %v, want ErrNotPrimary", stage, err)
	}
	if err := p.Promote(ctx); err != nil {
		t.Fatalf("%s: promote: %v", stage, err)
	}
	if p.Primary() == before || p.Standby() != before {
		t.Fatalf("%s: roles not swapped", stage)
	}
	if err := p.Promote(ctx); !errors.Is(err, throwaway.ErrNotPrimary) {
		t.Fatalf("%s: a second promotion without a standby: %v, want ErrNotPrimary", stage, err)
	}
}
