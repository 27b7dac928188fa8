package chaos

import (
	"context"
	cryptorand "crypto/rand"
	"database/sql"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/opledger/opledger/cmd/opledger/internal/timeline"
	"github.com/opledger/opledger/dialects"
	"github.com/opledger/opledger/dialects/postgres"
	"github.com/opledger/opledger/examples/payments"
	"github.com/opledger/opledger/examples/payments/paymentspb"
	"github.com/opledger/opledger/internal/dialectkit"
	"github.com/opledger/opledger/internal/harness/faultproxy"
	"github.com/opledger/opledger/ledger"
	"github.com/opledger/opledger/migrations"
)

// run is one database's run: what its steps share. runOn takes it from
// the first step to the last; faults.go holds the calls phase.
type run struct {
	s        Settings
	db       database
	fo       failoverDB // db, when it fails over
	dir      string     // the run's temporary directory
	progress io.Writer
	rep      Report
	start    time.Time
	closers  []func() // close runs them, last first

	direct    *sql.DB // the run's own connection: migrations, the business table, the check
	dialect   dialects.Dialect
	table     string // the business table of this run
	caller    string // the one client's principal
	token     string // its bearer token: the replicas get its SHA-256
	commitLog string // the replicas' commit log
	dbProxies []*faultproxy.Proxy
	rs        *replicaSet
	client    runClient
	marks     faultLog

	// The calls phase (faults.go).
	calls                       []call
	t0, deadline                time.Time
	next, done, started         atomic.Int64 // calls handed out, answered, made
	outageCalls, outageAttempts atomic.Int64
	restartsDone, failoversDone atomic.Int64
	outages                     sync.WaitGroup
	faultMu                     sync.Mutex
	faultErr                    error // a restart, failover or rejoin that failed
	fos                         []failoverTimes
}

// proxyEvery is how often a client-side proxy injects a fault on
// average (the database side's: half as long again).
const proxyEvery = 700 * time.Millisecond

// runOn runs one database's scenario: the replicas, the client, the
// kills, the database restarts and the proxies' faults; then it resolves
// every call that did not return OK and checks both tables.
func runOn(ctx context.Context, db database, s Settings, dir string, progress io.Writer) (Report, error) {
	r := newRun(db, s, dir, progress)
	defer r.close()
	poolerReport := supervisePooler(ctx, db)
	if err := r.prepare(ctx); err != nil {
		return r.rep, err
	}
	if err := r.startReplicas(ctx); err != nil {
		return r.rep, err
	}
	if err := r.startClient(); err != nil {
		return r.rep, err
	}
	if err := r.callUnderFaults(ctx); err != nil {
		return r.rep, err
	}
	r.count()
	poolerReport(&r.rep)
	if err := r.resolveAndCheck(ctx); err != nil {
		return r.rep, err
	}
	r.rep.ElapsedS = time.Since(r.start).Seconds()
	return r.rep, nil
}

// newRun is db's run with s, its report's heading filled.
func newRun(db database, s Settings, dir string, progress io.Writer) *run {
	if s.Transport == "" {
		s.Transport = GRPC
	}
	r := &run{s: s, db: db, dir: dir, progress: progress, start: time.Now()}
	r.rep = Report{Database: db.label(), Transport: s.Transport, Owner: s.Owner.String(), Order: "claim-first", Seed: s.Seed, Replicas: s.Replicas}
	if s.ClaimAtCommit {
		r.rep.Order = "claim-at-commit"
	}
	if r.fo, _ = db.(failoverDB); r.fo != nil {
		r.rep.Replication, r.rep.Driver = r.fo.replication(), r.fo.driverName()
	}
	return r
}

// onClose has close run f.
func (r *run) onClose(f func()) { r.closers = append(r.closers, f) }

// close undoes the steps, the last first.
func (r *run) close() {
	for i := len(r.closers) - 1; i >= 0; i-- {
		r.closers[i]()
	}
}

// prepare opens the run's own connection to the database, migrates the
// ledger's table and creates the run's business table; close drops it
// again, with the run's ledger entries (a database given by DSN is left
// as it was found).
func (r *run) prepare(ctx context.Context) error {
	direct, d, err := r.s.Open.DB(ctx, r.db.directDSN(), "")
	if err != nil {
		return err
	}
	r.direct, r.dialect = direct, d
	r.onClose(func() { direct.Close() })
	if err := migrateLedger(ctx, direct, d); err != nil {
		return err
	}
	if r.s.Concurrency == 0 {
		r.s.Concurrency = 32
		if dialectkit.TraitsOf(d).SerialWriters {
			r.s.Concurrency = 8
		}
	}
	runID := time.Now().UnixNano() % 1_000_000_000
	r.table = fmt.Sprintf("opledger_chaos_%d", runID)
	r.caller = fmt.Sprintf("chaos-%d", runID)
	r.commitLog = filepath.Join(r.dir, "commits-"+fmt.Sprint(runID)+".log")
	// The replicas authenticate the client by a bearer token issued for
	// this run (they are given its SHA-256, never the token) and take the
	// caller from it (grpcint.CallerFromPrincipal): the ledger's entries
	// are "principal:" and the caller.
	r.token = cryptorand.Text()
	if err := payments.CreateTable(ctx, direct, d, r.table); err != nil {
		return err
	}
	r.onClose(func() {
		cctx := context.WithoutCancel(ctx)
		_ = payments.DropTable(cctx, direct, d, r.table)
		_, _ = direct.ExecContext(cctx, "DELETE FROM "+d.QuoteIdent(ledger.DefaultTable)+" WHERE caller = "+d.Placeholder(1), "principal:"+r.caller)
	})
	return nil
}

// migrateLedger migrates the ledger's table on db. Behind a transaction
// pooler (a DSN given through PgBouncer) the migrations refuse: the
// table must then be there, migrated over a direct connection.
func migrateLedger(ctx context.Context, db *sql.DB, d dialects.Dialect) error {
	m, err := migrations.New(db, d, migrations.WithTable(ledger.DefaultTable))
	if err != nil {
		return err
	}
	if _, err = m.Up(ctx); !errors.Is(err, postgres.ErrTransactionPooling) {
		return err
	}
	if _, qerr := db.ExecContext(ctx, "SELECT 1 FROM "+d.QuoteIdent(ledger.DefaultTable)+" WHERE 1 = 0"); qerr != nil {
		return fmt.Errorf("%w; migrate the ledger table over a direct connection first (opledger migrate up)", err)
	}
	return nil
}

// startReplicas puts a fault proxy between the replicas and each
// database server, and starts the replica processes, each behind a
// client-side fault proxy of its own.
func (r *run) startReplicas(ctx context.Context) error {
	var vias []string
	for _, a := range r.db.addrs() {
		p, err := faultproxy.New(a)
		if err != nil {
			return err
		}
		r.onClose(func() { p.Close() })
		r.dbProxies, vias = append(r.dbProxies, p), append(vias, p.Addr())
	}
	r.onClose(func() { os.Remove(r.commitLog) })
	rset := r.replicaSettings(vias)
	if rset.Driver != r.db.driver() {
		r.rep.Driver = rset.Driver
		r.rep.Database += " [" + rset.Driver + "]"
	}
	perReplica := max(r.s.Calls/r.s.Replicas, 2)
	rs, err := newReplicaSet(r.s.Exe, rset.args(), r.s.Replicas, r.s.Seed, r.s.CommitKills, max(perReplica/8, 1), perReplica/2)
	if err != nil {
		return err
	}
	r.rs = rs
	r.onClose(rs.close)
	rs.onKill = r.markKill
	return rs.start(ctx)
}

// replicaSettings are the replicas' flags: the database through the
// proxies at vias, and a longer lock wait and a smaller pool on a
// database with serial writers.
func (r *run) replicaSettings(vias []string) ReplicaSettings {
	lockWait, maxConns := 2*time.Second, 16
	if dialectkit.TraitsOf(r.dialect).SerialWriters {
		lockWait, maxConns = 10*time.Second, 4
	}
	return ReplicaSettings{DSN: r.db.replicaDSN(vias), Table: r.table, LockWait: lockWait, MaxConns: maxConns,
		Driver: replicaDriver(r.db, r.dialect, r.s.Driver), Caller: r.caller, TokenSHA256: payments.TokenDigest(r.token),
		CommitLog: r.commitLog, BreakKeys: r.s.BreakKeys, ClaimAtCommit: r.s.ClaimAtCommit, Transport: r.s.Transport}
}

// markKill marks replica i's kill in the picture: by the run, or by the
// replica itself after a COMMIT.
func (r *run) markKill(i int, afterCommit bool) {
	if afterCommit {
		r.marks.add(timeline.FaultCommitKill, time.Now(), time.Time{}, 0, fmt.Sprintf("replica %d killed itself after a COMMIT, before the answer", i))
	} else {
		r.marks.add(timeline.FaultReplicaKill, time.Now(), time.Time{}, 0, fmt.Sprintf("replica %d SIGKILLed", i))
	}
}

// startClient makes the client: the kit's, its calls spread over the
// client-side proxies (grpc-go's round_robin; connect: the next replica
// per attempt).
func (r *run) startClient() error {
	newClient := newGRPCClient
	if r.s.Transport == Connect {
		newClient = newConnectClient
	}
	c, err := newClient(r.s.Owner, r.rs.addrs(), r.token)
	if err != nil {
		return err
	}
	r.client = c
	r.onClose(c.close)
	return nil
}

// count fills the report's figures of the calls phase: the client's
// attempts, the kills, the restarts and failovers, the outage's
// amplification, the proxies' faults.
func (r *run) count() {
	rep := &r.rep
	rep.Attempts, rep.Replayed, rep.Resolved = r.client.stats()
	parentKills, commitKills, startFailures, trouble := r.rs.counts()
	// The faults' marks with the counts: a replica that kills itself in
	// the resolves below is neither.
	rep.faults = r.marks.list(r.t0)
	rep.Killed, rep.KilledAfterCommit, rep.StartFailures, rep.ReplicaTrouble = parentKills+commitKills, commitKills, startFailures, trouble
	if r.db.restartNote() == "" {
		rep.DBRestarts = int(r.restartsDone.Load())
	}
	rep.Failovers = int(r.failoversDone.Load())
	rep.OutageCalls = r.outageCalls.Load()
	if rep.OutageCalls > 0 {
		rep.OutageAmplification = float64(r.outageAttempts.Load()) / float64(rep.OutageCalls)
	}
	proxies := r.dbProxies
	for _, rp := range r.rs.replicas {
		proxies = append(proxies, rp.proxy)
	}
	for _, p := range proxies {
		ps := p.Stats()
		rep.Cuts += ps.Cuts
		rep.CutEvents += ps.CutEvents
		rep.Blackholes += ps.Blackholes
	}
}

// resolveAndCheck waits for every replica to be back and, with no
// faults, resolves each call that did not return OK and checks the calls
// against the commit log, the business table and the ledger (check);
// then it fills what needs the check.
func (r *run) resolveAndCheck(ctx context.Context) error {
	ectx, cancel := context.WithTimeout(ctx, time.Minute)
	err := r.rs.ensureRunning(ectx)
	cancel()
	if err != nil {
		_, _, _, trouble := r.rs.counts()
		return fmt.Errorf("%w (%s)", err, strings.Join(trouble, "; "))
	}
	commits, err := readCommitLog(r.commitLog)
	if err != nil {
		return fmt.Errorf("the replicas' commit log: %w", err)
	}
	direct := r.direct
	if r.fo != nil {
		// The pool's connections went to the killed primary: a new one
		// reaches the primary of now.
		d2, _, err := r.s.Open.DB(ctx, r.db.directDSN(), "")
		if err != nil {
			return err
		}
		defer d2.Close()
		direct = d2
	}
	resolve := func(c call) (*paymentspb.TransferReply, bool, error) {
		rctx, cancel := context.WithTimeout(ctx, r.s.CallTimeout)
		defer cancel()
		return r.client.resolve(rctx, c.key)
	}
	// The server stores the caller as grpcint.CallerFromPrincipal (and
	// connectint's) names it.
	if err := check(ctx, &r.rep, r.calls, commits, direct, r.dialect, r.table, "principal:"+r.caller, resolve); err != nil {
		return err
	}
	r.afterCheck(commits)
	return nil
}

// afterCheck fills the figures that need the check: the amplification,
// the failovers' windows and times, the calls of the picture.
func (r *run) afterCheck(commits []commitRecord) {
	rep := &r.rep
	if rep.Calls > 0 {
		rep.Amplification = float64(rep.Attempts) / float64(rep.Calls)
	}
	rep.FailoverWindowsMS = windows(r.fos, commits)
	for _, ft := range r.fos {
		rep.PromoteMS = append(rep.PromoteMS, ms(ft.promoted.Sub(ft.killAt)))
		rep.RejoinMS = append(rep.RejoinMS, ms(ft.rejoined.Sub(ft.rejoinAt)))
	}
	for _, c := range r.calls {
		if c.issued {
			at := c.start.Sub(r.t0)
			rep.timeline = append(rep.timeline, timeline.Call{Start: at, End: at + c.took, Outcome: c.outcome()})
		}
	}
}
