package throwaway_test

import (
	"context"
	"database/sql"
	"os"
	"testing"
	"time"

	"github.com/opledger/opledger/internal/harness/throwaway"
)

// TestMariaDBPairLifecycle: semi-synchronous (AFTER_SYNC) and
// asynchronous, the replica applies what the primary commits; the
// primary is killed and the replica promoted, the pool behind Addr
// follows it and no committed row is lost; the old primary rejoins
// (rebuilt) and replicates; a second failover goes back; Cleanup removes
// everything.
func TestMariaDBPairLifecycle(t *testing.T) {
	t.Parallel()
	for name, semi := range map[string]bool{"semisync": true, "async": false} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			mariaPairLifecycle(t, semi)
		})
	}
}

func mariaPairLifecycle(t *testing.T, semi bool) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	p := throwaway.ReplicatedMariaDB(t, throwaway.MariaDBPairOptions{SemiSync: semi})
	nodes := p.Nodes()
	if p.Primary() != nodes[0] || p.Standby() != nodes[1] || p.SemiSync() != semi || p.Addr() == nodes[0].Addr() {
		t.Fatalf("pair: primary %d, replica %d, addr %s", p.Primary().Port(), p.Standby().Port(), p.Addr())
	}
	db := open(t, "mysql", p.DSN())
	db.SetMaxIdleConns(0) // a fresh connection each time: through the proxy to the primary of now
	if _, err := db.Exec("CREATE TABLE kept (k INTEGER PRIMARY KEY)"); err != nil {
		t.Fatal(err)
	}
	k := 0
	write := func(stage string) {
		t.Helper()
		for range 3 {
			k++
			if _, err := db.ExecContext(ctx, "INSERT INTO kept VALUES (?)", k); err != nil {
				t.Fatalf("%s: insert: %v", stage, err)
			}
		}
	}
	onReplica := func(stage string) {
		t.Helper()
		if err := p.WaitReplicated(ctx); err != nil {
			t.Fatalf("%s: %v", stage, err)
		}
		r := &sqlDB{open(t, "mysql", p.Standby().DSN())}
		defer r.Close()
		if n := r.count(t, "kept"); n != k {
			t.Fatalf("%s: %d rows on the replica, want %d", stage, n, k)
		}
		var semiStatus, clients sql.NullString
		pr := open(t, "mysql", p.Primary().DSN())
		defer pr.Close()
		if err := pr.QueryRow("SELECT (SELECT VARIABLE_VALUE FROM information_schema.GLOBAL_STATUS WHERE VARIABLE_NAME = 'RPL_SEMI_SYNC_MASTER_STATUS'), "+
			"(SELECT VARIABLE_VALUE FROM information_schema.GLOBAL_STATUS WHERE VARIABLE_NAME = 'RPL_SEMI_SYNC_MASTER_CLIENTS')").Scan(&semiStatus, &clients); err != nil {
			t.Fatal(err)
		}
		if want := map[bool]string{true: "ON 1", false: "OFF 0"}[semi]; semiStatus.String+" "+clients.String != want {
			t.Fatalf("%s: semi-synchronous status and clients %q %q, want %q", stage, semiStatus.String, clients.String, want)
		}
	}
	write("first primary")
	onReplica("first primary")
	failover := func(stage string) {
		t.Helper()
		failOver(ctx, t, stage, p, p.Rejoin)
		if n := (&sqlDB{db}).count(t, "kept"); n != k {
			t.Fatalf("%s: %d rows on the new primary, want %d", stage, n, k)
		}
		write(stage + ", alone")
	}
	failover("first failover")
	if err := p.Rejoin(ctx); err != nil {
		t.Fatalf("rejoin: %v", err)
	}
	write("after the rejoin")
	onReplica("after the rejoin")
	failover("second failover")
	if p.Primary() != nodes[0] || p.Promotions() != 2 {
		t.Fatalf("after two failovers: primary on %d, %d promotions", p.Primary().Port(), p.Promotions())
	}
	if err := p.Rejoin(ctx); err != nil {
		t.Fatalf("second rejoin: %v", err)
	}
	onReplica("after the second rejoin")
	db.Close()
	if err := p.Cleanup(); err != nil {
		t.Fatal(err)
	}
	for _, s := range nodes {
		if _, err := os.Stat(s.Dir()); !os.IsNotExist(err) || s.Running() {
			t.Fatalf("%s still there after Cleanup (%v), running %v", s.Dir(), err, s.Running())
		}
	}
}
