package pgdialect

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"regexp"
	"strconv"

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
// row estimate. No row when the table is not partitioned that way.
const partitionsSQL = `SELECT c.relname, pg_get_expr(c.relpartbound, c.oid), c.reltuples::bigint
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

// CreatePartition creates the bucket [from, to) as a partition of table
// named "<table>_<suffix>", in a transaction whose lock waits end after two seconds.
// Rows of the DEFAULT partition in its range (SQLSTATE 23514), a bucket
// another sweep created meanwhile (42P07) or one that overlaps another
// (42P17) leave it uncreated, without an error.
func (d Dialect) CreatePartition(ctx context.Context, db dialectkit.DB, table, suffix string, from, to int64) (bool, error) {
	err := d.ddl(ctx, db, `CREATE TABLE `+d.QuoteIdent(table+"_"+suffix)+` PARTITION OF `+d.QuoteIdent(table)+
		` FOR VALUES FROM (`+strconv.FormatInt(from, 10)+`) TO (`+strconv.FormatInt(to, 10)+`)`)
	var s sqlStater
	if errors.As(err, &s) {
		switch s.SQLState() {
		case "23514", "42P07", "42P17":
			return false, nil
		}
	}
	return err == nil, err
}

// DropPartition drops p, which detaches it from table, in a transaction
// whose lock waits end after two seconds. (DETACH PARTITION CONCURRENTLY,
// which would not take the table's ACCESS EXCLUSIVE lock, is refused on a
// table with a DEFAULT partition; the lock is held for the drop alone,
// which unlinks the files at commit.)
func (d Dialect) DropPartition(ctx context.Context, db dialectkit.DB, table string, p dialectkit.Partition) error {
	err := d.ddl(ctx, db, `DROP TABLE `+d.QuoteIdent(p.Name))
	var s sqlStater
	if errors.As(err, &s) && s.SQLState() == "42P01" {
		return nil // dropped by another sweep meanwhile
	}
	return err
}

// ddl runs stmt in a transaction of its own with lock_timeout set. db is
// a *sql.DB or a *sql.Conn.
func (d Dialect) ddl(ctx context.Context, db dialectkit.DB, stmt string) error {
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
	if _, err := tx.ExecContext(ctx, stmt); err != nil {
		return err
	}
	return tx.Commit()
}

// SweepQueries returns the DELETE sweep of partition p, which it names
// directly: [Dialect.Queries]' Sweep (SKIP LOCKED) and CountExpired.
func (d Dialect) SweepQueries(table string, p dialectkit.Partition) dialects.Queries {
	q := d.Queries(p.Name)
	return dialects.Queries{Sweep: q.Sweep, CountExpired: q.CountExpired}
}
