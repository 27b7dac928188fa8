package main

import (
	"context"
	"database/sql"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/opledger/opledger/internal/dialectkit"
	"github.com/opledger/opledger/outbox"

	"github.com/opledger/opledger/cmd/opledger/internal/console"
)

// The console's bounds: no page reads more rows than these, whatever the
// table's size (docs/operations.md, "The console").
const (
	// consoleCountCap is the most rows a page counts; past it the page
	// says "at least" (or shows the database's estimate).
	consoleCountCap = 1_000
	// consolePendingScan is how many of the oldest live entries the
	// overview reads, along the expires_at index, to find pending ones.
	consolePendingScan = 1_000
	// consoleGrowthWindow is the span of claims the growth is measured on.
	consoleGrowthWindow = 10 * time.Minute
	// consoleListed is how many pending entries, keys or dead messages a
	// page lists.
	consoleListed = 50
)

// consoleBackend is the console's view of one ledger table and its outbox.
type consoleBackend struct {
	db    *sql.DB
	t     target
	table string
	q     ledgerSQL
	lw    ledgerWindow
	ob    *outbox.Outbox
}

var _ console.Backend = (*consoleBackend)(nil)

// boundedCount counts the rows of from (a table and its WHERE), reading
// at most consoleCountCap+1 of them in the order of orderBy (an indexed
// column, so that the read follows the index: a planner that expects
// many matches would otherwise scan the table); past that, it takes the
// planner's estimate of the rows (EXPLAIN) where the database gives one.
func (b *consoleBackend) boundedCount(ctx context.Context, from, orderBy string, args ...any) (console.Count, error) {
	var n int64
	err := b.db.QueryRowContext(ctx, fmt.Sprintf("SELECT COUNT(*) FROM (SELECT 1 AS one FROM %s ORDER BY %s LIMIT %d) s", from, orderBy, consoleCountCap+1), args...).Scan(&n)
	if err != nil || n <= consoleCountCap {
		return console.Count{N: n}, err
	}
	if est, ok := b.explainRows(ctx, "SELECT 1 FROM "+from, args...); ok && est > consoleCountCap {
		return console.Count{N: est, Estimated: true}, nil
	}
	return console.Count{N: consoleCountCap, AtLeast: true}, nil
}

// explainRows is the planner's estimate of the rows query returns:
// PostgreSQL's EXPLAIN (FORMAT JSON) "Plan Rows", MySQL's and MariaDB's
// EXPLAIN rows (from index dives). SQLite gives none.
func (b *consoleBackend) explainRows(ctx context.Context, query string, args ...any) (int64, bool) {
	switch b.t.dialect.Name() {
	case "postgres":
		var plan string
		if err := b.db.QueryRowContext(ctx, "EXPLAIN (FORMAT JSON) "+query, args...).Scan(&plan); err != nil {
			return 0, false
		}
		var p []struct {
			Plan struct {
				Rows float64 `json:"Plan Rows"`
			}
		}
		if json.Unmarshal([]byte(plan), &p) != nil || len(p) != 1 {
			return 0, false
		}
		return int64(p[0].Plan.Rows), true
	case "mysql":
		rows, err := b.db.QueryContext(ctx, "EXPLAIN "+query, args...)
		if err != nil {
			return 0, false
		}
		defer rows.Close()
		cols, err := rows.Columns()
		if err != nil || !rows.Next() {
			return 0, false
		}
		vals := make([]sql.RawBytes, len(cols))
		dest := make([]any, len(cols))
		for i := range vals {
			dest[i] = &vals[i]
		}
		if rows.Scan(dest...) != nil {
			return 0, false
		}
		for i, c := range cols {
			if strings.EqualFold(c, "rows") {
				n, err := strconv.ParseInt(string(vals[i]), 10, 64)
				return n, err == nil
			}
		}
	}
	return 0, false
}

// pgLeaves selects, in pg_class c, the tables that hold the rows of the
// table $1 (quoted): itself, or the leaves of its partition tree, looked
// up by pg_class's oid index (a busy test server's pg_class can be large
// with dead rows: a join would scan it).
const pgLeaves = "pg_class c WHERE c.relkind = 'r' AND c.oid = ANY (ARRAY(SELECT relid FROM pg_partition_tree(to_regclass($1)) " +
	"UNION ALL SELECT to_regclass($1))::oid[])"

// estimateRows is the database's own estimate of table's rows: what its
// planner uses, refreshed by ANALYZE (and autovacuum, and InnoDB's
// automatic statistics). ok is false when it has none.
func (b *consoleBackend) estimateRows(ctx context.Context, table string) (n int64, source string, ok bool) {
	var (
		query string
		f     float64
	)
	switch b.t.dialect.Name() {
	case "postgres":
		// Summed over the partitions of a partitioned table (a table
		// that is not is its own one leaf).
		query, source = "SELECT COALESCE(SUM(c.reltuples) FILTER (WHERE c.reltuples > 0), -1) FROM "+pgLeaves,
			"pg_class.reltuples (the planner's estimate), summed over the partitions"
		table = b.t.dialect.QuoteIdent(table)
	case "mysql", "tidb":
		query, source = "SELECT TABLE_ROWS FROM information_schema.TABLES WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME = ?",
			"information_schema.TABLES.TABLE_ROWS (InnoDB's estimate)"
	case "sqlite":
		query, source = "SELECT CAST(stat AS INTEGER) FROM sqlite_stat1 WHERE tbl = ? LIMIT 1", "sqlite_stat1 (written by ANALYZE)"
	default:
		return 0, "", false
	}
	if err := b.db.QueryRowContext(ctx, query, table).Scan(&f); err != nil || f < 0 {
		return 0, "", false
	}
	return int64(f), source, true
}

// countRows is the table's rows: the database's estimate when it has one
// past consoleCountCap, else counted up to consoleCountCap.
func (b *consoleBackend) countRows(ctx context.Context, table, quoted, orderBy string) (console.Count, error) {
	if n, src, ok := b.estimateRows(ctx, table); ok && n > consoleCountCap {
		return console.Count{N: n, Estimated: true, Source: src}, nil
	}
	c, err := b.boundedCount(ctx, quoted, orderBy)
	if err != nil {
		return c, err
	}
	c.Source = "counted"
	if c.AtLeast {
		c.Source = fmt.Sprintf("more than %d, and the database has no estimate (ANALYZE makes one): not counted on page load", consoleCountCap)
	}
	return c, nil
}

// Ledger reads the overview: every figure from an index range, a bounded
// read or the database's estimates.
func (b *consoleBackend) Ledger(ctx context.Context, now time.Time) (console.LedgerView, error) {
	us := now.UnixMicro()
	v := console.LedgerView{Database: b.t.display, Table: b.table, MeasuredAt: now.UTC(), Retention: b.lw.retention, ClockSkew: b.lw.skew,
		GrowthWindow: consoleGrowthWindow,
		PartitionsNote: "The ledger is not partitioned: expired entries are deleted by opledger sweep. " +
			"A partitioned ledger's partitions, and which of them can be dropped, are listed here."}
	w := newWindow(b.lw, now)
	v.RefusedBornBefore = w.RefusedBornUntil
	var err error
	if v.Entries, err = b.countRows(ctx, b.table, b.q.table, "expires_at"); err != nil {
		return v, b.t.scrubErr(err)
	}
	// Expired: a range of the expires_at index; its minimum is the
	// index's first key.
	p := b.t.dialect.Placeholder(1)
	if v.Expired, err = b.boundedCount(ctx, b.q.table+" WHERE expires_at <= "+p, "expires_at", us); err != nil {
		return v, b.t.scrubErr(err)
	}
	v.Expired.Source = "a range of the expires_at index" + estimated(v.Expired)
	// One aggregate a statement: SQLite reads MIN or MAX from the index's
	// end only when it is the statement's one aggregate (both in one
	// statement scan the table).
	var minExp, maxExp sql.NullInt64
	if err := b.db.QueryRowContext(ctx, "SELECT MIN(expires_at) FROM "+b.q.table).Scan(&minExp); err != nil {
		return v, b.t.scrubErr(err)
	}
	if err := b.db.QueryRowContext(ctx, "SELECT MAX(expires_at) FROM "+b.q.table).Scan(&maxExp); err != nil {
		return v, b.t.scrubErr(err)
	}
	if minExp.Valid && minExp.Int64 <= us {
		v.OldestExpired = time.UnixMicro(minExp.Int64).UTC()
	}
	// Growth: entries whose expiry is within the window before the
	// newest one's; with one retention, those claimed in that window.
	if maxExp.Valid {
		if v.Growth, err = b.boundedCount(ctx, b.q.table+" WHERE expires_at > "+p, "expires_at DESC", maxExp.Int64-consoleGrowthWindow.Microseconds()); err != nil {
			return v, b.t.scrubErr(err)
		}
	}
	v.Growth.Source = "A range of the expires_at index, ending at the newest entry's expiry: with one retention for every method, " +
		"the entries claimed in that span" + estimated(v.Growth) + "."
	if err := b.pending(ctx, &v, us); err != nil {
		return v, b.t.scrubErr(err)
	}
	b.size(ctx, &v)
	b.sessions(ctx, &v)
	b.partitions(ctx, &v)
	return v, nil
}

// estimated says how a range count past the page's bound was had.
func estimated(c console.Count) string {
	if c.Estimated {
		return fmt.Sprintf(" (past %d rows: the planner's estimate, EXPLAIN)", consoleCountCap)
	}
	return ""
}

// pending reads the oldest live entries along the expires_at index and
// lists the pending ones among them.
func (b *consoleBackend) pending(ctx context.Context, v *console.LedgerView, us int64) error {
	oldest := fmt.Sprintf("(SELECT id, caller, method, created_at, completed_at, expires_at, code, LENGTH(response) AS sz FROM %s "+
		"WHERE expires_at > %s ORDER BY expires_at LIMIT %d) s", b.q.table, b.t.dialect.Placeholder(1), consolePendingScan)
	if err := b.db.QueryRowContext(ctx, "SELECT COUNT(*), COALESCE(SUM(CASE WHEN completed_at IS NULL THEN 1 ELSE 0 END), 0) FROM "+oldest, us).
		Scan(&v.PendingScanned, &v.Pending); err != nil {
		return err
	}
	v.PendingAll = v.PendingScanned < consolePendingScan
	rows, err := b.db.QueryContext(ctx, fmt.Sprintf("SELECT id, caller, method, created_at, completed_at, expires_at, code, sz FROM %s "+
		"WHERE completed_at IS NULL ORDER BY created_at LIMIT %d", oldest, consoleListed), us)
	if err != nil {
		return err
	}
	defer rows.Close()
	for rows.Next() {
		var l listing
		if err := rows.Scan(&l.id, &l.caller, &l.method, &l.created, &l.completed, &l.expires, &l.code, &l.sz); err != nil {
			return err
		}
		v.OldestPending = append(v.OldestPending, entryRow(l, time.UnixMicro(us)))
	}
	return rows.Err()
}

func entryRow(l listing, now time.Time) console.EntryRow {
	return console.EntryRow{ID: hex.EncodeToString(l.id), Caller: l.caller, Method: l.method, State: l.state(now),
		Created: time.UnixMicro(l.created).UTC(), Expires: time.UnixMicro(l.expires).UTC(), Result: l.result()}
}

// size is the dialect's measure of the table (dialectkit.Sizer). On
// SQLite that walks every page (dbstat), so past the count's bound the
// page shows the database file's size instead.
func (b *consoleBackend) size(ctx context.Context, v *console.LedgerView) {
	sz, ok := b.t.dialect.(dialectkit.Sizer)
	switch {
	case b.t.dialect.Name() == "sqlite" && v.Entries.N > consoleCountCap:
		var pages, pageSize int64
		err := b.db.QueryRowContext(ctx, "SELECT page_count, page_size FROM pragma_page_count(), pragma_page_size()").Scan(&pages, &pageSize)
		if err != nil {
			v.SizeUnavailable = oneLine(b.t.scrubErr(err))
			return
		}
		v.TableBytes, v.SizeEstimated = pages*pageSize, true
		v.SizeUnavailable = ""
	case !ok:
		v.SizeUnavailable = "the dialect cannot measure its tables"
	default:
		ts, err := sz.TableSize(ctx, b.db, b.table)
		if err != nil {
			v.SizeUnavailable = oneLine(b.t.scrubErr(err))
			return
		}
		v.TableBytes, v.IndexBytes, v.SizeEstimated = ts.Table, ts.Indexes, ts.Estimated
	}
}

// partitions lists a partitioned PostgreSQL ledger's partitions, from the
// catalog (pg_partition_tree, pg_class), with each one's estimated rows
// and size.
func (b *consoleBackend) partitions(ctx context.Context, v *console.LedgerView) {
	if b.t.dialect.Name() != "postgres" {
		return
	}
	rows, err := b.db.QueryContext(ctx, "SELECT c.relname, COALESCE(pg_get_expr(c.relpartbound, c.oid), ''), c.reltuples, "+
		"pg_table_size(c.oid) + pg_indexes_size(c.oid) FROM pg_class c WHERE c.oid = ANY (ARRAY(SELECT relid FROM pg_partition_tree(to_regclass($1)) "+
		"WHERE isleaf AND level > 0)::oid[]) ORDER BY c.relname LIMIT 1000", b.q.table)
	if err != nil {
		v.PartitionsNote = "the partitions could not be read: " + oneLine(b.t.scrubErr(err))
		return
	}
	defer rows.Close()
	for rows.Next() {
		var p console.Partition
		var est float64
		if err := rows.Scan(&p.Name, &p.Bound, &est, &p.Bytes); err != nil {
			v.PartitionsNote = "the partitions could not be read: " + oneLine(b.t.scrubErr(err))
			return
		}
		p.Entries = console.Count{N: max(int64(est), 0), Estimated: true}
		v.Partitions = append(v.Partitions, p)
	}
	if rows.Err() == nil && len(v.Partitions) > 0 {
		v.PartitionsNote = "Partitioned by the key's birth (born_at): opledger sweep drops a bucket (a partition of a day's births, or of its width) once every key it can hold " +
			"is refused as expired and the retention its entries were written with has passed (opledger stats shows when). Entries are pg_class.reltuples (the planner's estimate; 0 before the first ANALYZE)."
	}
}

// sessions lists the sessions whose open transactions wrote the ledger,
// where the database shows them.
func (b *consoleBackend) sessions(ctx context.Context, v *console.LedgerView) {
	var query string
	var args []any
	switch b.t.dialect.Name() {
	case "postgres":
		v.SessionsSource = "pg_locks (the RowExclusiveLock a writing transaction holds on the table) joined to pg_stat_activity; " +
			"sessions of other users show only to a superuser or a member of pg_read_all_stats"
		query = "SELECT a.pid::text, COALESCE(a.usename, ''), COALESCE(a.application_name, ''), COALESCE(a.state, ''), " +
			"COALESCE(EXTRACT(EPOCH FROM (clock_timestamp() - a.xact_start)), 0)::float8, " +
			"COALESCE(a.wait_event_type || ': ' || a.wait_event, ''), COALESCE(host(a.client_addr), 'local') " +
			"FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid " +
			"WHERE l.locktype = 'relation' AND l.relation = to_regclass($1) AND l.mode = 'RowExclusiveLock' " +
			"AND a.pid <> pg_backend_pid() AND a.xact_start IS NOT NULL ORDER BY a.xact_start LIMIT " + fmt.Sprint(consoleListed)
		args = []any{b.q.table}
	case "mysql":
		v.SessionsSource = "information_schema.INNODB_TRX joined to information_schema.PROCESSLIST: open InnoDB transactions that " +
			"modified rows, in any table (MariaDB shows no table of a transaction's locks; needs the PROCESS privilege)"
		query = "SELECT CAST(t.trx_mysql_thread_id AS CHAR), COALESCE(p.USER, ''), '', t.trx_state, " +
			"TIMESTAMPDIFF(MICROSECOND, t.trx_started, NOW(6)) / 1e6, COALESCE(t.trx_wait_started, ''), " +
			"CONCAT(t.trx_rows_modified, ' rows modified, ', t.trx_rows_locked, ' locked') " +
			"FROM information_schema.INNODB_TRX t LEFT JOIN information_schema.PROCESSLIST p ON p.ID = t.trx_mysql_thread_id " +
			"WHERE t.trx_rows_modified > 0 AND t.trx_mysql_thread_id <> CONNECTION_ID() ORDER BY t.trx_started LIMIT " + fmt.Sprint(consoleListed)
	default:
		v.SessionsUnavailable = fmt.Sprintf("%s shows no sessions: an attempt in flight is invisible until it commits", b.t.dialect.Name())
		return
	}
	rows, err := b.db.QueryContext(ctx, query, args...)
	if err != nil {
		v.SessionsUnavailable = "the sessions could not be read: " + oneLine(b.t.scrubErr(err))
		return
	}
	defer rows.Close()
	for rows.Next() {
		var s console.Session
		var open float64
		if err := rows.Scan(&s.ID, &s.User, &s.Application, &s.State, &open, &s.Waiting, &s.Detail); err != nil {
			v.SessionsUnavailable = "the sessions could not be read: " + oneLine(b.t.scrubErr(err))
			return
		}
		s.Open = time.Duration(open * float64(time.Second))
		v.Sessions = append(v.Sessions, s)
	}
	if err := rows.Err(); err != nil {
		v.SessionsUnavailable = "the sessions could not be read: " + oneLine(b.t.scrubErr(err))
	}
}

// Entry reads one entry by its id: the primary key.
func (b *consoleBackend) Entry(ctx context.Context, id [32]byte, now time.Time) (*console.Entry, error) {
	var (
		l       listing
		born    int64
		typ     sql.NullString
		preview []byte
	)
	bornCol := "born_at"
	if !hasBornAt(ctx, b.db, b.q) {
		bornCol = "0"
	}
	err := b.db.QueryRowContext(ctx, fmt.Sprintf("SELECT id, caller, method, created_at, completed_at, expires_at, code, LENGTH(response), "+
		"%s, response_type, SUBSTR(response, 1, %d) FROM %s WHERE id = %s", bornCol, 256, b.q.table, b.t.dialect.Placeholder(1)), id[:]).
		Scan(&l.id, &l.caller, &l.method, &l.created, &l.completed, &l.expires, &l.code, &l.sz, &born, &typ, &preview)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, nil
	}
	if err != nil {
		return nil, b.t.scrubErr(err)
	}
	e := &console.Entry{EntryRow: entryRow(l, now), Code: l.code.Int64, ResponseType: typ.String, ResponseBytes: l.sz.Int64, ResponsePreview: preview}
	if born != 0 {
		e.Born = time.UnixMicro(born).UTC()
	}
	if l.completed.Valid {
		e.Completed = time.UnixMicro(l.completed.Int64).UTC()
	}
	return e, nil
}

// Outbox reads the outbox page: the keys of the oldest messages and the
// dead messages (outbox.Outbox.Dead, as relay --dead lists them).
func (b *consoleBackend) Outbox(ctx context.Context, now time.Time) (console.OutboxView, error) {
	name := outbox.TableFor(b.table)
	v := console.OutboxView{Table: name}
	qt := b.t.dialect.QuoteIdent(name)
	var err error
	if v.Messages, err = b.countRows(ctx, name, qt, "seq"); err != nil {
		v.Unavailable = "the outbox cannot be read (opledger migrate up creates it): " + oneLine(b.t.scrubErr(err))
		return v, nil
	}
	oldest := fmt.Sprintf("(SELECT partition_key, created_at, seq, dead_at FROM %s ORDER BY seq LIMIT %d) s", qt, consoleCountCap)
	rows, err := b.db.QueryContext(ctx, fmt.Sprintf("SELECT partition_key, COUNT(*), COALESCE(SUM(CASE WHEN dead_at IS NULL THEN 0 ELSE 1 END), 0), "+
		"MIN(created_at) FROM %s GROUP BY partition_key ORDER BY MIN(seq) LIMIT %d", oldest, consoleListed))
	if err != nil {
		return v, b.t.scrubErr(err)
	}
	defer rows.Close()
	for rows.Next() {
		var k console.KeyRow
		var n, created int64
		if err := rows.Scan(&k.Key, &n, &k.Dead, &created); err != nil {
			return v, b.t.scrubErr(err)
		}
		k.Waiting, k.Oldest = n-k.Dead, time.UnixMicro(created).UTC()
		v.Keys = append(v.Keys, k)
	}
	if err := rows.Err(); err != nil {
		return v, b.t.scrubErr(err)
	}
	v.KeysScanned, v.KeysAll = min(v.Messages.N, consoleCountCap), !v.Messages.AtLeast && !v.Messages.Estimated
	dead, err := b.ob.Dead(ctx, b.db, consoleListed+1)
	if err != nil {
		return v, b.t.scrubErr(err)
	}
	if len(dead) > consoleListed {
		dead, v.DeadMore = dead[:consoleListed], true
	}
	v.Dead = dead
	return v, nil
}

// RetryDead is relay --retry-dead.
func (b *consoleBackend) RetryDead(ctx context.Context, id string) (outbox.DeadMessage, error) {
	m, err := b.ob.RetryDead(ctx, b.db, id)
	return m, scrubKeepingIs(b.t, err)
}

// DiscardDead is relay --discard-dead.
func (b *consoleBackend) DiscardDead(ctx context.Context, id string) (outbox.DeadMessage, error) {
	m, err := b.ob.DiscardDead(ctx, b.db, id)
	return m, scrubKeepingIs(b.t, err)
}

// scrubKeepingIs scrubs err's message and keeps outbox.ErrNotDead
// recognisable.
func scrubKeepingIs(t target, err error) error {
	if err == nil {
		return nil
	}
	msg := t.scrub(err.Error())
	if errors.Is(err, outbox.ErrNotDead) {
		return fmt.Errorf("%w%s", outbox.ErrNotDead, strings.TrimPrefix(msg, outbox.ErrNotDead.Error()))
	}
	return errors.New(msg)
}
