package main

import (
	"bytes"
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/opledger/opledger/conformance"
	"github.com/opledger/opledger/dialects"
	"github.com/opledger/opledger/internal/sqlitedialect"
	"github.com/opledger/opledger/internal/testkit/testdb"
)

// runConformanceCmd calls the registered command's run function.
func runConformanceCmd(t *testing.T, args ...string) (int, string, string) {
	t.Helper()
	c, ok := extraCommands["conformance"]
	if !ok {
		t.Fatal("conformance is not registered in extraCommands")
	}
	if _, ok := commands()["conformance"]; !ok {
		t.Fatal("conformance is not among the commands")
	}
	var out, errb bytes.Buffer
	code := c.run(context.Background(), args, &out, &errb)
	return code, out.String(), errb.String()
}

// TestConformanceDefaultSQLite: without a DSN the suite runs on a
// temporary SQLite file (never ./opledger.db), passes, and prints an
// aligned table and a summary.
func TestConformanceDefaultSQLite(t *testing.T) {
	dir := t.TempDir()
	t.Chdir(dir)
	t.Setenv("OPLEDGER_DSN", "")
	code, out, errs := runConformanceCmd(t, "--keys", "5", "--concurrency", "8")
	if code != 0 || errs != "" {
		t.Fatalf("exit %d, stderr %q, stdout:\n%s", code, errs, out)
	}
	if _, err := os.Stat(filepath.Join(dir, "opledger.db")); !os.IsNotExist(err) {
		t.Fatalf("the suite touched ./opledger.db: %v", err)
	}
	entries, _ := os.ReadDir(dir)
	if len(entries) != 0 {
		t.Fatalf("the suite left files in the working directory: %v", entries)
	}
	if !strings.Contains(out, "(sqlite), 8 claimants, 5 keys") || !strings.Contains(out, "PASS: 18 passed, 0 failed, 2 skipped") {
		t.Fatalf("header or summary missing:\n%s", out)
	}
	header := -1
	rows := 0
	for _, line := range strings.Split(out, "\n") {
		if strings.HasPrefix(line, "CASE") {
			header = strings.Index(line, "VERDICT")
			continue
		}
		if header < 0 || line == "" || strings.HasPrefix(line, "PASS:") {
			continue
		}
		rows++
		v := line[header:]
		if !strings.HasPrefix(v, "PASS ") && !strings.HasPrefix(v, "SKIP ") {
			t.Errorf("row not aligned under VERDICT, or not passing: %q", line)
		}
	}
	if rows != len(conformance.Cases()) {
		t.Errorf("%d rows, want one per case (%d):\n%s", rows, len(conformance.Cases()), out)
	}
	for _, c := range []string{"herd/default", "in-progress", "claimants × 5 keys", "snapshot", "the target offers no snapshot isolation level"} {
		if !strings.Contains(out, c) {
			t.Errorf("output lacks %q:\n%s", c, out)
		}
	}
}

// TestConformanceAtCommit: --at-commit runs the units claim at commit;
// no-poisoning skips, everything else passes.
func TestConformanceAtCommit(t *testing.T) {
	t.Setenv("OPLEDGER_DSN", "")
	code, out, errs := runConformanceCmd(t, "--keys", "5", "--concurrency", "8", "--at-commit")
	if code != 0 || errs != "" {
		t.Fatalf("exit %d, stderr %q, stdout:\n%s", code, errs, out)
	}
	if !strings.Contains(out, "(sqlite), 8 claimants, 5 keys, claim at commit") || !strings.Contains(out, "PASS: 17 passed, 0 failed, 3 skipped") {
		t.Fatalf("header or summary missing:\n%s", out)
	}
}

// TestConformanceJSON: --json prints one report a tool can read.
func TestConformanceJSON(t *testing.T) {
	t.Setenv("OPLEDGER_DSN", "")
	code, out, errs := runConformanceCmd(t, "--json", "--keys", "3", "--concurrency", "4", "--cases", "herd, identity-isolation")
	if code != 0 {
		t.Fatalf("exit %d: %s\n%s", code, errs, out)
	}
	var rep conformanceJSON
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatalf("not JSON: %v\n%s", err, out)
	}
	if !rep.Passed || rep.Dialect != "sqlite" || rep.Concurrency != 4 || rep.Keys != 3 || len(rep.Results) != 2 {
		t.Fatalf("report: %+v", rep)
	}
	if r := rep.Results[0]; r.Name != "herd/default" || r.Case != "herd" || r.Level != "default" || r.Verdict != "pass" ||
		!strings.Contains(r.Figures, "4 claimants × 3 keys: 3 acquired, 9 replayed, 0 duplicates") {
		t.Fatalf("herd result: %+v", r)
	}
}

// TestConformanceJSONWindow: the window cases run and are reported by
// name in the --json report, with their figures.
func TestConformanceJSONWindow(t *testing.T) {
	t.Setenv("OPLEDGER_DSN", "")
	cases := []string{"window-stale-key-refused", "window-resolve-stale-key", "window-future-key-refused", "window-unknown-birth-policy"}
	code, out, errs := runConformanceCmd(t, "--json", "--concurrency", "4", "--cases", strings.Join(cases, ","))
	if code != 0 {
		t.Fatalf("exit %d: %s\n%s", code, errs, out)
	}
	var rep conformanceJSON
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatalf("not JSON: %v\n%s", err, out)
	}
	if !rep.Passed || len(rep.Results) != len(cases) {
		t.Fatalf("report: %+v", rep)
	}
	for i, r := range rep.Results {
		if r.Name != cases[i] || r.Case != cases[i] || r.Level != "" || r.Verdict != "pass" || !strings.Contains(r.Figures, "ErrKeyExpired") && !strings.Contains(r.Figures, "ErrInvalid") {
			t.Errorf("result %d: %+v, want %s passed with its figures", i, r, cases[i])
		}
	}
	if f := rep.Results[0].Figures; !strings.Contains(f, "window 59m0s (retention 1h0m0s minus skew 1m0s") {
		t.Errorf("window-stale-key-refused figures do not state the window: %q", f)
	}
}

// TestConformanceUsageErrors: bad flags and unreachable databases are
// set-up errors: exit 2 with one line on stderr.
func TestConformanceUsageErrors(t *testing.T) {
	t.Setenv("OPLEDGER_DSN", "")
	for _, args := range [][]string{
		{"--concurrency", "1"},
		{"--keys", "0"},
		{"--cases", "herd,no-such-case"},
		{"extra"},
		{"--dsn", "postgres://nobody:s3cret@127.0.0.1:1/none?sslmode=disable&connect_timeout=2"},
		{"--dsn", "nosuchscheme://x"},
	} {
		code, out, errs := runConformanceCmd(t, args...)
		if code != 2 || out != "" || strings.Count(errs, "\n") != 1 || !strings.HasPrefix(errs, "opledger conformance: ") {
			t.Errorf("%v: exit %d, stdout %q, stderr %q; want 2 and one line", args, code, out, errs)
		}
		if strings.Contains(errs, "s3cret") {
			t.Errorf("%v: the password leaked: %q", args, errs)
		}
	}
	if code, _, _ := runConformanceCmd(t, "--bogus"); code != 2 {
		t.Errorf("unknown flag: exit %d, want 2", code)
	}
	if code, _, _ := runConformanceCmd(t, "-h"); code != 0 {
		t.Errorf("-h: exit %d, want 0", code)
	}
}

// TestConformanceExitCodes: a failed case is exit 1; a report in which
// every case failed to create its scratch table is a set-up error.
func TestConformanceExitCodes(t *testing.T) {
	pass := conformance.Report{Results: []conformance.CaseResult{{Name: "herd", Verdict: conformance.Pass}, {Name: "snapshot", Verdict: conformance.Skip}}}
	failed := conformance.Report{Results: []conformance.CaseResult{{Name: "herd", Verdict: conformance.Fail, Messages: []string{"key herd-0: 2 claimants acquired"}}}}
	if conformanceExit(pass) != 0 || conformanceExit(failed) != 1 {
		t.Fatal("exit codes")
	}
	if _, ok := setupFailure(failed); ok {
		t.Fatal("a failed case read as a set-up error")
	}
	noTable := conformance.Report{Results: []conformance.CaseResult{
		{Name: "herd", Verdict: conformance.Fail, Messages: []string{"set-up: create scratch table opl_conf_1: permission denied"}},
		{Name: "snapshot", Verdict: conformance.Skip},
	}}
	if msg, ok := setupFailure(noTable); !ok || !strings.Contains(msg, "permission denied") {
		t.Fatalf("set-up failure not recognised: %q %v", msg, ok)
	}
	var out bytes.Buffer
	printCase(&out, 20, failed.Results[0])
	if !strings.Contains(out.String(), "FAIL") || !strings.Contains(out.String(), "- key herd-0: 2 claimants acquired") {
		t.Fatalf("failure row: %q", out.String())
	}
}

// TestConformancePostgres runs a few cases through the command against
// PostgreSQL, when configured.
func TestConformancePostgres(t *testing.T) {
	dsn := os.Getenv(testdb.EnvPostgres)
	if dsn == "" {
		testdb.Skip(t, testdb.EnvPostgres)
	}
	// The command opens its own pool (concurrency + 4): reserve it from
	// the server's budget shared by every test process.
	testdb.Reserve(t, "postgres", conformance.DefaultConcurrency+4)
	code, out, errs := runConformanceCmd(t, "--dsn", dsn, "--keys", "5", "--cases", "herd,snapshot,in-progress,faults")
	if code != 0 {
		t.Fatalf("exit %d: %s\n%s", code, errs, out)
	}
	for _, want := range []string{"herd/serializable", "snapshot/repeatable_read", "ErrRetryable (serialization failure)", "ErrInProgress", "connection killed", "PASS: 7 passed, 0 failed, 0 skipped"} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
}

// optimisticSQLite is SQLite with the TiDB dialect's refusal of an
// optimistic transaction: what `opledger conformance` meets on TiDB with
// tidb_txn_mode = 'optimistic' behind a DSN that does not set it.
type optimisticSQLite struct{ sqlitedialect.Dialect }

func (optimisticSQLite) CheckTx(context.Context, *sql.Tx) error {
	return fmt.Errorf("%w: TiDB runs this transaction optimistically (tidb_txn_mode = \"optimistic\"), checking the ledger's unique key only at COMMIT; set tidb_txn_mode = 'pessimistic'", dialects.ErrUnsuitableTx)
}

// TestConformanceOptimisticIsSetUp: a target whose transaction check
// refuses is a set-up error: exit 2, one line on stderr that starts with
// "set-up:" and names the setting, and no case reported (it was 23 failed
// cases on TiDB).
func TestConformanceOptimisticIsSetUp(t *testing.T) {
	db, err := sql.Open("sqlite3", sqlitedialect.DSN(filepath.Join(t.TempDir(), "opt.db"), 0))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	for _, asJSON := range []bool{false, true} {
		var out, errb bytes.Buffer
		code := checkConformance(context.Background(), conformance.StoreTarget("tidb://root@127.0.0.1:4000/test", db, optimisticSQLite{}), nil, asJSON, &out, &errb)
		errs := errb.String()
		if code != 2 || strings.Count(errs, "\n") != 1 ||
			!strings.HasPrefix(errs, "opledger conformance: set-up: the database's transactions are unsuitable for the ledger") ||
			!strings.Contains(errs, "tidb_txn_mode = 'pessimistic'") {
			t.Errorf("json %v: exit %d, stderr %q; want 2 and the set-up line", asJSON, code, errs)
		}
		if !asJSON {
			if out.Len() != 0 {
				t.Errorf("stdout %q, want nothing", out.String())
			}
			continue
		}
		rep := setUpReport(t, out.String())
		if !strings.HasPrefix(rep.Error, "set-up: the database's transactions are unsuitable") || rep.Target != "tidb://root@127.0.0.1:4000/test" {
			t.Errorf("JSON report: %+v", rep)
		}
	}
}

// setUpReport reads the --json report of a run that could not start: one
// JSON document that does not pass and names its error.
func setUpReport(t *testing.T, out string) conformanceJSON {
	t.Helper()
	dec := json.NewDecoder(strings.NewReader(out))
	var rep conformanceJSON
	if err := dec.Decode(&rep); err != nil {
		t.Fatalf("stdout is not a JSON report: %v\n%s", err, out)
	}
	if dec.More() {
		t.Fatalf("stdout holds more than one JSON document:\n%s", out)
	}
	if rep.Passed || rep.Error == "" || rep.Results == nil {
		t.Fatalf("report of a run that could not start: %+v, want passed false, an error and a results list", rep)
	}
	var raw map[string]any
	if err := json.Unmarshal([]byte(out), &raw); err != nil || raw["error"] == nil || raw["passed"] != false {
		t.Fatalf("the report's fields: %v %v", raw, err)
	}
	return rep
}

// TestConformanceJSONSetUpError: with --json, an error that keeps the suite
// from running (the database cannot be reached, a bad value) still prints
// one JSON report on stdout, with the error and what is known of the
// target, never the password, and exits 2 with the line on stderr.
func TestConformanceJSONSetUpError(t *testing.T) {
	t.Setenv("OPLEDGER_DSN", "")
	for _, tc := range []struct {
		args               []string
		target, dialect, e string
	}{
		{[]string{"--json", "--dsn", "postgres://nobody:s3cret@127.0.0.1:1/none?sslmode=disable&connect_timeout=2"},
			"postgres://nobody:xxxxx@127.0.0.1:1/none", "postgres", "cannot reach"},
		{[]string{"--json", "--dsn", "mysql://app:s3cret@127.0.0.1:1/orders?timeout=2s"},
			"mysql://app:xxxxx@127.0.0.1:1/orders", "mysql", "cannot reach"},
		{[]string{"--json", "--dsn", "nosuchscheme://app:s3cret@x/y"}, "nosuchscheme://app:", "", "nosuchscheme"},
		{[]string{"--json", "--keys", "0", "--dsn", "postgres://nobody:s3cret@127.0.0.1:1/none"}, "", "", "--keys must be at least 1"},
	} {
		code, out, errs := runConformanceCmd(t, tc.args...)
		if code != 2 || strings.Count(errs, "\n") != 1 || !strings.HasPrefix(errs, "opledger conformance: ") {
			t.Errorf("%v: exit %d, stderr %q; want 2 and one line", tc.args, code, errs)
		}
		if strings.Contains(out+errs, "s3cret") {
			t.Errorf("%v: the password leaked:\n%s\n%s", tc.args, out, errs)
		}
		rep := setUpReport(t, out)
		if !strings.Contains(rep.Error, tc.e) || !strings.HasPrefix(rep.Target, tc.target) || rep.Dialect != tc.dialect ||
			rep.Concurrency != conformance.DefaultConcurrency || len(rep.Results) != 0 {
			t.Errorf("%v: report %+v, want target %q, dialect %q, error naming %q", tc.args, rep, tc.target, tc.dialect, tc.e)
		}
	}
}

// TestConformanceFailedSetUp: when the scratch tables cannot be created
// (the dialect's last migration fails, as TiDB refused the MySQL
// dialect's dead-state migration), the run is a set-up error: exit 2, the
// line on stderr and, with --json, a report naming the error; and no case
// leaves a table behind (the tables each case created before the failing
// migration are dropped).
func TestConformanceFailedSetUp(t *testing.T) {
	db, err := sql.Open("sqlite3", sqlitedialect.DSN(filepath.Join(t.TempDir(), "fail.db"), 5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	db.SetMaxOpenConns(8)
	for _, asJSON := range []bool{false, true} {
		var out, errb bytes.Buffer
		tg := conformance.StoreTarget("sqlite:fail.db", db, testdb.FailingSchema(sqlitedialect.New()))
		opts := []conformance.Option{conformance.WithConcurrency(4), conformance.WithKeys(2), conformance.WithCases("herd", "expiry")}
		code := checkConformance(context.Background(), tg, opts, asJSON, &out, &errb)
		if errs := errb.String(); code != 2 || !strings.HasPrefix(errs, "opledger conformance: set-up: create scratch table") ||
			!strings.Contains(errs, "no_such_column") {
			t.Fatalf("json %v: exit %d, stderr %q; want 2 and the set-up error", asJSON, code, errs)
		}
		if asJSON {
			rep := setUpReport(t, out.String())
			if !strings.Contains(rep.Error, "no_such_column") || rep.Dialect != "sqlite" || rep.Target != "sqlite:fail.db" || len(rep.Results) == 0 {
				t.Errorf("JSON report: %+v", rep)
			}
		}
		if left := testdb.TablesLike(t, db, sqlitedialect.New(), "opl_conf_"); len(left) != 0 {
			t.Fatalf("json %v: the failed set-ups left %v behind", asJSON, left)
		}
	}
}
