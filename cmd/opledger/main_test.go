package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/opledger/opledger/internal/testkit/testdb"
)

func runCmd(t testing.TB, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	var out, errb bytes.Buffer
	code = run(context.Background(), args, &out, &errb)
	return code, out.String(), errb.String()
}

// TestMigrateDefaultSQLite: with no DSN the commands use opledger.db in
// the working directory.
func TestMigrateDefaultSQLite(t *testing.T) {
	dir := t.TempDir()
	t.Chdir(dir)
	t.Setenv("OPLEDGER_DSN", "")
	if code, out, errs := runCmd(t, "migrate", "up"); code != 0 || !strings.Contains(out, "up   00001_create_operations.sql") {
		t.Fatalf("migrate up: %d %q %q", code, out, errs)
	}
	if _, err := os.Stat(filepath.Join(dir, "opledger.db")); err != nil {
		t.Fatalf("default database not created: %v", err)
	}
	if code, out, _ := runCmd(t, "migrate", "up"); code != 0 || !strings.Contains(out, "nothing to do") {
		t.Fatalf("second migrate up: %d %q", code, out)
	}
	if code, out, _ := runCmd(t, "migrate", "status"); code != 0 || !strings.Contains(out, "00001_create_operations.sql") || strings.Contains(out, "pending") {
		t.Fatalf("status: %d %q", code, out)
	}
	if code, out, _ := runCmd(t, "sweep"); code != 0 || !strings.Contains(out, "swept 0") {
		t.Fatalf("sweep: %d %q", code, out)
	}
	if code, out, _ := runCmd(t, "inspect", "--caller", "c", "--method", "/a.B/C", "--key", "secret-key-1"); code != 1 || !strings.Contains(out, "no live entry") || strings.Contains(out, "secret-key-1") {
		t.Fatalf("inspect: %d %q", code, out)
	}
	if code, out, _ := runCmd(t, "migrate", "down"); code != 0 || !strings.Contains(out, "down 00001_create_operations.sql") {
		t.Fatalf("down: %d %q", code, out)
	}
}

func TestMigratePostgres(t *testing.T) {
	dsn := os.Getenv(testdb.EnvPostgres)
	if dsn == "" {
		testdb.Skip(t, testdb.EnvPostgres)
	}
	table := "opl_cmd_test"
	if code, _, errs := runCmd(t, "migrate", "up", "--dsn", dsn, "--table", table); code != 0 {
		t.Fatalf("up: %s", errs)
	}
	t.Cleanup(func() {
		runCmd(t, "migrate", "down", "--dsn", dsn, "--table", table)
		dropVersionTable(t, dsn, table)
	})
	if code, out, _ := runCmd(t, "migrate", "status", "--dsn", dsn, "--table", table); code != 0 || strings.Contains(out, "pending") {
		t.Fatalf("status: %q", out)
	}
	if code, out, _ := runCmd(t, "migrate", "down", "--dsn", dsn, "--table", table); code != 0 || !strings.Contains(out, "down") {
		t.Fatalf("down: %q", out)
	}
}

// TestErrorsAreOneLine: bad DSNs and unreachable databases give a one-line
// error and exit 2, never a stack trace.
func TestErrorsAreOneLine(t *testing.T) {
	t.Chdir(t.TempDir())
	cases := [][]string{
		{"migrate", "status", "--dsn", "postgres://nobody@127.0.0.1:1/x?connect_timeout=2"},
		{"migrate", "status", "--dsn", "bogus://x"},
		{"migrate", "status", "--dsn", "postgres://u:hunter2@[::1"},
		{"migrate", "up", "--table", "x; DROP TABLE y"},
		{"migrate", "sideways"},
		{"migrate"},
		{"nope"},
		{"inspect", "--caller", "", "--method", "/a.B/C", "--key", "k"},
		{"migrate", "export", "--dialect", "oracle", "--dir", "out"},
		{"sweep", "--lock-wait", "-1s"},
		{"sweep", "--bucket-width", "-1h"},
		{"sweep", "--retention", "0s"},
		{"sweep", "--retention", "1h", "--clock-skew", "1h"},
	}
	for _, args := range cases {
		code, _, errs := runCmd(t, args...)
		if code != 2 {
			t.Errorf("%v: exit %d, want 2 (%q)", args, code, errs)
		}
		lines := strings.Split(strings.TrimSpace(errs), "\n")
		if errs == "" || (len(lines) != 1 && !strings.HasPrefix(errs, "usage")) && !strings.Contains(errs, "usage:") {
			t.Errorf("%v: want a one-line error, got %q", args, errs)
		}
		if strings.Contains(errs, "hunter2") || strings.Contains(errs, "goroutine") {
			t.Errorf("%v: leaks a password or a stack: %q", args, errs)
		}
	}
}

func TestExport(t *testing.T) {
	dir := t.TempDir()
	code, out, errs := runCmd(t, "migrate", "export", "--dialect", "sqlite", "--dir", dir)
	if code != 0 || !strings.Contains(out, "00001_create_operations.sql") {
		t.Fatalf("export: %d %q %q", code, out, errs)
	}
}

func TestParseDSN(t *testing.T) {
	cases := map[string]string{
		"postgres://u:p@h:5432/db":    "postgres",
		"postgresql://h/db":           "postgres",
		"sqlite:/tmp/x.db":            "sqlite",
		"sqlite:///tmp/x.db":          "sqlite",
		"file:/tmp/x.db?mode=rwc":     "sqlite",
		"./local.db":                  "sqlite",
		"opledger.db":                 "sqlite",
		`C:\data\x.db`:                "sqlite",
		"mysql://root@127.0.0.1/test": "mysql",
		"tidb://root@127.0.0.1/test":  "tidb",
	}
	for dsn, want := range cases {
		tg, err := parseDSN(dsn)
		if err != nil || tg.dialect.Name() != want {
			t.Errorf("%q: %v %v, want %s", dsn, tg.dialect, err, want)
			continue
		}
		if strings.Contains(tg.display, ":p@") {
			t.Errorf("%q: display shows the password: %s", dsn, tg.display)
		}
	}
	for _, bad := range []string{"", "bogus://x", "sqlite:"} {
		if _, err := parseDSN(bad); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
}
