package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/opledger/opledger/cmd/opledger/internal/chaos"
	"github.com/opledger/opledger/cmd/opledger/internal/timeline"
	"github.com/opledger/opledger/internal/harness/throwaway"
	"github.com/opledger/opledger/ledger"
)

// TestMain lets the test binary stand in for opledger when `opledger
// chaos` re-executes itself as a replica (os.Executable is the test
// binary here).
func TestMain(m *testing.M) {
	if os.Getenv(chaos.ReplicaEnv) == "1" {
		os.Exit(run(context.Background(), os.Args[1:], os.Stdout, os.Stderr))
	}
	os.Exit(m.Run())
}

// runChaosJSON runs `opledger chaos` with args and --json and returns its
// exit code and reports.
func runChaosJSON(t *testing.T, args ...string) (int, []chaos.Report, string) {
	t.Helper()
	var out, errb bytes.Buffer
	code := run(t.Context(), append(append([]string{"chaos"}, args...), "--json"), &out, &errb)
	var reps []chaos.Report
	if code != 2 {
		if err := json.Unmarshal(out.Bytes(), &reps); err != nil {
			t.Fatalf("the --json output: %v\n%s\n%s", err, out.String(), errb.String())
		}
	}
	if code != 0 {
		// A failed run's reports say which run broke what: shown with the
		// test's failure (or with -v).
		t.Logf("chaos %v: exit %d, the reports:\n%s", args, code, out.String())
	}
	return code, reps, errb.String()
}

func checkChaosReport(t *testing.T, r chaos.Report, calls int) {
	t.Helper()
	if r.Calls != calls || r.ReturnedOK+r.Definite+r.Ambiguous != r.Calls {
		t.Errorf("%s: %d calls (want %d): %d OK + %d definite + %d ambiguous", r.Database, r.Calls, calls, r.ReturnedOK, r.Definite, r.Ambiguous)
	}
	if r.Failed() || r.Duplicates+r.Lost+r.WrongAnswers+r.AmbiguousEarly+r.Unresolved != 0 {
		t.Errorf("%s: the promise broke: %+v", r.Database, r)
	}
	if r.Executed < r.ReturnedOK || r.Attempts < int64(r.Calls) {
		t.Errorf("%s: executed %d < OK %d, or attempts %d < calls", r.Database, r.Executed, r.ReturnedOK, r.Attempts)
	}
	if r.Killed < 1 {
		t.Errorf("%s: no replica killed: %+v", r.Database, r)
	}
	if r.AckLost+r.CommittedLost+r.ExecutedTwice != 0 {
		t.Errorf("%s: %d acknowledged and lost, %d committed and lost, %d executed twice", r.Database, r.AckLost, r.CommittedLost, r.ExecutedTwice)
	}
}

// checkReportSVG parses the picture of r's run (encoding/xml, through
// timeline.ReadFaults) and finds every fault the report counts: each
// replica kill, each kill after COMMIT, each database restart, failover
// and rejoin, each cut and blackhole of the proxies.
func checkReportSVG(t *testing.T, path string, r chaos.Report) {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	faults, err := timeline.ReadFaults(f)
	if err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	got := map[string]int{}
	for _, x := range faults {
		got[x.Kind]++
	}
	want := map[string]int{
		timeline.FaultReplicaKill: r.Killed - r.KilledAfterCommit,
		timeline.FaultCommitKill:  r.KilledAfterCommit,
		timeline.FaultCut:         int(r.CutEvents),
		timeline.FaultBlackhole:   int(r.Blackholes),
		timeline.FaultFailover:    r.Failovers,
		timeline.FaultRejoin:      r.Failovers,
	}
	if r.DBRestartNote == "" {
		want["db restarts"] = r.DBRestarts
		got["db restarts"] = got[timeline.FaultDBCrash] + got[timeline.FaultDBRestart]
	} else if r.OutageCalls > 0 && got[timeline.FaultOutage] == 0 {
		t.Errorf("%s: an outage (%d calls) without its marker", r.Database, r.OutageCalls)
	}
	for k, n := range want {
		if got[k] != n {
			t.Errorf("%s: %d %s markers in the picture, the report counts %d", r.Database, got[k], k, n)
		}
	}
	if r.CutEvents == 0 || r.Killed == 0 {
		t.Errorf("%s: a run without cuts (%d) or kills (%d)", r.Database, r.CutEvents, r.Killed)
	}
}

// TestChaosSQLite runs the command at a small size on SQLite: three
// replica processes on one WAL file, one SIGKILL by the run, one after a
// COMMIT, a total outage, proxy faults.
func TestChaosSQLite(t *testing.T) {
	t.Parallel()
	svg := filepath.Join(t.TempDir(), "sqlite.svg")
	code, reps, stderr := runChaosJSON(t, "--databases", "sqlite", "--calls", "300", "--kills", "1", "--commit-kills", "1", "--seed", "7",
		"--report", svg)
	if code != 0 || len(reps) != 1 {
		t.Fatalf("exit %d, %d reports\n%s", code, len(reps), stderr)
	}
	r := reps[0]
	checkChaosReport(t, r, 300)
	checkReportSVG(t, svg, r)
	if r.DBRestarts != 0 || r.DBRestartNote == "" || r.OutageCalls == 0 {
		t.Errorf("sqlite: restarts %d (%q), outage calls %d", r.DBRestarts, r.DBRestartNote, r.OutageCalls)
	}
}

// TestChaosClaimAtCommit: the same small SQLite run with the replicas
// claiming Transfer at commit.
func TestChaosClaimAtCommit(t *testing.T) {
	t.Parallel()
	code, reps, stderr := runChaosJSON(t, "--databases", "sqlite", "--calls", "300", "--kills", "1", "--commit-kills", "1", "--seed", "8", "--claim-at-commit")
	if code != 0 || len(reps) != 1 {
		t.Fatalf("exit %d, %d reports\n%s", code, len(reps), stderr)
	}
	if reps[0].Order != "claim-at-commit" {
		t.Fatalf("order %q", reps[0].Order)
	}
	checkChaosReport(t, reps[0], 300)
}

// TestChaosServiceConfigOwner runs the replicas' clients with grpc-go's
// own retries owning the channel, on five seeds: a call whose earlier
// attempt may have committed is resolved before anything definite is
// reported, so no run has a wrong answer (a committed call reported as a
// definite failure). .ci/run runs the same five seeds on PostgreSQL and
// MariaDB, whose restarts fail later attempts at the ledger.
func TestChaosServiceConfigOwner(t *testing.T) {
	t.Parallel()
	for seed := 1; seed <= 5; seed++ {
		code, reps, stderr := runChaosJSON(t, "--databases", "sqlite", "--owner", "service-config", "--calls", "200",
			"--kills", "1", "--commit-kills", "1", "--seed", strconv.Itoa(seed))
		if code != 0 || len(reps) != 1 {
			t.Fatalf("seed %d: exit %d, %d reports\n%s", seed, code, len(reps), stderr)
		}
		if reps[0].Owner != "service-config" {
			t.Fatalf("seed %d: owner %q", seed, reps[0].Owner)
		}
		checkChaosReport(t, reps[0], 200)
	}
}

// TestChaosPostgres runs the command at a small size on a throw-away
// PostgreSQL: a restart of the server itself, kills, cuts between the
// replicas and the database.
func TestChaosPostgres(t *testing.T) {
	t.Parallel()
	needPostgres(t)
	oneAtATime(t)
	svg := filepath.Join(t.TempDir(), "postgres.svg")
	code, reps, stderr := runChaosJSON(t, "--databases", "postgres", "--calls", "300", "--kills", "2", "--commit-kills", "1", "--report", svg)
	if code != 0 || len(reps) != 1 {
		t.Fatalf("exit %d, %d reports\n%s", code, len(reps), stderr)
	}
	r := reps[0]
	checkChaosReport(t, r, 300)
	checkReportSVG(t, svg, r)
	if r.DBRestarts != 1 || r.Cuts == 0 {
		t.Errorf("postgres: %d restarts, %d cuts", r.DBRestarts, r.Cuts)
	}
}

// TestChaosPgxNative is TestChaosPostgres with the replicas on pgx's
// native API (--driver pgx-native: the keyed calls in pipelined pgx
// transactions through pgxledger), claim first and at commit: a restart
// of the server, replicas killed (one after a COMMIT, before the answer),
// cuts between the replicas and the database; 0 duplicates, 0 losses, 0
// ambiguous.
func TestChaosPgxNative(t *testing.T) {
	t.Parallel()
	needPostgres(t)
	oneAtATime(t)
	for _, order := range [][]string{nil, {"--claim-at-commit"}} {
		args := append([]string{"--databases", "postgres", "--driver", "pgx-native", "--calls", "300", "--kills", "2", "--commit-kills", "1", "--seed", "9"}, order...)
		code, reps, stderr := runChaosJSON(t, args...)
		if code != 0 || len(reps) != 1 {
			t.Fatalf("%v: exit %d, %d reports\n%s", args, code, len(reps), stderr)
		}
		r := reps[0]
		checkChaosReport(t, r, 300)
		if r.Driver != "pgx-native" || !strings.Contains(r.Database, "pgx-native") {
			t.Errorf("driver %q, database %q; want the replicas on pgx-native", r.Driver, r.Database)
		}
		if r.DBRestarts != 1 || r.Cuts == 0 {
			t.Errorf("%s: %d restarts, %d cuts", r.Database, r.DBRestarts, r.Cuts)
		}
	}
}

// TestChaosPgxNativePgBouncer: the replicas on pgx-native behind a
// throw-away PgBouncer in transaction mode (pgx in exec mode), the
// PostgreSQL behind it restarted, kills and cuts: 0 duplicates, 0 losses,
// 0 ambiguous.
func TestChaosPgxNativePgBouncer(t *testing.T) {
	t.Parallel()
	needPostgres(t)
	if !throwaway.PgBouncerInstalled() {
		if os.Getenv("OPLEDGER_TEST_REQUIRE_DBS") == "1" {
			t.Fatal("pgbouncer is not installed, and OPLEDGER_TEST_REQUIRE_DBS=1 requires every database")
		}
		t.Skip("pgbouncer is not installed")
	}
	oneAtATime(t)
	code, reps, stderr := runChaosJSON(t, "--databases", "pgbouncer", "--driver", "pgx-native", "--calls", "300", "--kills", "1", "--commit-kills", "1", "--seed", "10")
	if code != 0 || len(reps) != 1 {
		t.Fatalf("exit %d, %d reports\n%s", code, len(reps), stderr)
	}
	checkChaosReport(t, reps[0], 300)
	if reps[0].Driver != "pgx-native" {
		t.Errorf("driver %q, want pgx-native", reps[0].Driver)
	}
}

func TestChaosFlags(t *testing.T) {
	t.Parallel()
	for _, args := range [][]string{
		{"--databases", "oracle"}, {"--replicas", "0"}, {"--calls", "-1"}, {"--owner", "mesh"}, {"--kills", "1000"}, {"extra"},
		{"--driver", "odbc"}, {"--driver", "pgx-native", "--failover"},
	} {
		var out, errb bytes.Buffer
		if code := run(t.Context(), append([]string{"chaos"}, args...), &out, &errb); code != 2 {
			t.Errorf("chaos %v: exit %d, want 2", args, code)
		}
	}
	// The replica command is hidden from the usage text.
	var out bytes.Buffer
	run(t.Context(), []string{"help"}, &out, &out)
	if bytes.Contains(out.Bytes(), []byte(chaos.ReplicaCommand)) || !bytes.Contains(out.Bytes(), []byte("chaos ")) {
		t.Errorf("usage:\n%s", out.String())
	}
}

// TestChaosFindsABrokenService breaks the service on purpose
// (--break-keys: every attempt a fresh key, so a retry after an answer
// lost to a kill after COMMIT runs the work again): the run must count
// the duplicates and exit 1.
func TestChaosFindsABrokenService(t *testing.T) {
	t.Parallel()
	code, reps, stderr := runChaosJSON(t, "--databases", "sqlite", "--calls", "300", "--kills", "0", "--commit-kills", "2",
		"--db-restarts", "0", "--seed", "3", "--break-keys")
	if code != 1 || len(reps) != 1 {
		t.Fatalf("exit %d (want 1), %d reports\n%s", code, len(reps), stderr)
	}
	if r := reps[0]; r.Duplicates < 1 || r.KilledAfterCommit < 1 || r.Executed <= r.Calls-r.Duplicates {
		t.Fatalf("a broken service: %d duplicates, %d kills after COMMIT, %d rows for %d calls", r.Duplicates, r.KilledAfterCommit, r.Executed, r.Calls)
	}
}

// TestChaosGivenDSN runs on a database given with --dsn (here a SQLite
// file): never restarted, and left as it was found.
func TestChaosGivenDSN(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "mine.db")
	code, reps, stderr := runChaosJSON(t, "--dsn", "sqlite:"+path, "--calls", "200", "--kills", "1", "--commit-kills", "1")
	if code != 0 || len(reps) != 1 {
		t.Fatalf("exit %d, %d reports\n%s", code, len(reps), stderr)
	}
	r := reps[0]
	checkChaosReport(t, r, 200)
	if r.DBRestarts != 0 || r.DBRestartNote == "" || r.OutageCalls == 0 {
		t.Errorf("given DSN: restarts %d (%q), outage calls %d", r.DBRestarts, r.DBRestartNote, r.OutageCalls)
	}
	db, tg, err := openDB(t.Context(), "sqlite:"+path)
	if err != nil {
		t.Fatalf("the given file: %v", err)
	}
	defer db.Close()
	var tables, entries int
	if err := db.QueryRow("SELECT COUNT(*) FROM sqlite_master WHERE name LIKE 'opledger_chaos_%'").Scan(&tables); err != nil {
		t.Fatal(err)
	}
	if err := db.QueryRow("SELECT COUNT(*) FROM " + tg.dialect.QuoteIdent(ledger.DefaultTable)).Scan(&entries); err != nil {
		t.Fatal(err)
	}
	if tables != 0 || entries != 0 {
		t.Errorf("left behind: %d business tables, %d ledger entries", tables, entries)
	}
}

// TestChaosGivenDSNThroughPgBouncer runs on a --dsn through PgBouncer in
// transaction mode (pgx with its setting), the ledger table migrated
// beforehand over a direct connection: the run accepts the migration
// lock's refusal once the table is there. PgBouncer crashes mid-run and is
// restarted: the run's check is the same.
func TestChaosGivenDSNThroughPgBouncer(t *testing.T) {
	t.Parallel()
	oneAtATime(t)
	backend := throwaway.Postgres(t)
	pb := throwaway.PgBouncer(t, backend, throwaway.PgBouncerOptions{})
	var out, errb bytes.Buffer
	if code := run(t.Context(), []string{"migrate", "up", "--dsn", backend.DSN()}, &out, &errb); code != 0 {
		t.Fatalf("migrate up over the direct connection: exit %d: %s", code, errb.String())
	}
	// PgBouncer is SIGKILLed mid-run and restarted (so is a crash of its own).
	checkPoolerCrashes := crashPoolerMidRun(t, backend, pb, 100)
	code, reps, stderr := runChaosJSON(t, "--dsn", pb.DriverDSN("pgx"), "--calls", "300", "--kills", "1", "--commit-kills", "1")
	checkPoolerCrashes()
	if code != 0 || len(reps) != 1 {
		t.Fatalf("exit %d, %d reports\n%s", code, len(reps), stderr)
	}
	checkChaosReport(t, reps[0], 300)
	if reps[0].Cuts == 0 {
		t.Errorf("no cut between the replicas and PgBouncer: %+v", reps[0])
	}
}

// TestChaosFailover runs a failover at a small size: a throw-away
// primary and a synchronous standby, pgx, the primary SIGKILLed mid-run,
// the standby promoted and the old primary rewound and rejoined; all
// zeros, and every fault in the picture. .ci/run runs the command itself
// in both replication modes with both Go drivers (a build without the
// race detector, whose replicas cost a third of these).
func TestChaosFailover(t *testing.T) {
	t.Parallel()
	needPostgres(t)
	oneAtATime(t)
	reps := chaosFailover(t, 1, "--databases", "postgres", "--replication", "sync", "--drivers", "pgx", "--calls", "300")
	if reps[0].Replication != "sync" || reps[0].Driver != "pgx" {
		t.Errorf("run: %s %s", reps[0].Replication, reps[0].Driver)
	}
}

// TestChaosFailoverMariaDB runs a failover at a small size on a
// throw-away MariaDB primary and semi-synchronous replica (AFTER_SYNC):
// all zeros. .ci/run runs the asynchronous mode too.
func TestChaosFailoverMariaDB(t *testing.T) {
	t.Parallel()
	if !throwaway.MariaDBInstalled() {
		if os.Getenv("OPLEDGER_TEST_REQUIRE_DBS") == "1" {
			t.Fatal("MariaDB's server binaries are not installed")
		}
		t.Skip("MariaDB's server binaries are not installed")
	}
	oneAtATime(t)
	reps := chaosFailover(t, 1, "--databases", "mariadb", "--replication", "sync", "--calls", "300")
	if reps[0].Replication != "semisync" || reps[0].Driver != "go-sql-driver/mysql" {
		t.Errorf("run: %s %s", reps[0].Replication, reps[0].Driver)
	}
}

// chaosFailover runs `opledger chaos --failover` with one failover per
// run, one replica kill and one kill after COMMIT, and checks each of the
// n reports and its picture.
func chaosFailover(t *testing.T, n int, args ...string) []chaos.Report {
	t.Helper()
	svg := filepath.Join(t.TempDir(), "failover.svg")
	// The replicas are this race-instrumented binary: on a loaded 2-core
	// machine a call can take many seconds while the pair fails over, and
	// a synchronous run must return no ambiguous answer, so each call gets
	// a deadline the machine cannot reach (the window is measured apart).
	code, reps, stderr := runChaosJSON(t, append([]string{"--failover", "--failovers", "1", "--kills", "1", "--commit-kills", "1",
		"--call-timeout", "2m", "--duration", "5m", "--report", svg, "--strict"}, args...)...)
	if code != 0 || len(reps) != n {
		t.Fatalf("exit %d, %d reports\n%s", code, len(reps), stderr)
	}
	for _, r := range reps {
		if r.Failovers != 1 || len(r.FailoverWindowsMS) != 1 || r.FailoverWindowsMS[0] <= 0 || len(r.PromoteMS) != 1 || len(r.RejoinMS) != 1 {
			t.Errorf("%s: %d failovers, windows %v, promotions %v, rejoins %v", r.Database, r.Failovers, r.FailoverWindowsMS, r.PromoteMS, r.RejoinMS)
		}
		if r.Calls != reps[0].Calls || r.ReturnedOK+r.Definite+r.Ambiguous != r.Calls || r.Duplicates != 0 || r.WrongAnswers != 0 ||
			r.Unresolved != 0 || r.AmbiguousEarly != 0 || r.RowsNoLedger != 0 || r.LedgerNoRow != 0 {
			t.Errorf("%s: %+v", r.Database, r)
		}
		switch r.Replication {
		case "sync", "semisync":
			if r.Lost+r.AckLost+r.CommittedLost+r.ExecutedTwice+r.Ambiguous != 0 {
				t.Errorf("%s: synchronous replication must show all zeros: %d lost, %d acknowledged and lost, %d committed and lost, %d executed twice, %d ambiguous",
					r.Database, r.Lost, r.AckLost, r.CommittedLost, r.ExecutedTwice, r.Ambiguous)
			}
		case "async":
			if r.Lost != r.AckLost || r.Executed+r.AckLost < r.Calls-r.Definite-r.Ambiguous {
				t.Errorf("%s: %d lost, %d of them acknowledged and lost; %d rows for %d calls", r.Database, r.Lost, r.AckLost, r.Executed, r.Calls)
			}
		default:
			t.Errorf("%s: replication %q", r.Database, r.Replication)
		}
		checkReportSVG(t, chaos.SVGPath(svg, r.Database, n), r) // one run: the file as given; several: one each
	}
	return reps
}

// throwawayRuns lets one chaos run on throw-away servers go at a time.
// Each is three replica processes, a client and its servers: run side by
// side on a 2-core machine they starve one another until calls reach
// their deadlines, which tests the machine, not the kit.
var throwawayRuns sync.Mutex

// oneAtATime holds t until no other chaos run on throw-away servers is
// going (call it after t.Parallel).
func oneAtATime(t *testing.T) {
	t.Helper()
	throwawayRuns.Lock()
	t.Cleanup(throwawayRuns.Unlock)
}

// needPostgres skips t without PostgreSQL's server binaries, or fails it
// when OPLEDGER_TEST_REQUIRE_DBS=1.
func needPostgres(t *testing.T) {
	t.Helper()
	if !throwaway.PostgresInstalled() {
		if os.Getenv("OPLEDGER_TEST_REQUIRE_DBS") == "1" {
			t.Fatal("PostgreSQL's server binaries are not installed")
		}
		t.Skip("PostgreSQL's server binaries are not installed")
	}
}

// TestChaosConnect: the small SQLite run with the replicas serving
// connect-go handlers (connectint, HTTP/1.1 and h2c) and the client on
// connect-go, its calls alternating between the Connect protocol over
// HTTP/1.1 and the gRPC protocol over h2c, each attempt to the next
// replica: the same kills, cut connections and outage, the same zeros.
func TestChaosConnect(t *testing.T) {
	t.Parallel()
	code, reps, stderr := runChaosJSON(t, "--databases", "sqlite", "--calls", "300", "--kills", "1", "--commit-kills", "1", "--seed", "9",
		"--transport", "connect")
	if code != 0 || len(reps) != 1 {
		t.Fatalf("exit %d, %d reports\n%s", code, len(reps), stderr)
	}
	r := reps[0]
	if r.Transport != "connect" {
		t.Fatalf("transport %q, want connect", r.Transport)
	}
	checkChaosReport(t, r, 300)
	if r.KilledAfterCommit < 1 || r.Cuts == 0 || r.OutageCalls == 0 || r.Resolved == 0 {
		t.Errorf("sqlite over connect: %d killed after COMMIT, %d cuts, %d outage calls, %d resolved; want each",
			r.KilledAfterCommit, r.Cuts, r.OutageCalls, r.Resolved)
	}
	if code, _, _ := runChaosJSON(t, "--databases", "sqlite", "--transport", "connect", "--owner", "service-config"); code != 2 {
		t.Errorf("--transport connect --owner service-config: exit %d, want 2", code)
	}
}
