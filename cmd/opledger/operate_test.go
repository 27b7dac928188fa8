package main

import (
	"context"
	"database/sql"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/opledger/opledger/internal/testkit/testdb"
	"github.com/opledger/opledger/ledger"
)

const opMethod = "/pay.v1.Payments/Transfer"

// operatorTargets are the databases the operator commands are tested on:
// a SQLite file always, PostgreSQL and MySQL when their variables are
// set. Each gets its own ledger table.
func operatorTargets(t testing.TB) map[string]string {
	t.Helper()
	out := map[string]string{"sqlite": "sqlite:" + filepath.Join(t.TempDir(), "ops.db")}
	for family, env := range map[string]string{"postgres": testdb.EnvPostgres, "mysql": testdb.EnvMySQL} {
		if dsn := os.Getenv(env); dsn != "" {
			out[family] = dsn
		} else if os.Getenv(testdb.EnvRequire) == "1" {
			t.Errorf("%s is not set, and %s=1 requires every database", env, testdb.EnvRequire)
		}
	}
	return out
}

// opEnv is one database with a fresh ledger table and a pool on it.
type opEnv struct {
	dsn, table string
	db         *sql.DB
	tg         target
}

func newOpEnv(t testing.TB, family, dsn string) *opEnv {
	t.Helper()
	testdb.Reserve(t, family, 4)
	table := fmt.Sprintf("opl_cmd_%s_%d", family, time.Now().UnixNano()%1_000_000_000)
	if code, _, errs := runCmd(t, "migrate", "up", "--dsn", dsn, "--table", table); code != 0 {
		t.Fatalf("migrate up: %s", errs)
	}
	t.Cleanup(func() {
		runCmd(t, "migrate", "down", "--dsn", dsn, "--table", table)
		dropVersionTable(t, dsn, table)
	})
	db, tg, err := openDB(context.Background(), dsn)
	if err != nil {
		t.Fatal(err)
	}
	db.SetMaxOpenConns(3)
	t.Cleanup(func() { db.Close() })
	return &opEnv{dsn: dsn, table: table, db: db, tg: tg}
}

// put commits an entry for key at time at: completed unless pending.
func (e *opEnv) put(t *testing.T, at time.Time, caller, method, key string, pending bool) ledger.Identity {
	t.Helper()
	l, err := ledger.New(e.tg.dialect, ledger.WithTable(e.table), ledger.WithClock(func() time.Time { return at }))
	if err != nil {
		t.Fatal(err)
	}
	id, err := ledger.NewIdentity(caller, method, key)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	tx, err := e.db.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback()
	c, err := l.Claim(ctx, tx, ledger.ClaimRequest{Identity: id, Fingerprint: ledger.FingerprintOf([]byte(key))})
	if err != nil {
		t.Fatal(err)
	}
	if !pending {
		if err := l.Complete(ctx, tx, c, ledger.Result{Response: []byte("ok-" + key), TypeName: "pay.v1.TransferReply"}); err != nil {
			t.Fatal(err)
		}
	}
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
	return id
}

// TestOperatorCommands: stats (text and JSON), inspect --pending
// --older-than and --method, evict (refused while a transaction holds the
// entry, then done) and a bounded sweep, on every database, against
// entries the ledger wrote: completed, pending (committed without a
// result) and expired ones. No output holds a key.
func TestOperatorCommands(t *testing.T) {
	for family, dsn := range operatorTargets(t) {
		t.Run(family, func(t *testing.T) {
			t.Parallel()
			e := newOpEnv(t, family, dsn)
			now := time.Now()
			var keys []string
			key := func(s string) string { k := "k-" + s + "-93b1e0"; keys = append(keys, k); return k }
			for i := range 3 {
				e.put(t, now.Add(-time.Minute), "svc-a", opMethod, key(fmt.Sprint("done", i)), false)
			}
			stuck := e.put(t, now.Add(-2*time.Minute), "svc-b", opMethod, key("stuck"), true)
			e.put(t, now.Add(-5*time.Second), "svc-b", "/pay.v1.Payments/Refund", key("young-pending"), true)
			var oldIDs []ledger.Identity
			for i := range 5 {
				oldIDs = append(oldIDs, e.put(t, now.Add(-25*time.Hour), "svc-c", opMethod, key(fmt.Sprint("old", i)), false))
			}
			e.put(t, now.Add(-23*time.Hour-30*time.Minute), "svc-a", opMethod, key("soon"), false)
			if testdb.TiDB(e.tg.dialect) {
				// TiDB estimates a table's size from its statistics, which
				// a table this new has only after an ANALYZE.
				if _, err := e.db.Exec("ANALYZE TABLE " + e.tg.dialect.QuoteIdent(e.table)); err != nil {
					t.Fatal(err)
				}
			}
			all := ""

			// stats
			code, out, errs := runCmd(t, "stats", "--dsn", dsn, "--table", e.table, "--json")
			if code != 0 {
				t.Fatalf("stats: %d %s", code, errs)
			}
			all += out
			var s stats
			if err := json.Unmarshal([]byte(out), &s); err != nil {
				t.Fatalf("stats --json: %v\n%s", err, out)
			}
			if s.Entries != 11 || s.Completed != 4 || s.Pending != 2 || s.Expired != 5 || s.ExpiringNextHour != 1 {
				t.Errorf("stats %+v: want 11 entries: 4 completed, 2 pending, 5 expired, 1 expiring within the hour", s)
			}
			if age := s.OldestPendingAge; age < 119 || age > 600 {
				t.Errorf("oldest pending age %v s, want about 120", age)
			}
			if family != "sqlite" && (s.TableBytes <= 0 || s.SizeUnavailable != "") {
				t.Errorf("size: %+v", s)
			}
			code, out, _ = runCmd(t, "stats", "--dsn", dsn, "--table", e.table)
			if code != 0 || !strings.Contains(out, "pending                    2") && !strings.Contains(out, "pending") || !strings.Contains(out, "oldest pending entry") {
				t.Errorf("stats: %d\n%s", code, out)
			}
			all += out

			// inspect --pending --older-than 30s: only the stuck entry.
			code, out, errs = runCmd(t, "inspect", "--dsn", dsn, "--table", e.table, "--pending", "--older-than", "30s")
			all += out
			stuckID := stuck.ID()
			if code != 0 || !strings.Contains(out, hex.EncodeToString(stuckID[:8])) || strings.Count(out, "pending") != 1 ||
				!strings.Contains(out, "keys are not shown") || !strings.Contains(out, "svc-b") {
				t.Errorf("inspect --pending: %d %s\n%s", code, errs, out)
			}
			// inspect --method: the Refund entry alone.
			code, out, _ = runCmd(t, "inspect", "--dsn", dsn, "--table", e.table, "--method", "/pay.v1.Payments/Refund")
			all += out
			if code != 0 || strings.Count(out, "/pay.v1.Payments/Refund") != 1 || strings.Contains(out, opMethod) {
				t.Errorf("inspect --method: %d\n%s", code, out)
			}

			// evict, refused while a transaction holds the entry.
			holder, err := e.db.BeginTx(context.Background(), nil)
			if err != nil {
				t.Fatal(err)
			}
			q := e.tg.dialect.QuoteIdent(e.table)
			if _, err := holder.Exec("UPDATE "+q+" SET expires_at = expires_at WHERE id = "+e.tg.dialect.Placeholder(1), stuckID[:]); err != nil {
				t.Fatal(err)
			}
			evict := []string{"evict", "--dsn", dsn, "--table", e.table, "--caller", "svc-b", "--method", opMethod, "--key", "k-stuck-93b1e0", "--wait", "300ms"}
			code, out, errs = runCmd(t, evict...)
			all += out + errs
			if code != 1 || !strings.Contains(errs, "refused: a transaction holds this entry") {
				t.Errorf("evict while held: %d %q %q", code, out, errs)
			}
			holder.Rollback()
			code, out, errs = runCmd(t, evict...)
			all += out + errs
			if code != 0 || !strings.Contains(out, "evicted entry "+hex.EncodeToString(stuckID[:])) || !strings.Contains(out, "pending") {
				t.Errorf("evict: %d %q %q", code, out, errs)
			}
			if code, out, _ := runCmd(t, evict...); code != 1 || !strings.Contains(out, "nothing to evict") {
				t.Errorf("second evict: %d %q", code, out)
			}

			// A bucket width the ledger refuses is a usage error.
			if code, _, errs := runCmd(t, "sweep", "--dsn", dsn, "--table", e.table, "--bucket-width", "7m"); code != 2 || !strings.Contains(errs, "bucket width 7m0s must") {
				t.Errorf("sweep --bucket-width 7m: %d %q, want exit 2 naming the width", code, errs)
			}

			// A bounded sweep that has no time at all stops at once; then an
			// unbounded one in batches of 2, with plain progress lines.
			code, out, errs = runCmd(t, "sweep", "--dsn", dsn, "--table", e.table, "--max-duration", "1ns")
			all += out + errs
			if code != 0 || !strings.Contains(out, "swept 0 expired entries") || !strings.Contains(out, "stopped at --max-duration 1ns with about 5 expired entries left") {
				t.Errorf("bounded sweep: %d %q %q", code, out, errs)
			}

			// A sweep while a transaction holds an expired entry: it waits
			// --lock-wait for it, skips it and says so (on SQLite the writer
			// holds the whole database: nothing is swept).
			holder, err = e.db.BeginTx(context.Background(), nil)
			if err != nil {
				t.Fatal(err)
			}
			heldID := oldIDs[0].ID()
			if _, err := holder.Exec("UPDATE "+q+" SET expires_at = expires_at WHERE id = "+e.tg.dialect.Placeholder(1), heldID[:]); err != nil {
				t.Fatal(err)
			}
			swept, left := "swept 4 expired entries", "; 1 expired entry left for the next run: other open transactions hold it"
			if family == "sqlite" {
				swept, left = "swept 0 expired entries", "; 5 expired entries left for the next run: other open transactions hold them"
			}
			code, out, errs = runCmd(t, "sweep", "--dsn", dsn, "--table", e.table, "--batch", "2", "--lock-wait", "1s")
			all += out + errs
			if code != 0 || !strings.Contains(out, swept) || !strings.Contains(out, left) {
				t.Errorf("sweep with a held entry: %d %q %q; want %q and %q", code, out, errs, swept, left)
			}
			holder.Rollback()
			swept = "swept 1 expired entries"
			if family == "sqlite" {
				swept = "swept 5 expired entries"
			}
			code, out, errs = runCmd(t, "sweep", "--dsn", dsn, "--table", e.table, "--batch", "2")
			all += out + errs
			if code != 0 || !strings.Contains(out, swept) || strings.Contains(out, "left for the next run") || !strings.Contains(out, "rows/s") ||
				!strings.Contains(errs, "sweep: ") || strings.Contains(errs, "\r") {
				t.Errorf("sweep: %d %q %q", code, out, errs)
			}
			if code, out, _ := runCmd(t, "stats", "--dsn", dsn, "--table", e.table, "--json"); code != 0 || !strings.Contains(out, `"entries": 5`) {
				t.Errorf("stats after evict and sweep: %s", out)
			}
			for _, k := range keys {
				if strings.Contains(all, k) {
					t.Errorf("key %q printed", k)
				}
			}
		})
	}
}

// TestProgressBar: on a terminal the sweep's progress is one bar redrawn
// in place.
func TestProgressBar(t *testing.T) {
	var b strings.Builder
	p := &progress{w: &b, tty: true, total: 10, start: time.Now(), interval: 0}
	p.set(4)
	p.set(10)
	p.done()
	out := b.String()
	if strings.Count(out, "\r") != 2 || !strings.Contains(out, "100% 10/10") || !strings.HasSuffix(out, "\n") {
		t.Errorf("bar %q", out)
	}
}
