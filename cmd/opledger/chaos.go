package main

import (
	"context"
	cryptorand "crypto/rand"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"text/tabwriter"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/opledger/opledger/dialects"
	"github.com/opledger/opledger/dialects/postgres"
	"github.com/opledger/opledger/examples/payments"
	"github.com/opledger/opledger/examples/payments/paymentspb"
	"github.com/opledger/opledger/grpcint"
	"github.com/opledger/opledger/internal/harness/faultproxy"
	"github.com/opledger/opledger/internal/harness/throwaway"
	"github.com/opledger/opledger/internal/harness/timeline"
	"github.com/opledger/opledger/internal/wait"
	"github.com/opledger/opledger/ledger"
	"github.com/opledger/opledger/migrations"
	"github.com/opledger/opledger/policy"
)

func init() {
	extraCommands["chaos"] = command{"run replicas of the example service as processes on throw-away databases; kill them, restart the database, cut connections; count duplicate and lost effects", runChaos}
}

// chaosDefaultCalls are the logical calls of the CI-sized run per
// database (--calls overrides them all).
var chaosDefaultCalls = map[string]int{chaosPostgres: 10_000, chaosPgBouncer: 3_000, chaosPgBouncerPQ: 1_000,
	chaosMariaDB: 3_000, chaosSQLite: 1_000, "dsn": 1_000}

// chaosSettings are one run's knobs.
type chaosSettings struct {
	calls, replicas, concurrency int
	seed                         uint64
	duration, callTimeout        time.Duration
	owner                        policy.RetryOwner
	kills, commitKills           int
	dbRestarts                   int
	proxyEvery                   time.Duration
	exe                          string
	breakKeys                    bool
	atCommit                     bool
	failovers                    int
	driver                       string // --driver: the replicas' PostgreSQL driver ("" for the database's own)
	transport                    string // --transport: chaosGRPC or chaosConnect
	dir                          string // the run's temporary directory
}

// chaosReport is what one database's run measured. Its JSON names are
// the --json output.
type chaosReport struct {
	Database            string         `json:"database"`
	Transport           string         `json:"transport"` // grpc or connect
	Owner               string         `json:"owner"`
	Order               string         `json:"order"` // claim-first or claim-at-commit
	Seed                uint64         `json:"seed"`
	Replicas            int            `json:"replicas"`
	Calls               int            `json:"logical_calls"`
	Attempts            int64          `json:"attempts"`
	Executed            int            `json:"executed"`
	Replayed            int64          `json:"replayed"`
	Resolved            int64          `json:"resolved"`
	ReturnedOK          int            `json:"returned_ok"`
	Definite            int            `json:"definite_failures"`
	Ambiguous           int            `json:"ambiguous"`
	AmbiguousEarly      int            `json:"ambiguous_with_deadline_left"`
	AmbiguousMaxLeftMS  float64        `json:"ambiguous_max_deadline_left_ms"`
	Reconciled          int            `json:"reconciled_after_run"`
	Unresolved          int            `json:"unresolved"`
	Duplicates          int            `json:"duplicate_effects"`
	Lost                int            `json:"lost_effects"`
	RowsNoLedger        int            `json:"rows_without_ledger_entry"`
	LedgerNoRow         int            `json:"ledger_entries_without_row"`
	WrongAnswers        int            `json:"wrong_answers"`
	Killed              int            `json:"replicas_killed"`
	KilledAfterCommit   int            `json:"replicas_killed_after_commit"`
	DBRestarts          int            `json:"database_restarts"`
	DBRestartNote       string         `json:"database_restart_note,omitempty"`
	Cuts                int64          `json:"proxy_cuts"`
	Blackholes          int64          `json:"proxy_blackholes"`
	Amplification       float64        `json:"amplification"`
	OutageCalls         int64          `json:"outage_calls"`
	OutageAmplification float64        `json:"outage_amplification"`
	OutageKind          string         `json:"outage"`
	Pooler              string         `json:"pooler,omitempty"`         // the run's own pooler ("PgBouncer 1.18.0"), "" for none
	PoolerRestarts      int            `json:"pooler_restarts"`          // the pooler died by itself and was started again (chaospooler.go)
	PoolerCrashes       []string       `json:"pooler_crashes,omitempty"` // how it died, each time
	P50ms               float64        `json:"p50_ms"`
	P99ms               float64        `json:"p99_ms"`
	ElapsedS            float64        `json:"elapsed_s"`
	StartFailures       int            `json:"replica_start_failures"`
	FailedBy            map[string]int `json:"failed_by,omitempty"`
	ReplicaTrouble      []string       `json:"replica_trouble,omitempty"`
	CutEvents           int64          `json:"proxy_cut_events"`

	// The replicas' own record of the transfers they committed (their
	// commit log), against the database after the run.
	CommittedLost int `json:"committed_lost"`    // committed (the database said so), not in the database after the run
	ExecutedTwice int `json:"executed_twice"`    // logical calls whose work committed more than once
	AckLost       int `json:"acknowledged_lost"` // answered OK, its effect not in the database after the run

	// Failover runs (--failover): the primary killed, the standby
	// promoted, the old primary rejoined as the new standby.
	Replication       string    `json:"replication,omitempty"` // sync, async, remote_apply, semisync
	Driver            string    `json:"driver,omitempty"`
	Failovers         int       `json:"failovers"`
	FailoverWindowsMS []float64 `json:"failover_windows_ms,omitempty"` // from the kill to the first commit after it
	PromoteMS         []float64 `json:"failover_promote_ms,omitempty"` // from the kill until the promotion was confirmed
	RejoinMS          []float64 `json:"failover_rejoin_ms,omitempty"`  // the old primary's rewind and catch-up

	timeline []timeline.Call  // the calls, for the picture
	faults   []timeline.Fault // the faults, for the picture
}

// failed reports whether the run broke the promise: a duplicate, a loss,
// a wrong answer, an ambiguous return that had deadline left, or an
// outcome that never resolved; and, except after a failover to an
// asynchronous standby, a commit lost or a call executed twice. After a
// failover to a synchronous standby, any ambiguous return too. An
// asynchronous failover's acknowledged-and-lost calls are the
// replication's losses, counted but not a failure of the kit.
func (r chaosReport) failed() bool {
	strict := r.synchronousOrNone()
	return r.Duplicates > 0 || r.Lost-r.replicationLoss() > 0 || r.WrongAnswers > 0 || r.AmbiguousEarly > 0 || r.Unresolved > 0 ||
		strict && (r.CommittedLost > 0 || r.ExecutedTwice > 0) || strict && r.Failovers > 0 && r.Ambiguous > 0
}

// shortOf says how the run injected less than s asked for ("" when it
// did not): --strict fails on it.
func (r chaosReport) shortOf(s chaosSettings) string {
	var short []string
	if r.Killed < s.kills {
		short = append(short, fmt.Sprintf("%d replica kills, %d asked", r.Killed, s.kills))
	}
	if r.DBRestartNote == "" && r.DBRestarts < s.dbRestarts {
		short = append(short, fmt.Sprintf("%d database restarts, %d asked", r.DBRestarts, s.dbRestarts))
	}
	if r.Cuts == 0 {
		short = append(short, "no proxy cut")
	}
	if r.Failovers < s.failovers {
		short = append(short, fmt.Sprintf("%d failovers, %d asked", r.Failovers, s.failovers))
	}
	if r.Calls < s.calls {
		short = append(short, fmt.Sprintf("%d logical calls of %d (--duration ended the run)", r.Calls, s.calls))
	}
	return strings.Join(short, "; ")
}

func runChaos(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := newFlags("chaos", stderr)
	dbs := fs.String("databases", "", "comma-separated databases to run on: "+strings.Join(chaosDatabases, ", ")+" (default: every one whose server binaries are installed; SQLite always)")
	calls := fs.Int("calls", 0, "logical calls per database (default: 10000 on postgres, 3000 through pgbouncer with pgx and on mariadb, 1000 through pgbouncer with lib/pq and on sqlite)")
	replicas := fs.Int("replicas", 3, "server replicas (processes)")
	concurrency := fs.Int("concurrency", 0, "calls in flight at once (default 32, 8 on sqlite)")
	seed := fs.Uint64("seed", 1, "seed of every random choice: kill moments, proxy faults, delays")
	duration := fs.Duration("duration", 2*time.Minute, "bound on each database's calls phase; calls not started by then are not made")
	ownerName := fs.String("owner", "application", "retry owner of the client's channel: application or service-config")
	kills := fs.Int("kills", 3, "SIGKILLs of a replica by the run, at seeded moments")
	commitKills := fs.Int("commit-kills", 2, "replicas that SIGKILL themselves after a COMMIT, before the answer")
	restarts := fs.Int("db-restarts", 1, "database server restarts: the first a crash (SIGKILL, then start: recovery runs), the next a clean restart, alternating; on sqlite a total outage of every replica instead")
	callTimeout := fs.Duration("call-timeout", 30*time.Second, "deadline of each logical call")
	asJSON := fs.Bool("json", false, "print the report as JSON")
	dsn := fs.String("dsn", "", "run on this database instead of throw-away ones (never restarted: every replica is taken down for 1s instead; the run's table and ledger entries are removed at the end; default 1000 calls)")
	atCommit := fs.Bool("claim-at-commit", false, "the replicas claim Transfer at commit (grpcint.WithClaimAtCommit): the work runs first, the completed entry is inserted last")
	breakKeys := fs.Bool("break-keys", false, "break the service on purpose: the replicas give every attempt a fresh idempotency key, so retries duplicate; the run must fail (a check of the check)")
	strict := fs.Bool("strict", false, "also fail (exit 1) when a database cannot be started, or a run injected less than asked: fewer replica kills than --kills, fewer database restarts than --db-restarts (server databases), fewer failovers than --failovers, no proxy cut (CI)")
	failover := fs.Bool("failover", false, "run on a throw-away primary and standby instead (postgres: streaming replication; mariadb: semi-synchronous or asynchronous replication): mid-run the primary is SIGKILLed and the standby promoted, then the old primary rejoins as the new standby; --failovers times, once for each --replication mode and --drivers driver")
	replication := fs.String("replication", "sync,async", "with --failover: comma-separated replication modes: sync (postgres synchronous_commit = on; mariadb semi-synchronous, AFTER_SYNC), async, remote_apply (postgres only)")
	driver := fs.String("driver", "", "the replicas' driver on postgres, pgbouncer and a postgres:// --dsn: pgx (pgx's database/sql driver, the default), pq (lib/pq) or pgx-native (pipelined pgx transactions through pgxledger; exec mode through pgbouncer); the other databases keep their own (not with --failover: see --drivers)")
	drivers := fs.String("drivers", "pgx,pq", "with --failover on postgres: comma-separated drivers of the replicas (pgx, pq for lib/pq), each reaching the pair through a multi-host DSN")
	failovers := fs.Int("failovers", 2, "with --failover: failovers per run (the second fails back to the rejoined old primary, and so on)")
	streamDelay := fs.Duration("replication-delay", 10*time.Millisecond, "with --failover: the standby's replication stream goes through a loopback proxy that holds it this long each way (a standby in another zone): an asynchronous standby is this far behind, a synchronous primary waits twice this long for each COMMIT; 0 for plain loopback")
	transport := fs.String("transport", chaosGRPC, "grpc (the replicas serve grpc-go through grpcint; the client is grpc-go's, round_robin) or connect (the replicas serve connect-go handlers through connectint on HTTP/1.1 and h2c; the client is connect-go's, its calls alternating between the Connect protocol over HTTP/1.1 and the gRPC protocol over h2c, each attempt to the next replica)")
	reportSVG := fs.String("report", "", "write a picture of each run to this SVG file (with several runs, the database's name is added before the extension)")
	if code, stop := parseFlags(fs, args, stdout); stop {
		return code
	}
	switch {
	case fs.NArg() > 0:
		return fail(stderr, "chaos", unexpectedArg(fs))
	case *calls < 0 || *calls > 1_000_000:
		return fail(stderr, "chaos", errors.New("--calls must be 0 to 1000000"))
	case *replicas < 1 || *replicas > 16:
		return fail(stderr, "chaos", errors.New("--replicas must be 1 to 16"))
	case *concurrency < 0 || *concurrency > 512:
		return fail(stderr, "chaos", errors.New("--concurrency must be 0 to 512"))
	case *duration <= 0 || *callTimeout <= 0:
		return fail(stderr, "chaos", errors.New("--duration and --call-timeout must be positive"))
	case *kills < 0 || *commitKills < 0 || *restarts < 0 || *kills > 100 || *commitKills > 100 || *restarts > 10:
		return fail(stderr, "chaos", errors.New("--kills and --commit-kills must be 0 to 100, --db-restarts 0 to 10"))
	case *failovers < 1 || *failovers > 10:
		return fail(stderr, "chaos", errors.New("--failovers must be 1 to 10"))
	case *streamDelay < 0 || *streamDelay > 10*time.Second:
		return fail(stderr, "chaos", errors.New("--replication-delay must be 0 to 10s"))
	case *driver != "" && !slices.Contains(chaosDrivers, *driver):
		return fail(stderr, "chaos", fmt.Errorf("--driver %q: want one of %s", *driver, strings.Join(chaosDrivers, ", ")))
	case *driver != "" && *failover:
		return fail(stderr, "chaos", errors.New("--driver is for runs without --failover (use --drivers)"))
	case *transport != chaosGRPC && *transport != chaosConnect:
		return fail(stderr, "chaos", fmt.Errorf("--transport %q: want grpc or connect", *transport))
	}
	owner, err := policy.ParseRetryOwner(*ownerName)
	if err != nil {
		return fail(stderr, "chaos", err)
	}
	if owner != policy.OwnerApplication && owner != policy.OwnerServiceConfig {
		return fail(stderr, "chaos", fmt.Errorf("--owner %s: chaos retries through application or service-config", owner))
	}
	if owner != policy.OwnerApplication && *transport == chaosConnect {
		return fail(stderr, "chaos", fmt.Errorf("--owner %s: over connect-go the application owns the retries", owner))
	}
	targets, explicit, err := chaosTargets(*dbs, *dsn, *failover, *replication, *drivers, *streamDelay)
	if err != nil {
		return fail(stderr, "chaos", err)
	}
	exe, err := os.Executable()
	if err != nil {
		return fail(stderr, "chaos", err)
	}
	dir, err := os.MkdirTemp("", "opledger-chaos-")
	if err != nil {
		return fail(stderr, "chaos", err)
	}
	defer os.RemoveAll(dir)

	var reports []chaosReport
	code := 0
	for _, tg := range targets {
		name := tg.name
		s := chaosSettings{calls: *calls, replicas: *replicas, concurrency: *concurrency, seed: *seed, duration: *duration,
			callTimeout: *callTimeout, owner: owner, kills: *kills, commitKills: *commitKills, dbRestarts: *restarts,
			proxyEvery: 700 * time.Millisecond, exe: exe, breakKeys: *breakKeys, atCommit: *atCommit, driver: *driver, transport: *transport, dir: dir}
		if s.calls == 0 {
			s.calls = chaosDefaultCalls[name]
		}
		if tg.failover {
			// The failovers are the database's faults.
			s.dbRestarts, s.failovers = 0, *failovers
			if *calls == 0 {
				s.calls = chaosFailoverCalls
			}
		}
		serial := name == chaosSQLite
		var db chaosDatabase
		switch {
		case *dsn != "":
			g, err := newGivenDB(*dsn)
			if err != nil {
				return fail(stderr, "chaos", err)
			}
			t, _ := parseDSN(*dsn)
			serial = t.dialect != nil && dialects.TraitsOf(t.dialect).SerialWriters
			db = g
		default:
			what := "a throw-away database"
			if tg.failover {
				what = "a throw-away primary and standby (" + tg.mode + ")"
			}
			fmt.Fprintf(stderr, "opledger chaos: %s: starting %s\n", name, what)
			sctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
			if tg.failover {
				db, err = startFailoverDatabase(sctx, tg)
			} else {
				db, err = startChaosDatabase(sctx, name, dir)
			}
			cancel()
		}
		if s.concurrency == 0 {
			s.concurrency = 32
			if serial {
				s.concurrency = 8
			}
		}
		if errors.Is(err, throwaway.ErrNotInstalled) && !explicit && !*strict {
			fmt.Fprintf(stderr, "opledger chaos: %s: skipped: %v\n", name, err)
			continue
		}
		if err != nil {
			return fail(stderr, "chaos", fmt.Errorf("%s: %w", name, err))
		}
		fmt.Fprintf(stderr, "opledger chaos: %s: %d logical calls over %d replicas, seed %d\n", db.label(), s.calls, s.replicas, s.seed)
		rep, err := chaosRun(ctx, db, s, stderr)
		if cerr := db.close(); err == nil && cerr != nil {
			err = cerr
		}
		if err != nil {
			return fail(stderr, "chaos", fmt.Errorf("%s: %w", db.label(), err))
		}
		reports = append(reports, rep)
		if rep.failed() {
			code = 1
		}
		if short := rep.shortOf(s); *strict && short != "" {
			fmt.Fprintf(stderr, "opledger chaos: %s: --strict: %s\n", rep.Database, short)
			code = 1
		}
		if u := rep.unexplainedPoolerCrashes(); *strict && len(u) > 0 {
			fmt.Fprintf(stderr, "opledger chaos: %s: --strict: the pooler crashed, not of a known PgBouncer bug: %s\n", rep.Database, strings.Join(u, "; "))
			code = 1
		}
	}
	if *reportSVG != "" {
		written, err := writeReports(*reportSVG, reports)
		if err != nil {
			return fail(stderr, "chaos", err)
		}
		for _, p := range written {
			fmt.Fprintf(stderr, "opledger chaos: wrote %s\n", p)
		}
	}
	if *asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		if err := enc.Encode(reports); err != nil {
			return fail(stderr, "chaos", err)
		}
	} else {
		printChaos(stdout, reports)
	}
	if code != 0 {
		fmt.Fprintln(stderr, "opledger chaos: FAIL: a duplicate or lost effect, a wrong answer, an unresolved outcome or an ambiguous return with deadline left")
	}
	return code
}

// printChaos writes the reports as a table: one column per database.
func printChaos(w io.Writer, reps []chaosReport) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	row := func(name string, f func(r chaosReport) any) {
		fmt.Fprintf(tw, "%s\t", name)
		for _, r := range reps {
			fmt.Fprintf(tw, "%v\t", f(r))
		}
		fmt.Fprintln(tw)
	}
	row("database", func(r chaosReport) any { return r.Database })
	row("transport", func(r chaosReport) any { return r.Transport })
	row("retry owner", func(r chaosReport) any { return r.Owner })
	row("claim order", func(r chaosReport) any { return r.Order })
	row("replicas", func(r chaosReport) any { return r.Replicas })
	row("logical calls", func(r chaosReport) any { return r.Calls })
	row("attempts", func(r chaosReport) any { return r.Attempts })
	row("executed (business rows)", func(r chaosReport) any { return r.Executed })
	row("replayed", func(r chaosReport) any { return r.Replayed })
	row("resolved", func(r chaosReport) any { return r.Resolved })
	row("returned OK", func(r chaosReport) any { return r.ReturnedOK })
	row("returned a definite failure", func(r chaosReport) any { return r.Definite })
	row("returned ambiguous", func(r chaosReport) any { return r.Ambiguous })
	row("  of which with ≥100ms of deadline left (must be 0)", func(r chaosReport) any {
		if r.Ambiguous == 0 {
			return r.AmbiguousEarly
		}
		return fmt.Sprintf("%d (most left: %.0fms)", r.AmbiguousEarly, r.AmbiguousMaxLeftMS)
	})
	row("  resolved after the run", func(r chaosReport) any { return r.Reconciled })
	row("unresolved (must be 0)", func(r chaosReport) any { return r.Unresolved })
	row("duplicate effects (must be 0)", func(r chaosReport) any { return r.Duplicates })
	row("lost effects (must be 0)", func(r chaosReport) any {
		if n := r.replicationLoss(); n > 0 {
			return fmt.Sprintf("%d (%d acknowledged and lost by the asynchronous standby)", r.Lost, n)
		}
		return r.Lost
	})
	row("  row without ledger entry", func(r chaosReport) any { return r.RowsNoLedger })
	row("  ledger entry without row", func(r chaosReport) any { return r.LedgerNoRow })
	row("wrong answers (must be 0)", func(r chaosReport) any { return r.WrongAnswers })
	row("acknowledged and lost (0 but after an async failover)", func(r chaosReport) any { return r.AckLost })
	row("committed and lost (0 but after an async failover)", func(r chaosReport) any { return r.CommittedLost })
	row("executed twice (0 but after an async failover)", func(r chaosReport) any { return r.ExecutedTwice })
	row("replicas killed", func(r chaosReport) any { return r.Killed })
	row("  of which after COMMIT, before the answer", func(r chaosReport) any { return r.KilledAfterCommit })
	row("replica restarts that failed (then retried)", func(r chaosReport) any { return r.StartFailures })
	row("database restarts", func(r chaosReport) any {
		if r.DBRestartNote != "" {
			return fmt.Sprintf("%d (%s)", r.DBRestarts, r.DBRestartNote)
		}
		return r.DBRestarts
	})
	if slices.ContainsFunc(reps, func(r chaosReport) bool { return r.Replication != "" }) {
		row("failovers (primary killed, standby promoted, old primary rejoined)", func(r chaosReport) any { return r.Failovers })
		row("  window: kill → first commit", func(r chaosReport) any { return msList(r.FailoverWindowsMS) })
		row("  kill → promotion confirmed (pg_ctl promote -w)", func(r chaosReport) any { return msList(r.PromoteMS) })
		row("  rejoin (pg_rewind, catch-up)", func(r chaosReport) any { return msList(r.RejoinMS) })
	}
	row("proxy cuts (connections)", func(r chaosReport) any { return r.Cuts })
	row("proxy blackholes", func(r chaosReport) any { return r.Blackholes })
	row("pooler restarts (it crashed; started again)", func(r chaosReport) any { return r.poolerRow() })
	row("amplification", func(r chaosReport) any { return fmt.Sprintf("%.2fx", r.Amplification) })
	row("outage", func(r chaosReport) any { return r.OutageKind })
	row("  amplification during the outage", func(r chaosReport) any { return fmt.Sprintf("%.2fx (%d calls)", r.OutageAmplification, r.OutageCalls) })
	row("latency p50", func(r chaosReport) any { return fmt.Sprintf("%.1fms", r.P50ms) })
	row("latency p99", func(r chaosReport) any { return fmt.Sprintf("%.1fms", r.P99ms) })
	row("elapsed", func(r chaosReport) any { return fmt.Sprintf("%.1fs", r.ElapsedS) })
	tw.Flush()
	for _, r := range reps {
		labels := make([]string, 0, len(r.FailedBy))
		for l := range r.FailedBy {
			labels = append(labels, l)
		}
		sort.Strings(labels)
		for _, l := range labels {
			fmt.Fprintf(w, "%s: failed calls: %d × %s\n", r.Database, r.FailedBy[l], l)
		}
		for _, t := range r.ReplicaTrouble {
			fmt.Fprintf(w, "%s: a replica restart failed (it was started again): %s\n", r.Database, t)
		}
		for _, c := range r.PoolerCrashes {
			fmt.Fprintf(w, "%s: the pooler (%s) crashed: %s\n", r.Database, r.Pooler, c)
		}
	}
}

// msList writes milliseconds as "812ms, 1034ms" ("-" for none; "none" for
// a window in which nothing committed).
func msList(v []float64) string {
	if len(v) == 0 {
		return "-"
	}
	out := make([]string, len(v))
	for i, x := range v {
		out[i] = fmt.Sprintf("%.0fms", x)
		if x < 0 {
			out[i] = "none"
		}
	}
	return strings.Join(out, ", ")
}

// chaosCall is one logical call and what it returned.
type chaosCall struct {
	issued       bool
	key, ref     string
	reply        *paymentspb.TransferReply
	err          error
	definite     bool
	label        string        // its error's name (code, reason, decision), as FailedBy counts it
	deadlineLeft bool          // returned with at least resolveTime of its deadline left
	left         time.Duration // how much was left, when it failed
	took         time.Duration
	start        time.Time // when it was made
	resolved     bool      // its answer came from a resolve request
	replayed     bool      // its answer was a replay
	ackLost      bool      // answered OK, and its effect is not in the database (chaosCheck)
}

// chaosRun runs one database's scenario: the replicas, the client, the
// kills, the database restarts and the proxies' faults; then it resolves
// every call that did not return OK and checks both tables.
func chaosRun(ctx context.Context, db chaosDatabase, s chaosSettings, progress io.Writer) (chaosReport, error) {
	start := time.Now()
	if s.transport == "" {
		s.transport = chaosGRPC
	}
	rep := chaosReport{Database: db.label(), Transport: s.transport, Owner: s.owner.String(), Order: "claim-first", Seed: s.seed, Replicas: s.replicas}
	poolerReport := supervisePooler(ctx, db)
	if s.atCommit {
		rep.Order = "claim-at-commit"
	}
	direct, t, err := openDB(ctx, db.directDSN())
	if err != nil {
		return rep, err
	}
	defer direct.Close()
	m, err := migrations.New(direct, t.dialect, migrations.WithTable(ledger.DefaultTable))
	if err != nil {
		return rep, err
	}
	if _, err := m.Up(ctx); errors.Is(err, postgres.ErrTransactionPooling) {
		// Behind a transaction pooler (a --dsn through PgBouncer): the
		// table must have been migrated over a direct connection.
		if _, qerr := direct.ExecContext(ctx, "SELECT 1 FROM "+t.dialect.QuoteIdent(ledger.DefaultTable)+" WHERE 1 = 0"); qerr != nil {
			return rep, fmt.Errorf("%w; migrate the ledger table over a direct connection first (opledger migrate up)", err)
		}
	} else if err != nil {
		return rep, err
	}
	runID := time.Now().UnixNano() % 1_000_000_000
	table := fmt.Sprintf("opledger_chaos_%d", runID)
	caller := fmt.Sprintf("chaos-%d", runID)
	// The replicas authenticate the client by a bearer token issued for
	// this run (they are given its SHA-256, never the token) and take the
	// caller from it (grpcint.CallerFromPrincipal): the ledger's entries
	// are "principal:" and the caller.
	token := cryptorand.Text()
	if err := payments.CreateTable(ctx, direct, t.dialect, table); err != nil {
		return rep, err
	}
	// Leave nothing behind on a database given with --dsn: the business
	// table and this run's ledger entries go.
	defer func() {
		cctx := context.WithoutCancel(ctx)
		_ = payments.DropTable(cctx, direct, t.dialect, table)
		_, _ = direct.ExecContext(cctx, "DELETE FROM "+t.dialect.QuoteIdent(ledger.DefaultTable)+" WHERE caller = "+t.dialect.Placeholder(1), "principal:"+caller)
	}()
	rng := rand.New(rand.NewPCG(s.seed, 0x5eed))

	// A fault proxy between the replicas and each database server.
	var dbProxies []*faultproxy.Proxy
	var vias []string
	for _, a := range db.addrs() {
		p, err := faultproxy.New(a)
		if err != nil {
			return rep, err
		}
		defer p.Close()
		dbProxies, vias = append(dbProxies, p), append(vias, p.Addr())
	}
	replicaDSN := db.replicaDSN(vias)
	fo, _ := db.(failoverDB)
	if fo != nil {
		rep.Replication, rep.Driver = fo.replication(), fo.driverName()
	}
	commitLog := filepath.Join(s.dir, "commits-"+fmt.Sprint(runID)+".log")
	defer os.Remove(commitLog)
	lockWait, maxConns := 2*time.Second, 16
	if dialects.TraitsOf(t.dialect).SerialWriters {
		lockWait, maxConns = 10*time.Second, 4
	}
	perReplica := max(s.calls/s.replicas, 2)
	drv := replicaDriver(db, t, s.driver)
	if drv != db.driver() {
		rep.Driver = drv
		rep.Database += " [" + drv + "]"
	}
	replicaArgs := []string{"--dsn", replicaDSN, "--table", table, "--lock-wait", lockWait.String(),
		"--max-conns", fmt.Sprint(maxConns), "--driver", drv, "--caller", caller, "--token-sha256", payments.TokenDigest(token), "--commit-log", commitLog}
	if s.breakKeys {
		replicaArgs = append(replicaArgs, "--break-keys")
	}
	if s.atCommit {
		replicaArgs = append(replicaArgs, "--claim-at-commit")
	}
	if s.transport == chaosConnect {
		replicaArgs = append(replicaArgs, "--transport", chaosConnect)
	}
	rs, err := newReplicaSet(s.exe, replicaArgs, s.replicas, s.seed, s.commitKills, max(perReplica/8, 1), perReplica/2)
	if err != nil {
		return rep, err
	}
	defer rs.close()
	marks := &faultLog{}
	rs.onKill = func(i int, afterCommit bool) {
		if afterCommit {
			marks.add(timeline.FaultCommitKill, time.Now(), time.Time{}, 0, fmt.Sprintf("replica %d killed itself after a COMMIT, before the answer", i))
		} else {
			marks.add(timeline.FaultReplicaKill, time.Now(), time.Time{}, 0, fmt.Sprintf("replica %d SIGKILLed", i))
		}
	}
	if err := rs.start(ctx); err != nil {
		return rep, err
	}

	// The client: the kit's, its calls spread over the client-side
	// proxies (grpc-go's round_robin; connect: the next replica per
	// attempt).
	newClient := newGRPCChaosClient
	if s.transport == chaosConnect {
		newClient = newConnectChaosClient
	}
	client, err := newClient(s.owner, rs.addrs(), token)
	if err != nil {
		return rep, err
	}
	defer client.close()

	// The faults: the proxies' schedules, and kills and restarts at seeded
	// points of the run's progress.
	fctx, stopFaults := context.WithCancel(ctx)
	var faultsWG sync.WaitGroup
	proxies := []*faultproxy.Proxy{}
	for i, r := range rs.replicas {
		proxies = append(proxies, r.proxy)
		faultsWG.Add(1)
		go func() {
			defer faultsWG.Done()
			_ = r.proxy.Run(fctx, faultproxy.Schedule{Seed: s.seed*131 + uint64(i), Every: s.proxyEvery, Cut: 2, Latency: 1, Blackhole: 1,
				LatencyBy: 10 * time.Millisecond, LatencyFor: 300 * time.Millisecond, BlackholeFor: 150 * time.Millisecond,
				Observe: marks.observeProxy(r.proxy, fmt.Sprintf("client → replica %d", i), 300*time.Millisecond, 150*time.Millisecond)})
		}()
	}
	for i, p := range dbProxies {
		proxies = append(proxies, p)
		faultsWG.Add(1)
		where := "replicas → database"
		if len(dbProxies) > 1 {
			where = fmt.Sprintf("replicas → database node %d", i)
		}
		go func() {
			defer faultsWG.Done()
			_ = p.Run(fctx, faultproxy.Schedule{Seed: s.seed*131 + 97 + uint64(i), Every: s.proxyEvery * 3 / 2, Cut: 3, Latency: 1, Blackhole: 1,
				LatencyBy: 5 * time.Millisecond, LatencyFor: 300 * time.Millisecond, BlackholeFor: 200 * time.Millisecond,
				Observe: marks.observeProxy(p, where, 300*time.Millisecond, 200*time.Millisecond)})
		}()
	}
	type event struct {
		at      float64
		restart bool
	}
	var events []event
	for range s.kills {
		events = append(events, event{at: 0.1 + 0.75*rng.Float64()})
	}
	for k := range s.dbRestarts {
		// Spread over the middle of the run, one per slice.
		lo := 0.3 + 0.4*float64(k)/float64(s.dbRestarts)
		events = append(events, event{at: lo + 0.4/float64(s.dbRestarts)*rng.Float64(), restart: true})
	}
	sort.Slice(events, func(i, j int) bool { return events[i].at < events[j].at })

	calls := make([]chaosCall, s.calls)
	var next, done, started atomic.Int64
	t0 := time.Now()
	deadline := t0.Add(s.duration)
	var outageCalls, outageAttempts atomic.Int64
	var restartsDone, failoversDone atomic.Int64
	var restartErr error
	var restartMu sync.Mutex
	var outageWG sync.WaitGroup
	outage := func(count *atomic.Int64, do func() error) {
		defer outageWG.Done()
		// The window: from the kill until a second after the database
		// (or the replicas) came back, time for the pools to reconnect.
		// Calls in flight at its start count once in both terms: their
		// first attempt was made just before.
		a0, _, _ := client.stats()
		s0, inflight := started.Load(), started.Load()-done.Load()
		err := do()
		if err == nil {
			err = wait.Sleep(ctx, time.Second)
		}
		a1, _, _ := client.stats()
		s1 := started.Load()
		outageAttempts.Add(a1 - a0 + inflight)
		outageCalls.Add(s1 - s0 + inflight)
		if err != nil {
			restartMu.Lock()
			restartErr = errors.Join(restartErr, err)
			restartMu.Unlock()
			return
		}
		count.Add(1)
	}
	rep.OutageKind = "database restart"
	if note := db.restartNote(); note != "" {
		rep.OutageKind = "every replica killed for 1s"
		rep.DBRestartNote = note
	}
	monitorDone := make(chan struct{})
	go func() {
		defer close(monitorDone)
		restarts := 0
		for _, ev := range events {
			for float64(done.Load()) < ev.at*float64(s.calls) {
				if time.Now().After(deadline) || next.Load() >= int64(s.calls) && done.Load() >= int64(s.calls) {
					return
				}
				if wait.Sleep(fctx, 5*time.Millisecond) != nil {
					return
				}
			}
			switch {
			case !ev.restart:
				rs.kill(rs.intn(s.replicas))
			case db.restartNote() == "":
				// The first a crash, the next a clean restart, and so on.
				crash := restarts%2 == 0
				restarts++
				outageWG.Add(1)
				go outage(&restartsDone, func() error {
					rctx, cancel := context.WithTimeout(ctx, time.Minute)
					defer cancel()
					at := time.Now()
					err := db.restart(rctx, crash)
					if crash {
						marks.add(timeline.FaultDBCrash, at, time.Now(), 0, "database server SIGKILLed, then started: crash recovery")
					} else {
						marks.add(timeline.FaultDBRestart, at, time.Now(), 0, "database server stopped cleanly, then started")
					}
					return err
				})
			default:
				outageWG.Add(1)
				go outage(&restartsDone, func() error {
					at := time.Now()
					n := rs.killAll(time.Second)
					err := wait.Sleep(ctx, time.Second)
					marks.add(timeline.FaultOutage, at, time.Now(), n, fmt.Sprintf("every replica (%d running) SIGKILLed, none back for 1s", n))
					return err
				})
			}
		}
	}()
	// The failovers, one after the other: each once its share of the
	// calls is answered and the previous one's old primary has rejoined.
	var fos []failoverTimes
	failoversOver := make(chan struct{})
	go func() {
		defer close(failoversOver)
		if fo == nil {
			return
		}
		for k := range s.failovers {
			at := 0.1 + 0.7*(float64(k)+0.5)/float64(s.failovers)
			for float64(done.Load()) < at*float64(s.calls) {
				if time.Now().After(deadline) || next.Load() >= int64(s.calls) && done.Load() >= int64(s.calls) {
					return
				}
				if wait.Sleep(fctx, 5*time.Millisecond) != nil {
					return
				}
			}
			if done.Load() >= int64(s.calls) || time.Now().After(deadline) {
				return // the calls are over (the previous rejoin took longer): nothing would see it
			}
			var ft failoverTimes
			var promoted bool
			outageWG.Add(1)
			outage(&failoversDone, func() error {
				rctx, cancel := context.WithTimeout(ctx, time.Minute)
				defer cancel()
				var err error
				ft.killAt, ft.killed, ft.promoted, err = fo.failover(rctx)
				promoted = err == nil
				if promoted {
					marks.add(timeline.FaultFailover, ft.killAt, ft.promoted, 0,
						fmt.Sprintf("primary SIGKILLed; standby promoted after %.0fms", ms(ft.promoted.Sub(ft.killAt))))
				}
				return err
			})
			if !promoted {
				return
			}
			rctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
			r0 := time.Now()
			err := fo.rejoin(rctx)
			cancel()
			ft.rejoinAt, ft.rejoined = r0, time.Now()
			fos = append(fos, ft)
			if err != nil {
				restartMu.Lock()
				restartErr = errors.Join(restartErr, fmt.Errorf("rejoin the old primary: %w", err))
				restartMu.Unlock()
				return
			}
			marks.add(timeline.FaultRejoin, r0, ft.rejoined, 0, fmt.Sprintf("old primary rewound and streaming as the standby after %.0fms", ms(ft.rejoined.Sub(r0))))
		}
	}()

	var workers sync.WaitGroup
	for range s.concurrency {
		workers.Add(1)
		go func() {
			defer workers.Done()
			for {
				i := int(next.Add(1) - 1)
				if i >= s.calls || time.Now().After(deadline) || ctx.Err() != nil {
					return
				}
				started.Add(1)
				calls[i] = chaosOne(ctx, client, i, caller, s.callTimeout)
				done.Add(1)
			}
		}()
	}
	workers.Wait()
	<-monitorDone
	<-failoversOver
	outageWG.Wait()
	stopFaults()
	faultsWG.Wait()
	if restartErr != nil {
		return rep, fmt.Errorf("restart the database: %w", restartErr)
	}
	fmt.Fprintf(progress, "opledger chaos: %s: %d calls made in %.1fs; resolving and checking\n", db.label(), done.Load(), time.Since(start).Seconds())

	rep.Attempts, rep.Replayed, rep.Resolved = client.stats()
	parentKills, commitKills, startFailures, trouble := rs.counts()
	// The faults' marks with the counts: a replica that kills itself in
	// the resolves below is neither.
	rep.faults = marks.list(t0)
	rep.Killed, rep.KilledAfterCommit, rep.StartFailures, rep.ReplicaTrouble = parentKills+commitKills, commitKills, startFailures, trouble
	poolerReport(&rep)
	if db.restartNote() == "" {
		rep.DBRestarts = int(restartsDone.Load())
	}
	rep.Failovers = int(failoversDone.Load())
	rep.OutageCalls = outageCalls.Load()
	if rep.OutageCalls > 0 {
		rep.OutageAmplification = float64(outageAttempts.Load()) / float64(rep.OutageCalls)
	}
	for _, p := range proxies {
		ps := p.Stats()
		rep.Cuts += ps.Cuts
		rep.CutEvents += ps.CutEvents
		rep.Blackholes += ps.Blackholes
	}
	// Every replica back, no faults: resolve what did not return OK.
	ectx, cancel := context.WithTimeout(ctx, time.Minute)
	err = rs.ensureRunning(ectx)
	cancel()
	if err != nil {
		_, _, _, trouble := rs.counts()
		return rep, fmt.Errorf("%w (%s)", err, strings.Join(trouble, "; "))
	}
	commits, err := readCommitLog(commitLog)
	if err != nil {
		return rep, fmt.Errorf("the replicas' commit log: %w", err)
	}
	if fo != nil {
		// The pool's connections went to the killed primary: a new one
		// reaches the primary of now.
		d2, _, err := openDB(ctx, db.directDSN())
		if err != nil {
			return rep, err
		}
		defer d2.Close()
		direct = d2
	}
	// The server stores the caller as grpcint.CallerFromPrincipal (and
	// connectint's) names it.
	if err := chaosCheck(ctx, &rep, calls, commits, direct, t.dialect, table, "principal:"+caller, func(c chaosCall) (*paymentspb.TransferReply, bool, error) {
		rctx, cancel := context.WithTimeout(ctx, s.callTimeout)
		defer cancel()
		return client.resolve(rctx, c.key)
	}); err != nil {
		return rep, err
	}
	if rep.Calls > 0 {
		rep.Amplification = float64(rep.Attempts) / float64(rep.Calls)
	}
	rep.FailoverWindowsMS = windows(fos, commits)
	for _, ft := range fos {
		rep.PromoteMS = append(rep.PromoteMS, ms(ft.promoted.Sub(ft.killAt)))
		rep.RejoinMS = append(rep.RejoinMS, ms(ft.rejoined.Sub(ft.rejoinAt)))
	}
	for _, c := range calls {
		if c.issued {
			at := c.start.Sub(t0)
			rep.timeline = append(rep.timeline, timeline.Call{Start: at, End: at + c.took, Outcome: c.outcome()})
		}
	}
	rep.ElapsedS = time.Since(start).Seconds()
	return rep, nil
}

// roundRobinConfig returns the channel's service config with grpc-go's
// round_robin balancer: the kit's own (the retry policy of a
// service-config-owned channel) with loadBalancingConfig added.
func roundRobinConfig(c *grpcint.Client) (string, error) {
	js, err := c.ServiceConfigJSON()
	if err != nil {
		return "", err
	}
	cfg := map[string]any{}
	if js != "" {
		if err := json.Unmarshal([]byte(js), &cfg); err != nil {
			return "", err
		}
	}
	cfg["loadBalancingConfig"] = []any{map[string]any{"round_robin": map[string]any{}}}
	b, err := json.Marshal(cfg)
	return string(b), err
}

// resolveTime is how much of its deadline a call must have left for a
// resolve: several round trips on loopback, with room to spare.
// An ambiguous return with at least that left is a failure of the run.
const resolveTime = 100 * time.Millisecond

// chaosOne makes the i-th logical call through client.
func chaosOne(ctx context.Context, client chaosClient, i int, caller string, timeout time.Duration) chaosCall {
	ref := fmt.Sprintf("%s-%d", caller, i)
	req := &paymentspb.TransferRequest{FromAccount: fmt.Sprintf("acct-%d", i%17), ToAccount: fmt.Sprintf("acct-%d", 17+i%5),
		AmountCents: int64(100 + i), Reference: ref}
	c := chaosCall{issued: true, key: grpcint.NewKey(), ref: ref}
	cctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	c.start = time.Now()
	a, err := client.transfer(cctx, i, c.key, req)
	c.took = time.Since(c.start)
	c.reply, c.err, c.resolved, c.replayed = a.Reply, err, a.Resolved, a.Replayed
	if c.err != nil {
		c.label, c.definite = client.classify(c.err)
		if dl, ok := cctx.Deadline(); ok && cctx.Err() == nil {
			c.left = time.Until(dl)
			c.deadlineLeft = c.left >= resolveTime
		}
	}
	return c
}

// chaosCheck resolves every call that did not return OK and compares the
// calls, the replicas' commit log, the business table and the ledger's
// entries of caller.
func chaosCheck(ctx context.Context, rep *chaosReport, calls []chaosCall, commits []commitRecord, db *sql.DB, d dialects.Dialect, table, caller string,
	resolve func(chaosCall) (*paymentspb.TransferReply, bool, error)) error {
	type row struct {
		n  int
		id int64
	}
	rows := map[string]row{}
	byID := map[int64]string{}
	rs, err := db.QueryContext(ctx, "SELECT id, reference FROM "+d.QuoteIdent(table))
	if err != nil {
		return err
	}
	for rs.Next() {
		var id int64
		var ref string
		if err := rs.Scan(&id, &ref); err != nil {
			rs.Close()
			return err
		}
		r := rows[ref]
		r.n++
		if r.n == 1 {
			r.id = id
		}
		rows[ref] = r
		byID[id] = ref
	}
	if err := rs.Close(); err != nil {
		return err
	}
	rep.Executed = len(byID)
	// The ledger's entries of this run: each successful one names the
	// transfer it committed with.
	ledgerIDs := map[int64]bool{}
	ls, err := db.QueryContext(ctx, "SELECT code, response, completed_at FROM "+d.QuoteIdent(ledger.DefaultTable)+
		" WHERE caller = "+d.Placeholder(1), caller)
	if err != nil {
		return err
	}
	for ls.Next() {
		var code sql.NullInt64
		var resp []byte
		var completed sql.NullInt64
		if err := ls.Scan(&code, &resp, &completed); err != nil {
			ls.Close()
			return err
		}
		if !completed.Valid {
			rep.LedgerNoRow++ // a committed claim without its outcome
			continue
		}
		if code.Int64 != 0 {
			continue // a recorded final error: no business row
		}
		var reply paymentspb.TransferReply
		if err := proto.Unmarshal(resp, &reply); err != nil {
			ls.Close()
			return fmt.Errorf("a ledger entry's response: %w", err)
		}
		ledgerIDs[reply.GetTransferId()] = true
		if _, ok := byID[reply.GetTransferId()]; !ok {
			rep.LedgerNoRow++
		}
	}
	if err := ls.Close(); err != nil {
		return err
	}
	for id := range byID {
		if !ledgerIDs[id] {
			rep.RowsNoLedger++
		}
	}
	rep.Lost += rep.LedgerNoRow + rep.RowsNoLedger

	// The commit log: what the database acknowledged to the replicas.
	ran := map[string]map[int64]bool{}
	for _, c := range commits {
		if ran[c.ref] == nil {
			ran[c.ref] = map[int64]bool{}
		}
		if !ran[c.ref][c.id] {
			ran[c.ref][c.id] = true
			if byID[c.id] != c.ref {
				rep.CommittedLost++
			}
		}
	}
	for _, ids := range ran {
		if len(ids) > 1 {
			rep.ExecutedTwice++
		}
	}

	// The calls: the answer each returned against the table.
	refs := map[string]bool{}
	var took []time.Duration
	for i := range calls {
		c := calls[i]
		if !c.issued {
			continue
		}
		rep.Calls++
		refs[c.ref] = true
		took = append(took, c.took)
		if c.err != nil {
			if rep.FailedBy == nil {
				rep.FailedBy = map[string]int{}
			}
			label := c.label
			if label == "" {
				label = grpcLabel(c.err)
			}
			rep.FailedBy[label]++
		}
		switch {
		case c.err == nil:
			rep.ReturnedOK++
		case c.definite:
			rep.Definite++
		default:
			rep.Ambiguous++
			if c.deadlineLeft {
				rep.AmbiguousEarly++
			}
			rep.AmbiguousMaxLeftMS = max(rep.AmbiguousMaxLeftMS, float64(c.left.Microseconds())/1000)
		}
		got := rows[c.ref]
		if got.n > 1 {
			rep.Duplicates++
			continue
		}
		reply := c.reply
		if c.err != nil {
			stored, found, err := resolve(c)
			switch {
			case err != nil:
				rep.Unresolved++
				continue
			case !found:
				if got.n != 0 {
					rep.Lost++ // a row the ledger does not know of
				}
				continue
			}
			if c.definite {
				rep.WrongAnswers++ // a definite failure that had committed
			} else {
				rep.Reconciled++
			}
			reply = stored
		}
		if got.n == 0 {
			rep.Lost++ // an answer with no effect
			if c.err == nil {
				rep.AckLost++ // acknowledged to the client, and gone
				calls[i].ackLost = true
			}
			continue
		}
		if reply.GetTransferId() != got.id || reply.GetReference() != c.ref {
			rep.WrongAnswers++
		}
	}
	for ref := range rows {
		if !refs[ref] {
			rep.Lost++ // an effect with no call
		}
	}
	slices.Sort(took)
	if n := len(took); n > 0 {
		rep.P50ms = float64(took[n/2].Microseconds()) / 1000
		rep.P99ms = float64(took[min(n-1, n*99/100)].Microseconds()) / 1000
	}
	return nil
}
