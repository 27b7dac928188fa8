package chaos

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/opledger/opledger/internal/harness/throwaway"
)

// ReplicationModes are a failover run's replication modes
// (Target.Replication): sync (PostgreSQL's synchronous_commit = on,
// MariaDB's semi-synchronous replication), async and remote_apply
// (PostgreSQL only).
var ReplicationModes = []string{string(throwaway.ReplicationSync), string(throwaway.ReplicationAsync), string(throwaway.ReplicationRemoteApply)}

// FailoverDrivers are the replicas' drivers of a failover run on
// PostgreSQL (Target.Driver): pgx and pq (lib/pq), each reaching the pair
// through a multi-host DSN.
var FailoverDrivers = []string{"pgx", "pq"}

// failoverDB is a database the run fails over: a primary and a standby.
type failoverDB interface {
	database
	// replication names its mode ("sync", "async", "remote_apply", or
	// MariaDB's "semisync").
	replication() string
	// driverName names the replicas' driver (pgx, lib/pq,
	// go-sql-driver/mysql).
	driverName() string
	// synchronous reports whether the primary acknowledges a COMMIT only
	// once the standby has it.
	synchronous() bool
	// failover kills the primary and promotes the standby, recording
	// when the kill began (killAt), when every process of the primary was
	// gone (killed) and when the standby accepted writes (promoted).
	failover(ctx context.Context) (killAt, killed, promoted time.Time, err error)
	// rejoin makes the old primary the new one's standby.
	rejoin(ctx context.Context) error
}

// pairDB is a throw-away PostgreSQL primary and standby
// (throwaway.StartPostgresPair). The replicas reach both through one
// fault proxy each, with a multi-host DSN (target_session_attrs=read-write)
// that pgx and lib/pq both read: each new connection tries the hosts in
// order and keeps the one that accepts writes.
type pairDB struct {
	pair *throwaway.PostgresPair
	drv  string // "" (pgx) or "pq"
	name string
}

// startPairDB starts a pair in mode for the replicas' driver ("pgx" or
// "pq").
func startPairDB(ctx context.Context, mode, driver string, delay time.Duration) (*pairDB, error) {
	p, err := throwaway.StartPostgresPair(ctx, throwaway.PairOptions{Replication: throwaway.Replication(mode), StreamDelay: delay})
	if err != nil {
		return nil, err
	}
	label := map[string]string{"sync": "synchronous", "async": "asynchronous", "remote_apply": "synchronous (remote_apply)"}[mode]
	d := &pairDB{pair: p, name: fmt.Sprintf("postgres failover, %s replication (%s)", label, map[string]string{"pgx": "pgx", "pq": "lib/pq"}[driver])}
	if driver == "pq" {
		d.drv = "pq"
	}
	return d, nil
}

func (d *pairDB) label() string { return d.name }

// directDSN reaches the primary, whichever node it is, with pgx.
func (d *pairDB) directDSN() string {
	n := d.pair.Nodes()
	return throwaway.MultiHostDSN("pgx", n[0].Addr(), n[1].Addr())
}

func (d *pairDB) addrs() []string {
	n := d.pair.Nodes()
	return []string{n[0].Addr(), n[1].Addr()}
}

func (d *pairDB) replicaDSN(via []string) string {
	if d.drv == "pq" {
		return throwaway.MultiHostDSN("postgres", via...)
	}
	return throwaway.MultiHostDSN("pgx", via...)
}

func (d *pairDB) driver() string { return d.drv }

func (d *pairDB) restart(ctx context.Context, crash bool) error {
	if crash {
		return d.pair.Primary().Crash(ctx)
	}
	return d.pair.Primary().Restart(ctx)
}

func (d *pairDB) restartNote() string { return "" }

func (d *pairDB) close() error { return d.pair.Cleanup() }

func (d *pairDB) replication() string { return string(d.pair.Replication()) }

func (d *pairDB) driverName() string { return map[string]string{"": "pgx", "pq": "lib/pq"}[d.drv] }

func (d *pairDB) synchronous() bool { return d.pair.Replication() != throwaway.ReplicationAsync }

func (d *pairDB) failover(ctx context.Context) (killAt, killed, promoted time.Time, err error) {
	return timedFailover(ctx, d.pair.KillPrimary, d.pair.Promote)
}

// timedFailover kills the primary and promotes the standby, and returns
// when the kill began, when it was over and when the promotion was.
func timedFailover(ctx context.Context, kill, promote func(context.Context) error) (killAt, killed, promoted time.Time, err error) {
	killAt = time.Now()
	if err = kill(ctx); err != nil {
		return
	}
	killed = time.Now()
	err = promote(ctx)
	promoted = time.Now()
	return
}

func (d *pairDB) rejoin(ctx context.Context) error { return d.pair.Rejoin(ctx, throwaway.RejoinRewind) }

// mariaPairDB is a throw-away MariaDB primary and replica
// (throwaway.StartMariaDBPair). go-sql-driver/mysql takes one address, so
// the replicas reach the primary through the pair's own proxy, which the
// promotion points at the new primary (as a virtual IP or a DNS name a
// failover manager moves), behind the run's fault proxy.
type mariaPairDB struct {
	pair *throwaway.MariaDBPair
	name string
}

func startMariaPairDB(ctx context.Context, mode string, delay time.Duration) (*mariaPairDB, error) {
	p, err := throwaway.StartMariaDBPair(ctx, throwaway.MariaDBPairOptions{SemiSync: mode == "sync", StreamDelay: delay})
	if err != nil {
		return nil, err
	}
	label := "asynchronous"
	if p.SemiSync() {
		label = "semi-synchronous (AFTER_SYNC)"
	}
	return &mariaPairDB{pair: p, name: "mariadb failover, " + label + " replication"}, nil
}

func (d *mariaPairDB) label() string                       { return d.name }
func (d *mariaPairDB) directDSN() string                   { return d.pair.DSN() }
func (d *mariaPairDB) addrs() []string                     { return []string{d.pair.Addr()} }
func (d *mariaPairDB) replicaDSN(via []string) string      { return "root@tcp(" + via[0] + ")/test" }
func (d *mariaPairDB) driver() string                      { return "" }
func (d *mariaPairDB) driverName() string                  { return "go-sql-driver/mysql" }
func (d *mariaPairDB) restart(context.Context, bool) error { return errNoServer }
func (d *mariaPairDB) restartNote() string                 { return "" }
func (d *mariaPairDB) close() error                        { return d.pair.Cleanup() }
func (d *mariaPairDB) synchronous() bool                   { return d.pair.SemiSync() }
func (d *mariaPairDB) rejoin(ctx context.Context) error    { return d.pair.Rejoin(ctx) }
func (d *mariaPairDB) replication() string {
	if d.pair.SemiSync() {
		return "semisync"
	}
	return "async"
}

func (d *mariaPairDB) failover(ctx context.Context) (killAt, killed, promoted time.Time, err error) {
	return timedFailover(ctx, d.pair.KillPrimary, d.pair.Promote)
}

// commitRecord is one line of the replicas' commit log: a Transfer whose
// handler ran and whose transaction committed, as the replica saw it
// before it answered.
type commitRecord struct {
	at  time.Time
	ref string
	id  int64
}

// readCommitLog reads the replicas' commit log, ordered by time (each
// line is one write(2) with O_APPEND: a replica killed writes it whole or
// not at all; a line that does not parse is skipped).
func readCommitLog(path string) ([]commitRecord, error) {
	f, err := os.Open(path)
	if os.IsNotExist(err) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var out []commitRecord
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if r, ok := parseCommitLine(sc.Text()); ok {
			out = append(out, r)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].at.Before(out[j].at) })
	return out, sc.Err()
}

// parseCommitLine reads one line of the commit log: unix nanoseconds,
// reference, transfer id; false for anything else.
func parseCommitLine(line string) (commitRecord, bool) {
	fields := strings.Fields(line)
	if len(fields) != 3 {
		return commitRecord{}, false
	}
	ns, err1 := strconv.ParseInt(fields[0], 10, 64)
	id, err2 := strconv.ParseInt(fields[2], 10, 64)
	if err1 != nil || err2 != nil || ns <= 0 || id == 0 {
		return commitRecord{}, false
	}
	return commitRecord{at: time.Unix(0, ns), ref: fields[1], id: id}, true
}

// failoverTimes are one failover's moments.
type failoverTimes struct {
	killAt, killed, promoted, rejoinAt, rejoined time.Time
}

// windows returns, for each failover, the time from the kill to the
// first commit after every process of the old primary was gone, in
// milliseconds (-1 when nothing committed after it).
func windows(fos []failoverTimes, commits []commitRecord) []float64 {
	out := make([]float64, len(fos))
	for i, fo := range fos {
		out[i] = -1
		j := sort.Search(len(commits), func(k int) bool { return commits[k].at.After(fo.killed) })
		if j < len(commits) {
			out[i] = float64(commits[j].at.Sub(fo.killAt).Microseconds()) / 1000
		}
	}
	return out
}

// synchronousOrNone reports whether a lost acknowledged commit breaks
// the promise in rep's run: every run but a failover to an asynchronous
// standby.
func (rep Report) synchronousOrNone() bool {
	return rep.Failovers == 0 || rep.Replication != "async"
}

// replicationLoss is the part of rep.Lost that an asynchronous failover
// explains (the acknowledged calls whose commit the standby never
// received); 0 for every other run.
func (rep Report) replicationLoss() int {
	if rep.synchronousOrNone() {
		return 0
	}
	return rep.AckLost
}

// FailoverDatabases are the databases a failover run (Target.Failover)
// runs on.
var FailoverDatabases = []string{Postgres, MariaDB}

// startFailoverDatabase starts the primary and standby of tg.
func startFailoverDatabase(ctx context.Context, tg Target) (failoverDB, error) {
	switch tg.Name {
	case Postgres:
		return startPairDB(ctx, tg.Replication, tg.Driver, tg.Delay)
	case MariaDB:
		return startMariaPairDB(ctx, tg.Replication, tg.Delay)
	}
	return nil, fmt.Errorf("--failover: %s cannot fail over", tg.Name)
}
