package chaos

import (
	"bytes"
	"context"
	"database/sql"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	_ "github.com/mattn/go-sqlite3" // driver "sqlite3"

	"github.com/opledger/opledger/cmd/opledger/internal/timeline"
	"github.com/opledger/opledger/dialects"
	"github.com/opledger/opledger/dialects/sqlite"
	"github.com/opledger/opledger/policy"
)

// TestMain lets the test binary stand in for the command when a run of
// the tests starts replicas (os.Executable is the test binary here): with
// ReplicaEnv set it serves as one, as the command's ReplicaCommand does,
// on SQLite only.
func TestMain(m *testing.M) {
	if os.Getenv(ReplicaEnv) == "1" {
		os.Exit(serveTestReplica(os.Args[1:]))
	}
	os.Exit(m.Run())
}

// serveTestReplica is the command's hidden ReplicaCommand for this test
// binary: args are ReplicaCommand and its flags.
func serveTestReplica(args []string) int {
	if len(args) == 0 || args[0] != ReplicaCommand {
		fmt.Fprintf(os.Stderr, "a replica is started as %s, not %q\n", ReplicaCommand, args)
		return 2
	}
	fs := flag.NewFlagSet(ReplicaCommand, flag.ContinueOnError)
	var rs ReplicaSettings
	rs.SetFlags(fs)
	if err := fs.Parse(args[1:]); err != nil {
		return 2
	}
	if err := ServeReplica(context.Background(), rs, testOpener, os.Stdout); err != nil {
		fmt.Fprintf(os.Stderr, "%s: %v\n", ReplicaCommand, err)
		return 2
	}
	return 0
}

// testOpener opens the sqlite: DSNs of these tests' runs: the command's
// opener takes every form, and lives with the command.
var testOpener = Opener{DB: openSQLite}

// openSQLite opens a sqlite:PATH DSN.
func openSQLite(ctx context.Context, dsn, driver string) (*sql.DB, dialects.Dialect, error) {
	path, ok := strings.CutPrefix(dsn, "sqlite:")
	if !ok || driver != "" {
		return nil, nil, fmt.Errorf("the tests' opener takes sqlite:PATH on its own driver only, not %q with driver %q", dsn, driver)
	}
	db, err := sql.Open("sqlite3", sqlite.DSN(path, 5*time.Second))
	if err != nil {
		return nil, nil, err
	}
	if err := db.PingContext(ctx); err != nil {
		db.Close()
		return nil, nil, err
	}
	return db, sqlite.New(), nil
}

// TestRunSQLite runs the harness itself, small, on a SQLite file given
// by DSN: three replica processes (this test binary, through TestMain),
// one SIGKILL by the run, one after a COMMIT, a total outage, proxy
// faults; every call accounted for and the promise kept. The table, the
// JSON and the picture show it.
func TestRunSQLite(t *testing.T) {
	t.Parallel()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	s := Settings{Calls: 200, Replicas: 3, Seed: 11, Duration: 2 * time.Minute, CallTimeout: 30 * time.Second,
		Owner: policy.OwnerApplication, Kills: 1, CommitKills: 1, DBRestarts: 1, Failovers: 1, Exe: exe, Open: testOpener}
	path := filepath.Join(t.TempDir(), "run.db")
	var progress bytes.Buffer
	reps, failed, err := Run(t.Context(), s, []Target{Given("sqlite:"+path, "sqlite:"+path)}, &progress)
	if err != nil || failed || len(reps) != 1 {
		t.Fatalf("failed %v, %d reports, %v\n%s", failed, len(reps), err, progress.String())
	}
	r := reps[0]
	if r.Calls != 200 || r.ReturnedOK+r.Definite+r.Ambiguous != r.Calls || r.Killed < 1 || r.KilledAfterCommit < 1 || r.OutageCalls == 0 ||
		r.Duplicates+r.Lost+r.WrongAnswers+r.AmbiguousEarly+r.Unresolved+r.AckLost+r.CommittedLost+r.ExecutedTwice != 0 {
		t.Errorf("the run: %+v", r)
	}
	if r.DBRestarts != 0 || r.DBRestartNote == "" || r.OutageKind != "every replica killed for 1s" {
		t.Errorf("a database given by DSN is never restarted: %d restarts (%q), outage %q", r.DBRestarts, r.DBRestartNote, r.OutageKind)
	}
	var table bytes.Buffer
	PrintTable(&table, reps)
	for _, want := range []string{"database", "duplicate effects (must be 0)", "lost effects (must be 0)", "sqlite:" + path} {
		if !strings.Contains(table.String(), want) {
			t.Errorf("the table has no %q:\n%s", want, table.String())
		}
	}
	var js bytes.Buffer
	if err := WriteJSON(&js, reps); err != nil {
		t.Fatal(err)
	}
	var fields []map[string]any
	if err := json.Unmarshal(js.Bytes(), &fields); err != nil || len(fields) != 1 {
		t.Fatalf("the JSON: %v\n%s", err, js.String())
	}
	for _, k := range []string{"database", "logical_calls", "duplicate_effects", "lost_effects", "wrong_answers", "replicas_killed_after_commit", "outage_calls"} {
		if _, ok := fields[0][k]; !ok {
			t.Errorf("the JSON has no %q: %s", k, js.String())
		}
	}
	svg := filepath.Join(t.TempDir(), "run.svg")
	if written, err := WriteReports(svg, reps); err != nil || len(written) != 1 || written[0] != svg {
		t.Fatalf("WriteReports: %v, %v", written, err)
	}
	f, err := os.Open(svg)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	faults, err := timeline.ReadFaults(f)
	if err != nil || len(faults) == 0 {
		t.Errorf("the picture: %d faults, %v", len(faults), err)
	}
}

// TestSVGPath: one run's picture goes to the path given; several runs'
// each to the path with its database's name before the extension.
func TestSVGPath(t *testing.T) {
	t.Parallel()
	if got := SVGPath("out/chaos.svg", "postgres via pgbouncer (pgx)", 1); got != "out/chaos.svg" {
		t.Errorf("one run: %q", got)
	}
	if got := SVGPath("out/chaos.svg", "postgres via pgbouncer (pgx)", 2); got != "out/chaos-postgres-via-pgbouncer-pgx.svg" {
		t.Errorf("two runs: %q", got)
	}
}
