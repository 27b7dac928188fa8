package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/opledger/opledger/cmd/opledger/internal/chaos"
	"github.com/opledger/opledger/internal/sqlitedialect"
	"github.com/opledger/opledger/internal/testkit/testdb"
)

// TestMigrateUpConcurrentProcesses: eight `opledger migrate up` processes
// at once on a table that does not exist yet, five rounds on each
// database: every process exits 0, and each migration is recorded
// applied once. (The processes are this test binary, which stands in for
// opledger: see TestMain.)
func TestMigrateUpConcurrentProcesses(t *testing.T) {
	t.Parallel()
	const procs, rounds = 8, 5
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	dsns := map[string]string{"sqlite": "sqlite:" + filepath.Join(t.TempDir(), "concurrent.db")}
	for family, env := range map[string]string{"postgres": testdb.EnvPostgres, "mysql": testdb.EnvMySQL} {
		if dsn := os.Getenv(env); dsn != "" {
			dsns[family] = dsn
		} else {
			testdb.Skip(t, env)
		}
	}
	// Every dialect has the same migrations: the ledger's, the outbox's
	// and the outbox's dead state.
	files, err := fs.Glob(sqlitedialect.New().Migrations().FS, "*.sql")
	if err != nil || len(files) == 0 {
		t.Fatalf("the SQLite dialect's migrations: %v %v", files, err)
	}
	want := len(files)
	for family, dsn := range dsns {
		t.Run(family, func(t *testing.T) {
			t.Parallel()
			// Each process opens a pool; a migration holds one or two
			// connections of it.
			testdb.Reserve(t, family, 2*procs)
			for round := range rounds {
				var b [4]byte
				_, _ = rand.Read(b[:])
				table := fmt.Sprintf("opl_cmig_%s_%d", hex.EncodeToString(b[:]), round)
				t.Cleanup(func() {
					runCmd(t, "migrate", "down", "--dsn", dsn, "--table", table)
					dropVersionTable(t, dsn, table)
				})
				var wg sync.WaitGroup
				outs := make([]string, procs)
				codes := make([]int, procs)
				for i := range procs {
					wg.Go(func() {
						ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
						defer cancel()
						cmd := exec.CommandContext(ctx, exe, "migrate", "up", "--dsn", dsn, "--table", table)
						cmd.Env = append(os.Environ(), chaos.ReplicaEnv+"=1", "OPLEDGER_DSN=")
						out, err := cmd.CombinedOutput()
						outs[i], codes[i] = string(out), cmd.ProcessState.ExitCode()
						if err != nil && codes[i] == 0 {
							codes[i] = -1
						}
					})
				}
				wg.Wait()
				applied := 0
				for i := range procs {
					if codes[i] != 0 {
						t.Errorf("round %d, process %d: exit %d:\n%s", round, i, codes[i], outs[i])
					}
					applied += strings.Count(outs[i], "up   000")
				}
				if applied != want {
					t.Errorf("round %d: %d migrations applied in all, want %d (each once):\n%s", round, applied, want, strings.Join(outs, "\n"))
				}
				code, out, errs := runCmd(t, "migrate", "status", "--dsn", dsn, "--table", table)
				if code != 0 || strings.Contains(out, "pending") || strings.Count(out, ".sql") != want {
					t.Errorf("round %d: status after the ups: %d %q %q", round, code, out, errs)
				}
				if t.Failed() {
					return
				}
			}
		})
	}
}

// dropVersionTable drops the kit's version table of table (Down leaves it).
func dropVersionTable(t testing.TB, dsn, table string) {
	t.Helper()
	db, tg, err := openDB(context.Background(), dsn)
	if err != nil {
		t.Logf("clean-up: %v", err)
		return
	}
	defer db.Close()
	if _, err := db.Exec("DROP TABLE IF EXISTS " + tg.dialect.QuoteIdent(table+"_db_version")); err != nil {
		t.Logf("clean-up: %v", err)
	}
}
