package main

import (
	"context"
	"database/sql"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	_ "github.com/lib/pq" // driver "postgres", for the replicas' --driver pq

	"github.com/opledger/opledger/cmd/opledger/internal/chaos"
	"github.com/opledger/opledger/dialects"
	"github.com/opledger/opledger/policy"
)

// The chaos command is the command layer of the harness in
// cmd/opledger/internal/chaos: its flags, their checks, its output and exit
// codes, and the databases, which it opens through this command's DSN
// helpers (chaosOpener). The harness runs the replicas, the faults, the
// check and the report.

func init() {
	extraCommands["chaos"] = command{"run replicas of the example service as processes on throw-away databases; kill them, restart the database, cut connections; count duplicate and lost effects", runChaos}
	extraCommands[chaos.ReplicaCommand] = command{"", runChaosReplica} // hidden: no summary
}

// chaosFlags are the flags of opledger chaos.
type chaosFlags struct {
	dbs, ownerName, dsn, replication, driver, drivers, transport, reportSVG *string
	calls, replicas, concurrency, kills, commitKills, restarts, failovers   *int
	seed                                                                    *uint64
	duration, callTimeout, streamDelay                                      *time.Duration
	asJSON, atCommit, breakKeys, strict, failover                           *bool
}

// defineChaosFlags defines the flags of opledger chaos on fs.
func defineChaosFlags(fs *flag.FlagSet) *chaosFlags {
	return &chaosFlags{
		dbs:         fs.String("databases", "", "comma-separated databases to run on: "+strings.Join(chaos.Databases, ", ")+" (default: every one whose server binaries are installed; SQLite always)"),
		calls:       fs.Int("calls", 0, "logical calls per database (default: 10000 on postgres, 3000 through pgbouncer with pgx and on mariadb, 1000 through pgbouncer with lib/pq and on sqlite)"),
		replicas:    fs.Int("replicas", 3, "server replicas (processes)"),
		concurrency: fs.Int("concurrency", 0, "calls in flight at once (default 32, 8 on sqlite)"),
		seed:        fs.Uint64("seed", 1, "seed of every random choice: kill moments, proxy faults, delays"),
		duration:    fs.Duration("duration", 2*time.Minute, "bound on each database's calls phase; calls not started by then are not made"),
		ownerName:   fs.String("owner", "application", "retry owner of the client's channel: application or service-config"),
		kills:       fs.Int("kills", 3, "SIGKILLs of a replica by the run, at seeded moments"),
		commitKills: fs.Int("commit-kills", 2, "replicas that SIGKILL themselves after a COMMIT, before the answer"),
		restarts:    fs.Int("db-restarts", 1, "database server restarts: the first a crash (SIGKILL, then start: recovery runs), the next a clean restart, alternating; on sqlite a total outage of every replica instead"),
		callTimeout: fs.Duration("call-timeout", 30*time.Second, "deadline of each logical call"),
		asJSON:      fs.Bool("json", false, "print the report as JSON"),
		dsn:         fs.String("dsn", "", "run on this database instead of throw-away ones (never restarted: every replica is taken down for 1s instead; the run's table and ledger entries are removed at the end; default 1000 calls)"),
		atCommit:    fs.Bool("claim-at-commit", false, "the replicas claim Transfer at commit (keyed.WithClaimAtCommit): the work runs first, the completed entry is inserted last"),
		breakKeys:   fs.Bool("break-keys", false, "break the service on purpose: the replicas give every attempt a fresh idempotency key, so retries duplicate; the run must fail (a check of the check)"),
		strict:      fs.Bool("strict", false, "also fail (exit 1) when a database cannot be started, or a run injected less than asked: fewer replica kills than --kills, fewer database restarts than --db-restarts (server databases), fewer failovers than --failovers, no proxy cut (CI)"),
		failover:    fs.Bool("failover", false, "run on a throw-away primary and standby instead (postgres: streaming replication; mariadb: semi-synchronous or asynchronous replication): mid-run the primary is SIGKILLed and the standby promoted, then the old primary rejoins as the new standby; --failovers times, once for each --replication mode and --drivers driver"),
		replication: fs.String("replication", "sync,async", "with --failover: comma-separated replication modes: sync (postgres synchronous_commit = on; mariadb semi-synchronous, AFTER_SYNC), async, remote_apply (postgres only)"),
		driver:      fs.String("driver", "", "the replicas' driver on postgres, pgbouncer and a postgres:// --dsn: pgx (pgx's database/sql driver, the default), pq (lib/pq) or pgx-native (pipelined pgx transactions through pgxledger; exec mode through pgbouncer); the other databases keep their own (not with --failover: see --drivers)"),
		drivers:     fs.String("drivers", "pgx,pq", "with --failover on postgres: comma-separated drivers of the replicas (pgx, pq for lib/pq), each reaching the pair through a multi-host DSN"),
		failovers:   fs.Int("failovers", 2, "with --failover: failovers per run (the second fails back to the rejoined old primary, and so on)"),
		streamDelay: fs.Duration("replication-delay", 10*time.Millisecond, "with --failover: the standby's replication stream goes through a loopback proxy that holds it this long each way (a standby in another zone): an asynchronous standby is this far behind, a synchronous primary waits twice this long for each COMMIT; 0 for plain loopback"),
		transport:   fs.String("transport", chaos.GRPC, "grpc (the replicas serve grpc-go through grpcint; the client is grpc-go's, round_robin) or connect (the replicas serve connect-go handlers through connectint on HTTP/1.1 and h2c; the client is connect-go's, its calls alternating between the Connect protocol over HTTP/1.1 and the gRPC protocol over h2c, each attempt to the next replica)"),
		reportSVG:   fs.String("report", "", "write a picture of each run to this SVG file (with several runs, the database's name is added before the extension)"),
	}
}

// check returns the usage error of f's values, nil when they are in
// range and fit together.
func (f *chaosFlags) check() error {
	switch {
	case *f.calls < 0 || *f.calls > 1_000_000:
		return errors.New("--calls must be 0 to 1000000")
	case *f.replicas < 1 || *f.replicas > 16:
		return errors.New("--replicas must be 1 to 16")
	case *f.concurrency < 0 || *f.concurrency > 512:
		return errors.New("--concurrency must be 0 to 512")
	case *f.duration <= 0 || *f.callTimeout <= 0:
		return errors.New("--duration and --call-timeout must be positive")
	case *f.kills < 0 || *f.commitKills < 0 || *f.restarts < 0 || *f.kills > 100 || *f.commitKills > 100 || *f.restarts > 10:
		return errors.New("--kills and --commit-kills must be 0 to 100, --db-restarts 0 to 10")
	case *f.failovers < 1 || *f.failovers > 10:
		return errors.New("--failovers must be 1 to 10")
	case *f.streamDelay < 0 || *f.streamDelay > 10*time.Second:
		return errors.New("--replication-delay must be 0 to 10s")
	case *f.driver != "" && !slices.Contains(chaos.Drivers, *f.driver):
		return fmt.Errorf("--driver %q: want one of %s", *f.driver, strings.Join(chaos.Drivers, ", "))
	case *f.driver != "" && *f.failover:
		return errors.New("--driver is for runs without --failover (use --drivers)")
	case *f.transport != chaos.GRPC && *f.transport != chaos.Connect:
		return fmt.Errorf("--transport %q: want grpc or connect", *f.transport)
	}
	return nil
}

// owner is --owner's retry owner, one a chaos run's client retries
// through on --transport.
func (f *chaosFlags) owner() (policy.RetryOwner, error) {
	var owner policy.RetryOwner
	err := owner.UnmarshalText([]byte(*f.ownerName))
	if err != nil {
		return owner, err
	}
	if owner != policy.OwnerApplication && owner != policy.OwnerServiceConfig {
		return owner, fmt.Errorf("--owner %s: chaos retries through application or service-config", owner)
	}
	if owner != policy.OwnerApplication && *f.transport == chaos.Connect {
		return owner, fmt.Errorf("--owner %s: over connect-go the application owns the retries", owner)
	}
	return owner, nil
}

// settings are the harness's settings of f: the run's knobs, and whether
// a database whose server is not installed is skipped (explicit: the
// databases were named).
func (f *chaosFlags) settings(owner policy.RetryOwner, exe string, explicit bool) chaos.Settings {
	return chaos.Settings{Calls: *f.calls, Replicas: *f.replicas, Concurrency: *f.concurrency, Seed: *f.seed,
		Duration: *f.duration, CallTimeout: *f.callTimeout, Owner: owner,
		Kills: *f.kills, CommitKills: *f.commitKills, DBRestarts: *f.restarts, Failovers: *f.failovers,
		ClaimAtCommit: *f.atCommit, BreakKeys: *f.breakKeys, Driver: *f.driver, Transport: *f.transport,
		Strict: *f.strict, SkipNotInstalled: !explicit && !*f.strict, Exe: exe, Open: chaosOpener}
}

func runChaos(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := newFlags("chaos", stderr)
	f := defineChaosFlags(fs)
	if code, stop := parseFlags(fs, args, stdout); stop {
		return code
	}
	if fs.NArg() > 0 {
		return fail(stderr, "chaos", unexpectedArg(fs))
	}
	if err := f.check(); err != nil {
		return fail(stderr, "chaos", err)
	}
	owner, err := f.owner()
	if err != nil {
		return fail(stderr, "chaos", err)
	}
	targets, explicit, err := chaosTargets(*f.dbs, *f.dsn, *f.failover, *f.replication, *f.drivers, *f.streamDelay)
	if err != nil {
		return fail(stderr, "chaos", err)
	}
	exe, err := os.Executable()
	if err != nil {
		return fail(stderr, "chaos", err)
	}
	reports, failed, err := chaos.Run(ctx, f.settings(owner, exe, explicit), targets, stderr)
	if err != nil {
		return fail(stderr, "chaos", err)
	}
	return printChaos(stdout, stderr, reports, failed, *f.reportSVG, *f.asJSON)
}

// printChaos writes the runs' pictures to reportSVG (when given) and
// their reports, as JSON or a table, and returns the exit code: 1 when a
// run failed.
func printChaos(stdout, stderr io.Writer, reports []chaos.Report, failed bool, reportSVG string, asJSON bool) int {
	if reportSVG != "" {
		written, err := chaos.WriteReports(reportSVG, reports)
		if err != nil {
			return fail(stderr, "chaos", err)
		}
		for _, p := range written {
			fmt.Fprintf(stderr, "opledger chaos: wrote %s\n", p)
		}
	}
	if asJSON {
		if err := chaos.WriteJSON(stdout, reports); err != nil {
			return fail(stderr, "chaos", err)
		}
	} else {
		chaos.PrintTable(stdout, reports)
	}
	if !failed {
		return 0
	}
	fmt.Fprintln(stderr, "opledger chaos: FAIL: a duplicate or lost effect, a wrong answer, an unresolved outcome or an ambiguous return with deadline left")
	return 1
}

// chaosTargets returns the runs the flags ask for, and whether the
// databases were named (a missing server binary then fails the run).
func chaosTargets(dbs, dsn string, failover bool, replication, drivers string, delay time.Duration) ([]chaos.Target, bool, error) {
	if dsn != "" {
		switch {
		case dbs != "":
			return nil, false, errors.New("--dsn and --databases exclude each other")
		case failover:
			return nil, false, errors.New("--failover runs on throw-away servers of its own, not on --dsn")
		}
		t, err := parseDSN(dsn)
		if err != nil {
			return nil, false, err
		}
		return []chaos.Target{chaos.Given(dsn, t.display)}, true, nil
	}
	names, explicit := chaos.Databases, false
	known := chaos.Databases
	if failover {
		names, known = chaos.FailoverDatabases, chaos.FailoverDatabases
	}
	if dbs != "" {
		var err error
		if names, err = commaList("--databases", dbs, known); err != nil {
			return nil, false, err
		}
		explicit = true
	}
	if !failover {
		out := make([]chaos.Target, len(names))
		for i, n := range names {
			out[i] = chaos.Target{Name: n}
		}
		return out, explicit, nil
	}
	out, err := failoverTargets(names, replication, drivers, delay)
	return out, explicit, err
}

// failoverTargets are the failover runs on the databases names: one for
// each --replication mode and, on PostgreSQL, each --drivers driver.
func failoverTargets(names []string, replication, drivers string, delay time.Duration) ([]chaos.Target, error) {
	modes, err := commaList("--replication", replication, chaos.ReplicationModes)
	if err != nil {
		return nil, err
	}
	drvs, err := commaList("--drivers", drivers, chaos.FailoverDrivers)
	if err != nil {
		return nil, err
	}
	var out []chaos.Target
	for _, n := range names {
		for _, m := range modes {
			if n == chaos.MariaDB {
				// sync is semi-synchronous replication; MariaDB has no
				// remote_apply, and one Go driver.
				if m != "remote_apply" {
					out = append(out, chaos.Target{Name: n, Failover: true, Replication: m, Driver: "mysql", Delay: delay})
				}
				continue
			}
			for _, d := range drvs {
				out = append(out, chaos.Target{Name: n, Failover: true, Replication: m, Driver: d, Delay: delay})
			}
		}
	}
	return out, nil
}

// commaList splits a comma-separated flag value and checks every item
// against known.
func commaList(flag, v string, known []string) ([]string, error) {
	var out []string
	for _, n := range strings.Split(v, ",") {
		n = strings.TrimSpace(strings.ToLower(n))
		if !slices.Contains(known, n) {
			return nil, fmt.Errorf("%s: unknown %q (want %s)", flag, maskCredentials(n), strings.Join(known, ", "))
		}
		if !slices.Contains(out, n) {
			out = append(out, n)
		}
	}
	return out, nil
}

// runChaosReplica is the hidden command a chaos run starts as each
// replica (chaos.ReplicaCommand): its flags are chaos.ReplicaSettings',
// its databases opened as every command's.
func runChaosReplica(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := newFlags(chaos.ReplicaCommand, stderr)
	var rs chaos.ReplicaSettings
	rs.SetFlags(fs)
	if code, stop := parseFlags(fs, args, stdout); stop {
		return code
	}
	if fs.NArg() > 0 {
		return fail(stderr, chaos.ReplicaCommand, errors.New("--dsn is required and there are no arguments"))
	}
	if err := chaos.ServeReplica(ctx, rs, chaosOpener, stdout); err != nil {
		return fail(stderr, chaos.ReplicaCommand, err)
	}
	return 0
}

// chaosOpener opens the chaos run's databases, and its replicas', with
// this command's DSN helpers: every DSN form the command takes, and no
// password in an error.
var chaosOpener = chaos.Opener{
	DB: func(ctx context.Context, dsn, driver string) (*sql.DB, dialects.Dialect, error) {
		db, t, err := openReplicaDB(ctx, dsn, driver)
		return db, t.dialect, err
	},
	PgxPool: func(ctx context.Context, dsn string, maxConns int) (*pgxpool.Pool, dialects.Dialect, error) {
		pool, t, err := openReplicaPool(ctx, dsn, maxConns)
		return pool, t.dialect, err
	},
}

// openReplicaDB opens dsn as openDB does, or with lib/pq (driver "pq")
// for a postgres:// DSN.
func openReplicaDB(ctx context.Context, dsn, driver string) (*sql.DB, target, error) {
	switch driver {
	case "":
		return openDB(ctx, dsn)
	case "pq":
	default:
		return nil, target{}, fmt.Errorf("--driver %q: want pq or nothing", driver)
	}
	t, err := parseDSN(dsn)
	if err != nil {
		return nil, t, err
	}
	if t.driver != "pgx" {
		return nil, t, errors.New("--driver pq needs a postgres:// DSN")
	}
	t.driver = "postgres" // lib/pq
	pctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	db, err := t.open(pctx)
	return db, t, err
}

// openReplicaPool opens a pgx pool of maxConns on dsn, a postgres:// DSN
// (with default_query_exec_mode=exec behind a transaction pooler), and
// pings it.
func openReplicaPool(ctx context.Context, dsn string, maxConns int) (*pgxpool.Pool, target, error) {
	t, err := parseDSN(dsn)
	if err != nil {
		return nil, t, err
	}
	if t.driver != "pgx" {
		return nil, t, errors.New("--driver pgx-native needs a postgres:// DSN")
	}
	cfg, err := pgxpool.ParseConfig(t.dsn)
	if err != nil {
		return nil, t, fmt.Errorf("open %s: %s", t.display, t.scrub(err.Error()))
	}
	cfg.MaxConns = int32(maxConns)
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err == nil {
		if err = pool.Ping(ctx); err != nil {
			pool.Close()
		}
	}
	if err != nil {
		return nil, t, fmt.Errorf("cannot reach %s: %s", t.display, t.scrub(err.Error()))
	}
	return pool, t, nil
}
