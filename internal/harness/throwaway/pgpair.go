package throwaway

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/opledger/opledger/internal/harness/faultproxy"
)

// Replication is how the primary of a PostgresPair waits for its standby
// before it acknowledges a COMMIT.
type Replication string

// The replication modes of StartPostgresPair.
const (
	// ReplicationAsync: the primary acknowledges a COMMIT once it is in
	// its own WAL, and streams it to the standby afterwards
	// (synchronous_standby_names empty). A failover loses what the
	// standby had not received yet.
	ReplicationAsync Replication = "async"
	// ReplicationSync: synchronous_standby_names names the standby and
	// synchronous_commit = on: a COMMIT is acknowledged once the standby
	// has flushed its WAL.
	ReplicationSync Replication = "sync"
	// ReplicationRemoteApply: as ReplicationSync with synchronous_commit =
	// remote_apply: once the standby has applied it (a read there sees
	// it).
	ReplicationRemoteApply Replication = "remote_apply"
)

// synchronous reports whether the primary waits for the standby.
func (r Replication) synchronous() bool { return r == ReplicationSync || r == ReplicationRemoteApply }

// RejoinMethod is how Rejoin turns a failed primary into the standby of
// the new one.
type RejoinMethod string

// The rejoin methods.
const (
	// RejoinRewind runs pg_rewind against the new primary: it undoes
	// what the old primary wrote after the standby's promotion point
	// (its transactions the standby never received), copies what
	// changed, and the old primary starts as a standby.
	RejoinRewind RejoinMethod = "pg_rewind"
	// RejoinBaseBackup replaces the old primary's data directory with a
	// fresh pg_basebackup of the new primary.
	RejoinBaseBackup RejoinMethod = "pg_basebackup"
)

// ErrNotPrimary is returned by a PostgresPair's method that needs the
// pair in another state: Promote with the primary still running or the
// standby down, Rejoin with the standby running.
var ErrNotPrimary = errors.New("throwaway: the pair is not in the state this step needs")

// PostgresPair is a throw-away PostgreSQL primary and its hot standby,
// streaming replication between them over loopback: two Servers with
// their own ports, data directories, sockets and logs. Its methods are
// safe for concurrent use and serialised. KillPrimary, Promote and
// Rejoin fail it over and back, as Patroni or a managed database's
// failover would: the primary killed, the standby promoted, the old
// primary rewound and started as the new standby.
//
// With a synchronous mode the promoted standby runs alone, its
// synchronous_standby_names empty, until Rejoin gives it a standby
// again (Patroni's synchronous_mode without synchronous_mode_strict): a
// COMMIT is never blocked by a standby that is down, and a COMMIT
// acknowledged while it runs alone is not replicated until the rejoin.
type PostgresPair struct {
	pairState
	repl Replication
	bin  string
	acct *account
	data [2]string
}

// pairState is what a primary and its standby have in common: the two
// servers, which is the primary, and the proxies the standby streams
// through (a StreamDelay), one in front of each node. Its mutex
// serialises the pair's steps.
type pairState struct {
	mu         sync.Mutex
	nodes      [2]*Server
	delays     [2]*faultproxy.Proxy
	primary    int
	promotions int
}

// Nodes returns the pair's two servers, always in the same order (the
// first was the first primary).
func (p *pairState) Nodes() [2]*Server { return p.nodes }

// Primary returns the server that is the primary now (the promoted
// standby after Promote), even while it is killed.
func (p *pairState) Primary() *Server {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.nodes[p.primary]
}

// Standby returns the other server: the standby, or after Promote the old
// primary until Rejoin makes it the standby.
func (p *pairState) Standby() *Server {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.nodes[1-p.primary]
}

// Promotions returns how many times Promote promoted a standby.
func (p *pairState) Promotions() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.promotions
}

// promotable locks p and returns the standby's index when the primary is
// down and the standby runs; otherwise it unlocks p and returns an error
// matching ErrNotPrimary.
func (p *pairState) promotable() (int, error) {
	p.mu.Lock()
	next := 1 - p.primary
	if p.nodes[p.primary].Running() || !p.nodes[next].Running() {
		p.mu.Unlock()
		return 0, fmt.Errorf("%w: promote needs the primary down and the standby running", ErrNotPrimary)
	}
	return next, nil
}

// promoted records that node next is the primary now.
func (p *pairState) promoted(next int) {
	p.primary = next
	p.promotions++
}

// rejoinable locks p and returns the old primary's index when it is
// down; otherwise it unlocks p and returns an error matching
// ErrNotPrimary.
func (p *pairState) rejoinable() (int, error) {
	p.mu.Lock()
	i := 1 - p.primary
	if p.nodes[i].Running() {
		p.mu.Unlock()
		return 0, fmt.Errorf("%w: rejoin needs the old primary down", ErrNotPrimary)
	}
	return i, nil
}

// KillPrimary kills the primary (Server.Kill: SIGKILL to it and every
// process below it, as a crash of its machine; nothing is flushed or shut
// down). It stays down; the standby keeps running.
func (p *pairState) KillPrimary(ctx context.Context) error {
	return p.Primary().Kill(ctx)
}

// startDelays starts the delay proxies in front of the nodes, when d > 0.
func (p *pairState) startDelays(d time.Duration) error {
	if d <= 0 {
		return nil
	}
	for i, s := range p.nodes {
		px, err := faultproxy.New(s.Addr())
		if err != nil {
			return fmt.Errorf("throwaway: %w", err)
		}
		px.SetLatency(d)
		p.delays[i] = px
	}
	return nil
}

// streamAddr is the address the other node's replication connection
// reaches node i at: its delay proxy, when there is one.
func (p *pairState) streamAddr(i int) string {
	if p.delays[i] != nil {
		return p.delays[i].Addr()
	}
	return p.nodes[i].Addr()
}

// Cleanup kills both servers and removes their directories; later calls
// do nothing.
func (p *pairState) Cleanup() error {
	var err error
	for i, s := range p.nodes {
		if s != nil {
			err = errors.Join(err, s.Cleanup())
		}
		if p.delays[i] != nil {
			p.delays[i].Close()
		}
	}
	return err
}

// nodeName is node i's application_name, the name the primary's
// synchronous_standby_names and pg_stat_replication know it by.
func nodeName(i int) string { return "node" + strconv.Itoa(i) }

// PairOptions configures StartPostgresPair.
type PairOptions struct {
	// Replication is the mode (ReplicationAsync, ReplicationSync,
	// ReplicationRemoteApply); "" means ReplicationSync.
	Replication Replication
	// StreamDelay, when positive, sends the standby's replication
	// connection through a loopback proxy that holds every chunk, both
	// ways, for this long: a standby in another zone or region. An
	// asynchronous standby is then about this far behind (what the
	// primary committed in the last StreamDelay before a kill never
	// reaches it); a synchronous primary waits about twice this long
	// for every COMMIT.
	StreamDelay time.Duration
}

// StartPostgresPair creates a primary (initdb, as StartPostgres, with the
// WAL settings pg_rewind needs: full_page_writes and wal_log_hints on)
// and a hot standby made with pg_basebackup, starts both, and returns
// once the standby streams and has replayed the primary's WAL (and, with
// a synchronous mode, is the primary's synchronous standby), or an error
// when ctx ends first (leaving nothing behind). Call Cleanup when done.
func StartPostgresPair(ctx context.Context, opts PairOptions) (*PostgresPair, error) {
	repl := opts.Replication
	switch repl {
	case "":
		repl = ReplicationSync
	case ReplicationAsync, ReplicationSync, ReplicationRemoteApply:
	default:
		return nil, fmt.Errorf("throwaway: replication %q: want async, sync or remote_apply", repl)
	}
	if opts.StreamDelay < 0 {
		return nil, fmt.Errorf("throwaway: a negative StreamDelay")
	}
	bin, acct, err := postgresSetup()
	if err != nil {
		return nil, err
	}
	if !isExec(filepath.Join(bin, "pg_basebackup")) || !isExec(filepath.Join(bin, "pg_ctl")) || !isExec(filepath.Join(bin, "pg_rewind")) {
		return nil, fmt.Errorf("%w: PostgreSQL's pg_basebackup, pg_ctl and pg_rewind in %s", ErrNotInstalled, bin)
	}
	p := &PostgresPair{repl: repl, bin: bin, acct: acct}
	for i := range p.nodes {
		s, data, err := newPostgresServer(acct)
		if err != nil {
			p.Cleanup()
			return nil, err
		}
		p.nodes[i], p.data[i] = s, data
	}
	if err := p.startDelays(opts.StreamDelay); err != nil {
		p.Cleanup()
		return nil, err
	}
	for i, s := range p.nodes {
		settings := []string{
			"-c", "primary_conninfo=" + p.streamConninfo(1-i, "application_name="+nodeName(i)),
			"-c", "wal_retrieve_retry_interval=100ms", // a standby whose primary is gone tries again soon
			"-c", "wal_receiver_timeout=10s",
			"-c", "wal_sender_timeout=10s",
		}
		if repl == ReplicationRemoteApply {
			settings = append(settings, "-c", "synchronous_commit=remote_apply")
		}
		setPostgresCommand(s, bin, acct, p.data[i], settings...)
	}
	primary := p.nodes[0]
	if err := initdb(ctx, bin, acct, primary, p.data[0]); err != nil {
		p.Cleanup()
		return nil, err
	}
	// In the data directory, so that the standby's copy (pg_basebackup,
	// pg_rewind) has them, and pg_rewind's single-user recovery of a
	// killed primary runs with them.
	conf := "\n# throwaway.StartPostgresPair\nfull_page_writes = on\nwal_log_hints = on\nwal_keep_size = '512MB'\nmax_wal_senders = 5\nhot_standby = on\n" +
		"shared_buffers = 32MB\nmax_connections = 120\n" // as on the command line: a reload then finds no conflict
	if err := appendFile(filepath.Join(p.data[0], "postgresql.conf"), conf); err != nil {
		p.Cleanup()
		return nil, fmt.Errorf("throwaway: %w", err)
	}
	if err := launchNode(ctx, primary); err != nil {
		p.Cleanup()
		return nil, err
	}
	if err := p.baseBackup(ctx, 1); err != nil {
		p.Cleanup()
		return nil, err
	}
	if err := launchNode(ctx, p.nodes[1]); err != nil {
		p.Cleanup()
		return nil, err
	}
	if err := p.setSynchronousStandby(ctx, 0, nodeName(1)); err != nil {
		p.Cleanup()
		return nil, err
	}
	if err := p.WaitReplicated(ctx); err != nil {
		p.Cleanup()
		return nil, err
	}
	return p, nil
}

// launchNode starts s for the first time.
func launchNode(ctx context.Context, s *Server) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.startLocked(ctx)
}

// conninfo is a libpq keyword/value string reaching node i.
func (p *PostgresPair) conninfo(i int, extra ...string) string {
	return strings.Join(append([]string{"host=127.0.0.1", "port=" + strconv.Itoa(p.nodes[i].port), "user=postgres", "dbname=postgres",
		"connect_timeout=2"}, extra...), " ")
}

// streamConninfo is the conninfo the other node's walreceiver streams
// from node i with (streamAddr).
func (p *PostgresPair) streamConninfo(i int, extra ...string) string {
	_, port, _ := net.SplitHostPort(p.streamAddr(i))
	return strings.Join(append([]string{"host=127.0.0.1", "port=" + port, "user=postgres", "dbname=postgres",
		"connect_timeout=2"}, extra...), " ")
}

// baseBackup makes node i's data directory a pg_basebackup of the other
// node, with its standby.signal.
func (p *PostgresPair) baseBackup(ctx context.Context, i int) error {
	if err := os.RemoveAll(p.data[i]); err != nil {
		return fmt.Errorf("throwaway: %w", err)
	}
	cmd := exec.CommandContext(ctx, filepath.Join(p.bin, "pg_basebackup"), "-d", p.conninfo(1-i),
		"-D", p.data[i], "-X", "stream", "-c", "fast", "--no-sync")
	p.acct.credential(cmd)
	if err := run(ctx, p.nodes[i].log, cmd); err != nil {
		return fmt.Errorf("throwaway: pg_basebackup: %v: %s", err, p.nodes[i].logTail())
	}
	return p.standbySignal(i)
}

// standbySignal creates node i's standby.signal: it starts as a standby.
func (p *PostgresPair) standbySignal(i int) error {
	f := filepath.Join(p.data[i], "standby.signal")
	if err := os.WriteFile(f, nil, 0o600); err != nil {
		return fmt.Errorf("throwaway: %w", err)
	}
	if p.acct != nil {
		if err := os.Chown(f, p.acct.uid, p.acct.gid); err != nil {
			return fmt.Errorf("throwaway: %w", err)
		}
	}
	return nil
}

func appendFile(path, text string) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		return err
	}
	if _, err := f.WriteString(text); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// exec runs statements on node i over a connection of its own.
func (p *PostgresPair) exec(ctx context.Context, i int, stmts ...string) error {
	db, err := sql.Open("postgres", p.nodes[i].dsn+"&connect_timeout=2")
	if err != nil {
		return err
	}
	defer db.Close()
	for _, q := range stmts {
		if _, err := db.ExecContext(ctx, q); err != nil {
			return fmt.Errorf("throwaway: %s on %s: %w", q, nodeName(i), err)
		}
	}
	return nil
}

// setSynchronousStandby sets node i's synchronous_standby_names to name
// ("" for none) when the pair is synchronous, and reloads its
// configuration. The setting is in postgresql.auto.conf (ALTER SYSTEM),
// which pg_basebackup and pg_rewind copy: every promotion and rejoin
// sets it again.
func (p *PostgresPair) setSynchronousStandby(ctx context.Context, i int, name string) error {
	if !p.repl.synchronous() {
		return nil
	}
	return p.exec(ctx, i, "ALTER SYSTEM SET synchronous_standby_names = '"+name+"'", "SELECT pg_reload_conf()")
}

// Replication returns the pair's mode.
func (p *PostgresPair) Replication() Replication { return p.repl }

// Promote promotes the standby (pg_ctl promote) once the primary is down,
// and returns when the standby accepts writes (pg_is_in_recovery() is
// false) or ctx ends. With a synchronous mode its
// synchronous_standby_names is emptied first: it has no standby until
// Rejoin. It returns an error matching ErrNotPrimary when the primary
// still runs or the standby does not.
func (p *PostgresPair) Promote(ctx context.Context) error {
	next, err := p.promotable()
	if err != nil {
		return err
	}
	defer p.mu.Unlock()
	if err := p.setSynchronousStandby(ctx, next, ""); err != nil {
		return err
	}
	secs := 60
	if dl, ok := ctx.Deadline(); ok {
		secs = max(1, int(time.Until(dl).Seconds()))
	}
	cmd := exec.CommandContext(ctx, filepath.Join(p.bin, "pg_ctl"), "promote", "-D", p.data[next], "-w", "-t", strconv.Itoa(secs))
	p.acct.credential(cmd)
	if err := run(ctx, filepath.Join(p.nodes[next].dir, "pg_ctl.log"), cmd); err != nil {
		return fmt.Errorf("throwaway: pg_ctl promote: %v: %s", err, p.nodes[next].logTail())
	}
	if err := p.poll(ctx, next, "SELECT NOT pg_is_in_recovery()"); err != nil {
		return fmt.Errorf("throwaway: the promoted standby: %w", err)
	}
	p.promoted(next)
	return nil
}

// Rejoin makes the old primary (down after KillPrimary and Promote) the
// standby of the new one, by method, starts it, gives the new primary
// its synchronous standby back (synchronous modes) and returns once it
// is replicated (WaitReplicated), or an error when ctx ends first. It
// returns an error matching ErrNotPrimary when that server runs.
func (p *PostgresPair) Rejoin(ctx context.Context, method RejoinMethod) error {
	i, err := p.rejoinable()
	if err != nil {
		return err
	}
	defer p.mu.Unlock()
	old := p.nodes[i]
	switch method {
	case RejoinRewind:
		// pg_rewind reads the new primary's timeline from its control
		// file, which the checkpoint after the promotion updates; that
		// checkpoint runs in the background, spread over seconds, and
		// before it ends pg_rewind sees one timeline and rewinds
		// nothing. A checkpoint now ends it.
		if err := p.exec(ctx, p.primary, "CHECKPOINT"); err != nil {
			return err
		}
		// The old primary was killed: pg_rewind first recovers it in
		// single-user mode, then rewinds it to where the new primary's
		// timeline forked, and copies what changed since.
		cmd := exec.CommandContext(ctx, filepath.Join(p.bin, "pg_rewind"), "-D", p.data[i],
			"--source-server="+p.conninfo(p.primary), "--no-sync")
		cmd.Dir = old.dir // its single-user postgres runs as postgres: a readable working directory
		p.acct.credential(cmd)
		if err := run(ctx, old.log, cmd); err != nil {
			return fmt.Errorf("throwaway: pg_rewind: %v: %s", err, old.logTail())
		}
		if err := p.standbySignal(i); err != nil {
			return err
		}
	case RejoinBaseBackup:
		if err := p.baseBackup(ctx, i); err != nil {
			return err
		}
	default:
		return fmt.Errorf("throwaway: rejoin method %q: want pg_rewind or pg_basebackup", method)
	}
	if err := old.Start(ctx); err != nil {
		return err
	}
	if err := p.setSynchronousStandby(ctx, p.primary, nodeName(i)); err != nil {
		return err
	}
	return p.waitReplicatedLocked(ctx)
}

// WaitReplicated returns once the standby streams from the primary
// (pg_stat_replication), is its synchronous standby in a synchronous
// mode, and has replayed (pg_last_wal_replay_lsn) the primary's WAL up to
// its position at the call (pg_current_wal_lsn), or an error when ctx
// ends first.
func (p *PostgresPair) WaitReplicated(ctx context.Context) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.waitReplicatedLocked(ctx)
}

func (p *PostgresPair) waitReplicatedLocked(ctx context.Context) error {
	prim, stby := p.primary, 1-p.primary
	db, err := sql.Open("postgres", p.nodes[prim].dsn+"&connect_timeout=2")
	if err != nil {
		return err
	}
	defer db.Close()
	var lsn string
	if err := db.QueryRowContext(ctx, "SELECT pg_current_wal_lsn()::text").Scan(&lsn); err != nil {
		return fmt.Errorf("throwaway: the primary's WAL position: %w", err)
	}
	want := "async"
	if p.repl.synchronous() {
		want = "sync"
	}
	streaming := "SELECT EXISTS (SELECT 1 FROM pg_stat_replication WHERE application_name = '" + nodeName(stby) +
		"' AND state = 'streaming' AND sync_state = '" + want + "')"
	if err := p.poll(ctx, prim, streaming); err != nil {
		return fmt.Errorf("throwaway: the standby does not stream (%s): %w", want, err)
	}
	if err := p.poll(ctx, stby, "SELECT COALESCE(pg_last_wal_replay_lsn() >= '"+lsn+"'::pg_lsn, false)"); err != nil {
		return fmt.Errorf("throwaway: the standby has not replayed %s: %w", lsn, err)
	}
	return nil
}

// poll runs the boolean query on node i until it answers true, or ctx
// ends.
func (p *PostgresPair) poll(ctx context.Context, i int, query string) error {
	return pollSQL(ctx, "postgres", p.nodes[i].dsn+"&connect_timeout=2", query)
}

// pollSQL runs the boolean query through driver on dsn until it answers
// true, or ctx ends.
func pollSQL(ctx context.Context, driver, dsn, query string, args ...any) error {
	db, err := sql.Open(driver, dsn)
	if err != nil {
		return err
	}
	defer db.Close()
	db.SetMaxOpenConns(1)
	var last error
	for {
		var ok bool
		qctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		last = db.QueryRowContext(qctx, query, args...).Scan(&ok)
		cancel()
		if last == nil && ok {
			return nil
		}
		select {
		case <-ctx.Done():
			if last == nil {
				last = errors.New("not yet")
			}
			return fmt.Errorf("%v: %w", last, ctx.Err())
		case <-time.After(20 * time.Millisecond): // the poll's pace
		}
	}
}

// MultiHostDSN returns a DSN naming every address (host:port, in order)
// with target_session_attrs=read-write, for driver: "pgx" (a URL with the
// hosts in its authority, postgres://postgres@h1:p1,h2:p2/postgres?…) or
// "postgres" for lib/pq (v1.11 and later; its URL form takes one host,
// so the hosts and ports are in the query: postgres://postgres@/postgres?host=h1,h2&port=p1,p2&…).
// Both drivers try the addresses in order for each new connection and
// keep the first that accepts writes, so a pool follows a promoted
// standby.
func MultiHostDSN(driver string, addrs ...string) string {
	q := "sslmode=disable&target_session_attrs=read-write&connect_timeout=2"
	if driver == "pgx" {
		return "postgres://postgres@" + strings.Join(addrs, ",") + "/postgres?" + q
	}
	var hosts, ports []string
	for _, a := range addrs {
		h, p, err := net.SplitHostPort(a)
		if err != nil {
			h, p = a, "5432"
		}
		hosts, ports = append(hosts, h), append(ports, p)
	}
	return "postgres://postgres@/postgres?host=" + url.QueryEscape(strings.Join(hosts, ",")) +
		"&port=" + url.QueryEscape(strings.Join(ports, ",")) + "&" + q
}
