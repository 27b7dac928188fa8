package throwaway

import (
	"context"
	"database/sql"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/opledger/opledger/internal/harness/faultproxy"
)

// MariaDBPairOptions configures StartMariaDBPair.
type MariaDBPairOptions struct {
	// SemiSync turns on semi-synchronous replication with
	// rpl_semi_sync_master_wait_point = AFTER_SYNC: the primary writes a
	// transaction to its binary log, waits until the replica has it in
	// its relay log, and only then commits it in InnoDB and answers (no
	// other session sees it before). Without it, replication is
	// asynchronous.
	SemiSync bool
	// StreamDelay, when positive, sends the replica's connection to the
	// primary through a loopback proxy that holds every chunk, both
	// ways, for this long (as PairOptions.StreamDelay).
	StreamDelay time.Duration
}

// MariaDBPair is a throw-away MariaDB primary and its replica (GTID
// replication over loopback, binary logs on both, the replica logging
// what it applies), each a Server of its own, and an address (Addr) that
// always reaches the primary: a loopback proxy moved to the new primary
// by Promote, as a virtual IP or a DNS name is moved by a failover
// manager (go-sql-driver/mysql takes one address). Its methods are safe
// for concurrent use and serialised.
//
// With SemiSync the promoted replica runs alone, semi-synchronous
// replication off, until Rejoin gives it a replica again.
type MariaDBPair struct {
	pairState
	semiSync bool
	install  string
	acct     *account
	vip      *faultproxy.Proxy
	// serverID is each node's server_id: a rebuilt node gets a new one,
	// or it would skip the transactions it wrote itself before (a
	// replica ignores its own server id's events).
	serverID [2]int
}

// StartMariaDBPair installs and starts a primary and a replica that
// replicates from it from the start of its binary log, creates the
// database "test" on the primary, and returns once the replica has
// applied it (and, with SemiSync, acknowledges as a semi-synchronous
// replica), or an error when ctx ends first (leaving nothing behind).
// Call Cleanup when done.
func StartMariaDBPair(ctx context.Context, opts MariaDBPairOptions) (*MariaDBPair, error) {
	_, install, ok := mariadbBinaries()
	if !ok {
		return nil, fmt.Errorf("%w: MariaDB's mariadbd and mariadb-install-db", ErrNotInstalled)
	}
	if opts.StreamDelay < 0 {
		return nil, fmt.Errorf("throwaway: a negative StreamDelay")
	}
	acct, err := runAs("mysql")
	if err != nil {
		return nil, err
	}
	p := &MariaDBPair{semiSync: opts.SemiSync, install: install, acct: acct, serverID: [2]int{1, 2}}
	for i := range p.nodes {
		s, err := startMariaDBNode(ctx, func() []string { return p.replicationSettings(i) })
		if err != nil {
			p.Cleanup()
			return nil, err
		}
		p.nodes[i] = s
	}
	if err := p.startDelays(opts.StreamDelay); err != nil {
		p.Cleanup()
		return nil, err
	}
	if p.vip, err = faultproxy.New(p.nodes[0].Addr()); err != nil {
		p.Cleanup()
		return nil, fmt.Errorf("throwaway: %w", err)
	}
	if err := createTestDB(ctx, p.nodes[0]); err != nil {
		p.Cleanup()
		return nil, err
	}
	if err := p.replicate(ctx, 1); err != nil {
		p.Cleanup()
		return nil, err
	}
	if err := p.semiSyncOn(ctx); err != nil {
		p.Cleanup()
		return nil, err
	}
	if err := p.waitReplicatedLocked(ctx); err != nil {
		p.Cleanup()
		return nil, err
	}
	return p, nil
}

// replicationSettings are node i's settings beyond StartMariaDB's: its
// server id, binary log (with what it applies as a replica), and
// semi-synchronous replication as a replica (as a primary it is turned
// on once its replica is connected, and waits for an hour, never falling
// back to asynchronous on its own).
func (p *MariaDBPair) replicationSettings(i int) []string {
	on := map[bool]string{true: "ON", false: "OFF"}[p.semiSync]
	return []string{
		"--server-id=" + strconv.Itoa(p.serverID[i]),
		"--log-bin=mariadb-bin",
		"--log-slave-updates",
		"--binlog-format=ROW",
		"--relay-log=relay-bin",
		"--sync-binlog=0", // as InnoDB's log: the kernel has it
		"--skip-slave-start",
		"--slave-net-timeout=5",
		"--rpl-semi-sync-master-enabled=OFF",
		"--rpl-semi-sync-slave-enabled=" + on,
		"--rpl-semi-sync-master-wait-point=AFTER_SYNC",
		"--rpl-semi-sync-master-timeout=3600000",
	}
}

// semiSyncOn turns the primary's semi-synchronous waits on (SemiSync).
func (p *MariaDBPair) semiSyncOn(ctx context.Context) error {
	if !p.semiSync {
		return nil
	}
	return p.exec(ctx, p.primary, "SET GLOBAL rpl_semi_sync_master_enabled = ON")
}

// SemiSync reports whether the pair replicates semi-synchronously.
func (p *MariaDBPair) SemiSync() bool { return p.semiSync }

// Addr returns the address that reaches the primary, whichever node it
// is: a loopback proxy that Promote points at the promoted replica
// (cutting the connections it held).
func (p *MariaDBPair) Addr() string { return p.vip.Addr() }

// DSN returns the go-sql-driver DSN of the database "test" through Addr.
func (p *MariaDBPair) DSN() string { return "root@tcp(" + p.Addr() + ")/test" }

func (p *MariaDBPair) open(i int) (*sql.DB, error) {
	return openSQL("mysql", rootConfig(p.nodes[i]).FormatDSN())
}

// exec runs statements on node i over a connection of its own.
func (p *MariaDBPair) exec(ctx context.Context, i int, stmts ...string) error {
	db, err := p.open(i)
	if err != nil {
		return err
	}
	defer db.Close()
	db.SetMaxOpenConns(1)
	for _, q := range stmts {
		if _, err := db.ExecContext(ctx, q); err != nil {
			return fmt.Errorf("throwaway: %s on mariadb node %d: %w", q, i, err)
		}
	}
	return nil
}

// replicate makes node i a replica of the other node from the start of
// its binary log (GTID), and starts it.
func (p *MariaDBPair) replicate(ctx context.Context, i int) error {
	host, port, _ := net.SplitHostPort(p.streamAddr(1 - i))
	return p.exec(ctx, i,
		"STOP SLAVE",
		"RESET SLAVE ALL",
		"SET GLOBAL gtid_slave_pos = ''",
		"CHANGE MASTER TO MASTER_HOST = '"+host+"', MASTER_PORT = "+port+", MASTER_USER = 'root', MASTER_PASSWORD = '', "+
			"MASTER_USE_GTID = slave_pos, MASTER_CONNECT_RETRY = 1",
		"START SLAVE")
}

// WaitReplicated returns once the replica's threads run and it has
// applied the primary's binary log up to its position at the call
// (MASTER_GTID_WAIT), and, with SemiSync, the primary counts it as a
// semi-synchronous replica; or an error when ctx ends first.
func (p *MariaDBPair) WaitReplicated(ctx context.Context) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.waitReplicatedLocked(ctx)
}

func (p *MariaDBPair) waitReplicatedLocked(ctx context.Context) error {
	prim, repl := p.primary, 1-p.primary
	db, err := p.open(prim)
	if err != nil {
		return err
	}
	defer db.Close()
	var pos string
	if err := db.QueryRowContext(ctx, "SELECT @@GLOBAL.gtid_binlog_pos").Scan(&pos); err != nil {
		return fmt.Errorf("throwaway: the primary's binary log position: %w", err)
	}
	if err := pollSQL(ctx, "mysql", rootConfig(p.nodes[repl]).FormatDSN(), "SELECT MASTER_GTID_WAIT(?, 1) = 0", pos); err != nil {
		return fmt.Errorf("throwaway: the replica has not applied %s: %w", pos, err)
	}
	if p.semiSync {
		q := "SELECT COUNT(*) = 2 FROM information_schema.GLOBAL_STATUS WHERE " +
			"(VARIABLE_NAME = 'RPL_SEMI_SYNC_MASTER_CLIENTS' AND VARIABLE_VALUE > 0) OR (VARIABLE_NAME = 'RPL_SEMI_SYNC_MASTER_STATUS' AND VARIABLE_VALUE = 'ON')"
		if err := pollSQL(ctx, "mysql", rootConfig(p.nodes[prim]).FormatDSN(), q); err != nil {
			return fmt.Errorf("throwaway: the replica is not semi-synchronous: %w", err)
		}
	}
	return nil
}

// Promote makes the replica the primary once the primary is down: its
// receiving thread stops, it applies what its relay log holds (with
// SemiSync, every transaction the primary acknowledged), its replication
// is reset, semi-synchronous waits are turned off (it has no replica
// until Rejoin), and Addr is pointed at it. It returns an error matching
// ErrNotPrimary when the primary still runs or the replica does not.
func (p *MariaDBPair) Promote(ctx context.Context) error {
	next, err := p.promotable()
	if err != nil {
		return err
	}
	defer p.mu.Unlock()
	if err := p.exec(ctx, next, "STOP SLAVE IO_THREAD"); err != nil {
		return err
	}
	if err := p.waitApplied(ctx, next); err != nil {
		return fmt.Errorf("throwaway: the replica did not apply its relay log: %w", err)
	}
	if err := p.exec(ctx, next, "STOP SLAVE", "RESET SLAVE ALL", "SET GLOBAL rpl_semi_sync_master_enabled = OFF"); err != nil {
		return err
	}
	if err := p.vip.SetTarget(p.nodes[next].Addr()); err != nil {
		return err
	}
	p.vip.Cut()
	p.promoted(next)
	return nil
}

// waitApplied waits until node i's applier has executed everything its
// receiver wrote to the relay log (SHOW SLAVE STATUS: the executed
// position is the read one, or the applier has read all of the relay
// log), or ctx ends.
func (p *MariaDBPair) waitApplied(ctx context.Context, i int) error {
	db, err := p.open(i)
	if err != nil {
		return err
	}
	defer db.Close()
	db.SetMaxOpenConns(1)
	last, since := "", time.Now()
	for {
		st, err := slaveStatus(ctx, db)
		if err != nil {
			return err
		}
		if st["Slave_SQL_Running"] != "Yes" {
			return fmt.Errorf("the applier stopped: %s", st["Last_SQL_Error"])
		}
		// Everything applied; or all of the relay log read, at one
		// position for 300ms: a transaction whose last events the killed
		// primary never sent stays unapplied, and the applier waits at
		// the end of the log. (The state alone can be stale: the
		// applier, woken by the receiver's last write, may not have run
		// yet.)
		if st["Relay_Master_Log_File"] == st["Master_Log_File"] && st["Exec_Master_Log_Pos"] == st["Read_Master_Log_Pos"] {
			return nil
		}
		at := st["Relay_Log_File"] + ":" + st["Relay_Log_Pos"]
		switch {
		case !strings.HasPrefix(st["Slave_SQL_Running_State"], "Slave has read all relay log") || at != last:
			last, since = at, time.Now()
		case time.Since(since) >= 300*time.Millisecond:
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(20 * time.Millisecond): // the poll's pace
		}
	}
}

// slaveStatus returns SHOW SLAVE STATUS's one row by column name.
func slaveStatus(ctx context.Context, db *sql.DB) (map[string]string, error) {
	rows, err := db.QueryContext(ctx, "SHOW SLAVE STATUS")
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	cols, err := rows.Columns()
	if err != nil {
		return nil, err
	}
	if !rows.Next() {
		return nil, fmt.Errorf("not a replica: %v", rows.Err())
	}
	vals := make([]sql.NullString, len(cols))
	ptrs := make([]any, len(cols))
	for i := range vals {
		ptrs[i] = &vals[i]
	}
	if err := rows.Scan(ptrs...); err != nil {
		return nil, err
	}
	out := make(map[string]string, len(cols))
	for i, c := range cols {
		out[c] = vals[i].String
	}
	return out, rows.Err()
}

// Rejoin makes the old primary (down after KillPrimary and Promote) the
// replica of the new one with a fresh data directory
// (mariadb-install-db) that replicates the new primary's binary log from
// its start: MariaDB has no pg_rewind, and the old primary's own log may
// hold transactions the new one never received. With SemiSync it turns
// the new primary's semi-synchronous waits back on. It returns once the
// replica is replicated (WaitReplicated), or an error when ctx ends
// first, or one matching ErrNotPrimary when that server runs.
func (p *MariaDBPair) Rejoin(ctx context.Context) error {
	i, err := p.rejoinable()
	if err != nil {
		return err
	}
	defer p.mu.Unlock()
	old := p.nodes[i]
	if err := os.RemoveAll(filepath.Join(old.dir, "data")); err != nil {
		return fmt.Errorf("throwaway: %w", err)
	}
	p.serverID[i] = max(p.serverID[0], p.serverID[1]) + 1
	if err := installMariaDB(ctx, old, p.install, p.acct); err != nil {
		return err
	}
	if err := old.Start(ctx); err != nil {
		return err
	}
	if err := p.replicate(ctx, i); err != nil {
		return err
	}
	if err := p.semiSyncOn(ctx); err != nil {
		return err
	}
	return p.waitReplicatedLocked(ctx)
}

// Cleanup kills both servers, closes the proxies and removes the
// servers' directories; later calls do nothing.
func (p *MariaDBPair) Cleanup() error {
	if p.vip != nil {
		p.vip.Close()
	}
	return p.pairState.Cleanup()
}
