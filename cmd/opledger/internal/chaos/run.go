package chaos

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/opledger/opledger/dialects"
	"github.com/opledger/opledger/internal/harness/throwaway"
	"github.com/opledger/opledger/policy"
)

// Settings are a run's knobs: the command's flags, checked by it.
type Settings struct {
	Calls       int    // logical calls per database; 0: each database's default (defaultCalls, failoverCalls)
	Replicas    int    // server replicas (processes)
	Concurrency int    // calls in flight at once; 0: 32, 8 on a database with serial writers
	Seed        uint64 // seed of every random choice: kill moments, proxy faults, delays

	Duration    time.Duration     // bound on each database's calls phase; calls not started by then are not made
	CallTimeout time.Duration     // deadline of each logical call
	Owner       policy.RetryOwner // the client channel's retry owner: OwnerApplication or OwnerServiceConfig (GRPC only)

	Kills       int // SIGKILLs of a replica by the run, at seeded moments
	CommitKills int // replicas that SIGKILL themselves after a COMMIT, before the answer
	DBRestarts  int // database restarts, crash and clean in turn (an outage of every replica without a server to restart); none on a failover run
	Failovers   int // failovers of each failover run

	ClaimAtCommit bool   // the replicas claim Transfer at commit
	BreakKeys     bool   // the replicas give every attempt a fresh key: a broken service the run must fail
	Driver        string // the replicas' driver on a PostgreSQL database: "" its own, or one of Drivers
	Transport     string // GRPC ("" too) or Connect

	// Strict fails a run that injected less than asked (fewer kills,
	// restarts or failovers, no proxy cut, calls cut short by Duration)
	// or whose pooler crashed of no known bug.
	Strict bool
	// SkipNotInstalled skips, with a note, a throw-away database whose
	// server binaries are not installed, rather than failing the run.
	SkipNotInstalled bool

	Exe  string // the binary the replicas run: ReplicaCommand is its hidden command
	Open Opener // opens the run's own connections to the databases
}

// Opener opens databases by DSN, for the run itself and for its
// replicas. The command passes its own: it takes every DSN form the
// command does, and keeps passwords out of its errors. The harness
// parses no DSN.
type Opener struct {
	// DB opens and pings dsn's database through driver ("" the DSN's
	// own; "pq": lib/pq, for a postgres:// DSN) and names its dialect.
	DB func(ctx context.Context, dsn, driver string) (*sql.DB, dialects.Dialect, error)
	// PgxPool opens and pings a pgx pool of maxConns on a postgres://
	// DSN, for replicas on DriverPgxNative (nil: they fail to start).
	PgxPool func(ctx context.Context, dsn string, maxConns int) (*pgxpool.Pool, dialects.Dialect, error)
}

// Target is one database a run goes on: a throw-away database by name
// (one of Databases), a throw-away primary and standby (Failover, on one
// of FailoverDatabases), or a database given by DSN (Given).
type Target struct {
	Name        string        // one of Databases; "dsn" for a database given by DSN
	Failover    bool          // a primary and a standby: the primary SIGKILLed mid-run, the standby promoted, the old primary rejoined
	Replication string        // with Failover: one of ReplicationModes
	Driver      string        // with Failover: the replicas' driver, one of FailoverDrivers ("mysql" on MariaDB)
	Delay       time.Duration // with Failover: how long the replication stream is held each way
	DSN         string        // a database given by DSN: never restarted, left as it was found
	Display     string        // with DSN: its name in the report and the progress lines, without a password
}

// Given is the target of the database at dsn, not the run's own:
// instead of restarting it, the run takes every replica down for a while;
// at the end it drops its business table and deletes its ledger
// entries. display names it (without a password).
func Given(dsn, display string) Target {
	return Target{Name: "dsn", DSN: dsn, Display: display}
}

// defaultCalls are the logical calls of the CI-sized run per database
// (Settings.Calls overrides them all).
var defaultCalls = map[string]int{Postgres: 10_000, PgBouncer: 3_000, PgBouncerPQ: 1_000,
	MariaDB: 3_000, SQLite: 1_000, "dsn": 1_000}

// failoverCalls are the logical calls of a failover run by default:
// enough for two failovers and the rejoin between them.
const failoverCalls = 10_000

// Run runs s on each target in turn, saying on progress what it does,
// and returns the reports of the runs it made and whether one failed: a
// duplicate or lost effect, a wrong answer, an unresolved outcome or an
// ambiguous return with deadline left (Report.Failed), or what fails
// Settings.Strict. Its error (a database that would not start, a run
// that could not finish) ends it, and names the database.
func Run(ctx context.Context, s Settings, targets []Target, progress io.Writer) (reps []Report, failed bool, err error) {
	dir, err := os.MkdirTemp("", "opledger-chaos-")
	if err != nil {
		return nil, false, err
	}
	defer os.RemoveAll(dir)
	for _, tg := range targets {
		ts := s.forTarget(tg)
		rep, ran, err := runTarget(ctx, ts, tg, dir, progress)
		if err != nil {
			return reps, failed, err
		}
		if !ran {
			continue
		}
		reps = append(reps, rep)
		if rep.judge(ts, progress) {
			failed = true
		}
	}
	return reps, failed, nil
}

// forTarget returns s for tg's run: the database's default calls, and on
// a failover run its failovers instead of database restarts.
func (s Settings) forTarget(tg Target) Settings {
	asked := s.Calls
	if s.Calls == 0 {
		s.Calls = defaultCalls[tg.Name]
	}
	if !tg.Failover {
		s.Failovers = 0
		return s
	}
	// The failovers are the database's faults.
	s.DBRestarts = 0
	if asked == 0 {
		s.Calls = failoverCalls
	}
	return s
}

// runTarget starts tg's database, runs on it and removes it; ran is
// false when it was skipped (not installed, and s.SkipNotInstalled).
func runTarget(ctx context.Context, s Settings, tg Target, dir string, progress io.Writer) (rep Report, ran bool, err error) {
	db, err := startTarget(ctx, tg, dir, progress)
	if errors.Is(err, throwaway.ErrNotInstalled) && s.SkipNotInstalled {
		fmt.Fprintf(progress, "opledger chaos: %s: skipped: %v\n", tg.Name, err)
		return Report{}, false, nil
	}
	if err != nil {
		return Report{}, false, fmt.Errorf("%s: %w", tg.Name, err)
	}
	fmt.Fprintf(progress, "opledger chaos: %s: %d logical calls over %d replicas, seed %d\n", db.label(), s.Calls, s.Replicas, s.Seed)
	rep, err = runOn(ctx, db, s, dir, progress)
	if cerr := db.close(); err == nil && cerr != nil {
		err = cerr
	}
	if err != nil {
		return Report{}, false, fmt.Errorf("%s: %w", db.label(), err)
	}
	return rep, true, nil
}

// startTarget starts tg's throw-away database (or primary and standby),
// or returns the database given by DSN.
func startTarget(ctx context.Context, tg Target, dir string, progress io.Writer) (database, error) {
	if tg.DSN != "" {
		return newGivenDB(tg.DSN, tg.Display), nil
	}
	what := "a throw-away database"
	if tg.Failover {
		what = "a throw-away primary and standby (" + tg.Replication + ")"
	}
	fmt.Fprintf(progress, "opledger chaos: %s: starting %s\n", tg.Name, what)
	sctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	if tg.Failover {
		return startFailoverDatabase(sctx, tg)
	}
	return startDatabase(sctx, tg.Name, dir)
}
