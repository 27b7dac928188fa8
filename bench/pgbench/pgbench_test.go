// Package pgbench holds the hand-written SQL of every path of a keyed
// unit as pgbench scripts, and run.sh, which runs them the way the kit's
// Go benchmarks run (docs/benchmarks.md). Its test keeps the scripts true
// to the kit's table: each runs, without a failed transaction, on a table
// the kit's migrations create.
package pgbench

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/opledger/opledger/dialects/postgres"
	"github.com/opledger/opledger/internal/testkit/testdb"
)

// TestScripts runs every script a few times on 2 clients against a fresh
// ledger table (the scripts' opl_pgbench renamed to it), after setup.sql.
func TestScripts(t *testing.T) {
	bin, err := exec.LookPath("pgbench")
	if err != nil {
		if os.Getenv(testdb.EnvRequire) == "1" {
			t.Fatalf("pgbench is not installed, and %s=1 requires it", testdb.EnvRequire)
		}
		t.Skip("pgbench is not installed")
	}
	testdb.Parallel(t, "postgres", 4)
	var pg testdb.Target
	for _, tg := range testdb.Targets() {
		if tg.Name == "postgres/pgx" {
			pg = tg
		}
	}
	db := pg.Open(t, 2)
	table := testdb.NewTable(t, db, postgres.New())
	t.Cleanup(func() { db.Exec("DROP TABLE IF EXISTS " + table + "_biz") })
	dir := t.TempDir()
	render := func(name string) string {
		b, err := os.ReadFile(name)
		if err != nil {
			t.Fatal(err)
		}
		out := filepath.Join(dir, name)
		if err := os.WriteFile(out, []byte(strings.ReplaceAll(string(b), "opl_pgbench", table)), 0o644); err != nil {
			t.Fatal(err)
		}
		return out
	}
	setup, err := os.ReadFile(render("setup.sql"))
	if err != nil {
		t.Fatal(err)
	}
	for _, stmt := range strings.Split(string(setup), ";\n") {
		if s := strings.TrimSpace(stmt); s != "" {
			if _, err := db.ExecContext(context.Background(), s); err != nil {
				t.Fatalf("setup.sql: %v\n%s", err, s)
			}
		}
	}
	scripts, err := filepath.Glob("*.sql")
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range scripts {
		if s == "setup.sql" {
			continue
		}
		t.Run(strings.TrimSuffix(s, ".sql"), func(t *testing.T) {
			out, err := exec.Command(bin, "-n", "-M", "prepared", "-c", "2", "-j", "1", "-t", "5", "-f", render(s), os.Getenv(testdb.EnvPostgres)).CombinedOutput()
			if err != nil || !strings.Contains(string(out), "number of failed transactions: 0") {
				t.Fatalf("pgbench %s: %v\n%s", s, err, out)
			}
			if !strings.Contains(string(out), "number of transactions actually processed: 10/10") {
				t.Fatalf("pgbench %s did not run 10 transactions:\n%s", s, out)
			}
		})
	}
}
