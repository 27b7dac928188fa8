package pgdialect

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"regexp"
	"strconv"
	"strings"

	"github.com/opledger/opledger/dialects"
	"github.com/opledger/opledger/internal/dialectkit"
)

var _ dialectkit.Partitioner = Dialect{}

// ddlLockWait bounds how long a partition's creation or drop waits for
// the ledger's open transactions (a claim holds the table until it
// commits): past it the statement gives up and the next sweep tries
// again, instead of queueing every new claim behind it.
const ddlLockWait = "2s"

// partitionsSQL lists the partitions of a table ($1, its quoted name)
// partitioned by RANGE (born_at): name, bound expression, the catalog's
// row estimate. No row when the table is not partitioned that way. The
// bound is printed without its relation (pg_get_expr's 0: a bound holds
// constants only), so the list opens no partition: with the partition's
// oid, pg_get_expr opened it, and a list beside another sweep's DETACH …
// CONCURRENTLY, which waits for the list's snapshot while it holds the
// partition, deadlocked.
const partitionsSQL = `SELECT c.relname, pg_get_expr(c.relpartbound, 0), c.reltuples::bigint
FROM pg_partitioned_table pt
JOIN pg_attribute a ON a.attrelid = pt.partrelid AND a.attnum = pt.partattrs[0]
JOIN pg_inherits i ON i.inhparent = pt.partrelid
JOIN pg_class c ON c.oid = i.inhrelid
WHERE pt.partrelid = to_regclass($1) AND pt.partstrat = 'r' AND pt.partnatts = 1 AND a.attname = 'born_at'`

// boundRE reads a range partition's bound as pg_get_expr prints it.
var boundRE = regexp.MustCompile(`^FOR VALUES FROM \(([^)]*)\) TO \(([^)]*)\)$`)

// Partitions lists table's partitions by born_at, ordered by range (the
// DEFAULT partition last).
func (d Dialect) Partitions(ctx context.Context, db dialectkit.DB, table string) ([]dialectkit.Partition, bool, error) {
	rows, err := db.QueryContext(ctx, partitionsSQL, d.QuoteIdent(table))
	if err != nil {
		return nil, false, err
	}
	defer rows.Close()
	var parts []dialectkit.Partition
	for rows.Next() {
		var (
			p     dialectkit.Partition
			bound sql.NullString
		)
		if err := rows.Scan(&p.Name, &bound, &p.Rows); err != nil {
			return nil, false, err
		}
		if !bound.Valid {
			continue // being detached or dropped by another sweep
		}
		if p.Rows < 0 {
			p.Rows = -1
		}
		if err := parseBound(&p, bound.String); err != nil {
			return nil, false, fmt.Errorf("postgres: partition %s: %w", p.Name, err)
		}
		parts = append(parts, p)
	}
	if err := rows.Err(); err != nil {
		return nil, false, err
	}
	if len(parts) == 0 {
		return nil, false, nil
	}
	dialectkit.SortPartitions(parts)
	return parts, true, nil
}

// parseBound sets p's kind and range from its bound expression.
func parseBound(p *dialectkit.Partition, bound string) error {
	if bound == "DEFAULT" {
		p.Kind = dialectkit.CatchAll
		return nil
	}
	m := boundRE.FindStringSubmatch(bound)
	if m == nil {
		return fmt.Errorf("unexpected bound %q", bound)
	}
	from, err := boundValue(m[1])
	if err != nil {
		return err
	}
	to, err := boundValue(m[2])
	if err != nil {
		return err
	}
	p.From, p.To, p.Kind = from, to, dialectkit.Bucket
	if to <= 1 {
		p.Kind = dialectkit.Unborn
	}
	return nil
}

// boundValue reads one bound: MINVALUE, MAXVALUE or an integer, quoted or
// not.
func boundValue(v string) (int64, error) {
	switch v {
	case "MINVALUE":
		return minBound, nil
	case "MAXVALUE":
		return maxBound, nil
	}
	if len(v) >= 2 && v[0] == '\'' && v[len(v)-1] == '\'' {
		v = v[1 : len(v)-1]
	}
	return strconv.ParseInt(v, 10, 64)
}

const (
	minBound int64 = -1 << 63
	maxBound int64 = 1<<63 - 1
)

// CreatePartition creates the bucket [from, to) of table, a table named
// "<table>_<suffix>" made like it and attached as its partition, in a
// transaction whose lock waits end after two seconds. ATTACH PARTITION
// takes only a SHARE UPDATE EXCLUSIVE lock on table, which claims do not
// conflict with (CREATE TABLE … PARTITION OF would take ACCESS EXCLUSIVE
// and wait for, then block, every claim). Rows of a DEFAULT partition in
// its range (SQLSTATE 23514; a table of an earlier layout), a bucket
// another sweep created meanwhile (42P07, or 23505 or 42710 when the two
// CREATE TABLEs crossed in the catalog: its row type's name is taken) or
// one that overlaps another (42P17) leave it uncreated, without an error.
func (d Dialect) CreatePartition(ctx context.Context, db dialectkit.DB, table, suffix string, from, to int64) (bool, error) {
	t, p := d.QuoteIdent(table), d.QuoteIdent(table+"_"+suffix)
	var err error
	for range ddlAttempts {
		err = d.ddl(ctx, db,
			`CREATE TABLE `+p+` (LIKE `+t+` INCLUDING DEFAULTS INCLUDING CONSTRAINTS)`,
			`ALTER TABLE `+t+` ATTACH PARTITION `+p+` FOR VALUES FROM (`+strconv.FormatInt(from, 10)+`) TO (`+strconv.FormatInt(to, 10)+`)`)
		if !deadlocked(err) {
			break
		}
	}
	var s sqlStater
	if errors.As(err, &s) {
		switch s.SQLState() {
		case "23514", "42P07", "23505", "42710", "42P17":
			return false, nil
		}
	}
	return err == nil, err
}

// detachSQL lists the partitions of a table ($1, its quoted name) whose
// detach is pending (a DETACH … CONCURRENTLY interrupted between its two
// transactions), and tells whether the table has a DEFAULT partition and
// whether the server can detach concurrently (PostgreSQL 14 and later).
// inhdetachpending is read through to_jsonb so that the query also runs
// on servers older than the column.
const detachSQL = `SELECT coalesce((SELECT string_agg(c.relname, ',')
  FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
  WHERE i.inhparent = to_regclass($1) AND coalesce((to_jsonb(i) ->> 'inhdetachpending')::boolean, false)), ''),
  coalesce((SELECT partdefid <> 0 FROM pg_partitioned_table WHERE partrelid = to_regclass($1)), false),
  current_setting('server_version_num')::int >= 140000`

// DropPartition drops bucket p of table. On PostgreSQL 14 and later, for
// a table without a DEFAULT partition (the layout of the migrations), it
// detaches p with DETACH PARTITION … CONCURRENTLY, which takes only SHARE
// UPDATE EXCLUSIVE locks on table and waits for the transactions that
// still use it without blocking new claims, and then drops the detached
// table, which no claim reaches any more. A table has at most one detach
// pending: one left by an interrupted sweep, or by a sweep running now,
// is finished first (FINALIZE) and its table dropped. Otherwise (a
// DEFAULT partition, an older server) it drops p in a transaction whose
// lock waits end after two seconds, which takes table's ACCESS EXCLUSIVE
// lock for the drop alone. A partition another sweep detached or dropped
// meanwhile is no error.
func (d Dialect) DropPartition(ctx context.Context, db dialectkit.DB, table string, p dialectkit.Partition) error {
	t := d.QuoteIdent(table)
	for range ddlAttempts {
		var (
			pending                string
			hasDefault, concurrent bool
		)
		if err := queryRow(ctx, db, detachSQL, []any{t}, &pending, &hasDefault, &concurrent); err != nil {
			return err
		}
		if hasDefault || !concurrent {
			return gone(d.ddl(ctx, db, `DROP TABLE `+d.QuoteIdent(p.Name)))
		}
		done, err := d.finalize(ctx, db, t, pending, p.Name)
		if deadlocked(err) {
			continue
		}
		if err != nil || done {
			return err
		}
		_, err = db.ExecContext(ctx, `ALTER TABLE `+t+` DETACH PARTITION `+d.QuoteIdent(p.Name)+` CONCURRENTLY`)
		var s sqlStater
		if errors.As(err, &s) && s.SQLState() == "55000" || deadlocked(err) {
			continue // another sweep's detach is pending, or crossed this one: finish it first
		}
		if err != nil && gone(err) != nil {
			return err
		}
		// The table of p, detached now (by this sweep, or by another
		// one, which had not dropped it yet: p is "not a partition" or
		// gone), is dropped. Another sweep that found this detach pending
		// may be finishing it (FINALIZE) and dropping the table too: the
		// two can deadlock, and the one rolled back goes round again.
		if err := d.dropDetached(ctx, db, p.Name); !deadlocked(err) {
			return err
		}
	}
	return fmt.Errorf("postgres: partition %s: %w", p.Name, dialectkit.ErrPartitionBusy)
}

// ddlAttempts bounds how often a partition's creation or drop is tried
// again after it crossed another sweep's (a deadlock, or another detach
// pending).
const ddlAttempts = 5

// deadlocked reports whether err is PostgreSQL's "deadlock detected"
// (40P01). Two sweeps that change the partitions of one table at once
// can deadlock (a concurrent detach waits, holding its session's lock on
// the table, for the transactions that use it, and one of them waits for
// that lock); the one PostgreSQL rolled back tries again.
func deadlocked(err error) bool {
	var s sqlStater
	return errors.As(err, &s) && s.SQLState() == "40P01"
}

// finalize finishes the detach of each partition named in pending (a
// comma-separated list) and drops its table; done reports whether name
// was one of them.
func (d Dialect) finalize(ctx context.Context, db dialectkit.DB, quotedTable, pending, name string) (done bool, err error) {
	for _, q := range strings.Split(pending, ",") {
		if q == "" {
			continue
		}
		if _, err := db.ExecContext(ctx, `ALTER TABLE `+quotedTable+` DETACH PARTITION `+d.QuoteIdent(q)+` FINALIZE`); gone(err) != nil {
			return false, err
		}
		if err := d.dropDetached(ctx, db, q); err != nil {
			return false, err
		}
		done = done || q == name
	}
	return done, nil
}

// dropDetached drops the table of a detached partition, if it is still
// there.
func (d Dialect) dropDetached(ctx context.Context, db dialectkit.DB, name string) error {
	_, err := db.ExecContext(ctx, `DROP TABLE IF EXISTS `+d.QuoteIdent(name))
	return err
}

// gone returns nil for an error that says the partition is not there any
// more (42P01, undefined table; 42P16, not a partition of the table:
// another sweep detached or dropped it meanwhile), and err otherwise.
func gone(err error) error {
	var s sqlStater
	if errors.As(err, &s) && (s.SQLState() == "42P01" || s.SQLState() == "42P16") {
		return nil
	}
	return err
}

// queryRow scans query's one row into dest.
func queryRow(ctx context.Context, db dialectkit.DB, query string, args []any, dest ...any) error {
	rows, err := db.QueryContext(ctx, query, args...)
	if err != nil {
		return err
	}
	defer rows.Close()
	if !rows.Next() {
		if err := rows.Err(); err != nil {
			return err
		}
		return sql.ErrNoRows
	}
	if err := rows.Scan(dest...); err != nil {
		return err
	}
	return rows.Close()
}

// ddl runs stmts in a transaction of its own with lock_timeout set. db is
// a *sql.DB or a *sql.Conn.
func (d Dialect) ddl(ctx context.Context, db dialectkit.DB, stmts ...string) error {
	b, ok := db.(interface {
		BeginTx(ctx context.Context, opts *sql.TxOptions) (*sql.Tx, error)
	})
	if !ok {
		return errors.New("postgres: partitions are changed through a *sql.DB or a *sql.Conn")
	}
	tx, err := b.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer tx.Rollback()
	if _, err := tx.ExecContext(ctx, "SET LOCAL lock_timeout = '"+ddlLockWait+"'"); err != nil {
		return err
	}
	for _, stmt := range stmts {
		if _, err := tx.ExecContext(ctx, stmt); err != nil {
			return err
		}
	}
	return tx.Commit()
}

// SweepQueries returns the DELETE sweep of partition p, which it names
// directly: [Dialect.Queries]' Sweep (SKIP LOCKED) and CountExpired.
func (d Dialect) SweepQueries(table string, p dialectkit.Partition) dialects.Queries {
	q := d.Queries(p.Name)
	return dialects.Queries{Sweep: q.Sweep, CountExpired: q.CountExpired}
}
