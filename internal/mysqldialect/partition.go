package mysqldialect

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strconv"
	"strings"

	gomysql "github.com/go-sql-driver/mysql"

	"github.com/opledger/opledger/dialects"
	"github.com/opledger/opledger/internal/dialectkit"
)

var (
	_ dialectkit.BirthReader = Dialect{}
	_ dialectkit.Partitioner = Dialect{}
)

// BirthQueries returns Select, Complete and Lookup with born_at in their
// WHERE (see [dialectkit.BirthReader]): on a table partitioned by born_at,
// whose primary key is (id, born_at), each reads one partition, and the
// read-back's shared lock is a record lock on the whole key, never a gap
// lock in every partition.
func (d Dialect) BirthQueries(table string) dialectkit.BirthQueries {
	t := d.QuoteIdent(table)
	return dialectkit.BirthQueries{
		Select: `SELECT ` + columns + ` FROM ` + t + ` WHERE id = ? AND born_at = ? ` + d.readBackLock(),
		Complete: `UPDATE ` + t + ` SET code = ?, response = ?, response_type = ?, completed_at = ? ` +
			`WHERE id = ? AND born_at = ? AND completed_at IS NULL`,
		Lookup: `SELECT ` + columns + ` FROM ` + t + ` WHERE id = ? AND born_at = ?`,
	}
}

// partitionsSQL lists the RANGE partitions by born_at of a table (?) in
// the current database, in order: name, upper bound, row estimate.
const partitionsSQL = `SELECT PARTITION_NAME, PARTITION_DESCRIPTION, TABLE_ROWS FROM information_schema.PARTITIONS ` +
	`WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME = ? AND PARTITION_NAME IS NOT NULL ` +
	`AND PARTITION_METHOD = 'RANGE' AND REPLACE(PARTITION_EXPRESSION, '` + "`" + `', '') = 'born_at' ` +
	`ORDER BY PARTITION_ORDINAL_POSITION`

const (
	minBound int64 = -1 << 63
	maxBound int64 = 1<<63 - 1
)

// Partitions lists table's partitions by born_at. MySQL's ranges have an
// upper bound only: a partition's From is the previous one's To; the
// partition below 1 holds the keys without a known birth, the MAXVALUE
// one is the catch-all.
func (d Dialect) Partitions(ctx context.Context, db dialectkit.DB, table string) ([]dialectkit.Partition, bool, error) {
	rows, err := db.QueryContext(ctx, partitionsSQL, table)
	if err != nil {
		return nil, false, err
	}
	defer rows.Close()
	var (
		parts []dialectkit.Partition
		from  = minBound
	)
	for rows.Next() {
		var (
			p    dialectkit.Partition
			desc string
			n    sql.NullInt64
		)
		if err := rows.Scan(&p.Name, &desc, &n); err != nil {
			return nil, false, err
		}
		p.Rows = -1
		if n.Valid {
			p.Rows = n.Int64
		}
		p.From = from
		switch {
		case strings.EqualFold(desc, "MAXVALUE"):
			p.Kind, p.To = dialectkit.CatchAll, maxBound
		default:
			to, err := strconv.ParseInt(desc, 10, 64)
			if err != nil {
				return nil, false, fmt.Errorf("mysql: partition %s: bound %q: %w", p.Name, desc, err)
			}
			p.To, p.Kind = to, dialectkit.Bucket
			if to <= 1 {
				p.Kind = dialectkit.Unborn
			}
		}
		from = p.To
		parts = append(parts, p)
	}
	if err := rows.Err(); err != nil {
		return nil, false, err
	}
	if len(parts) == 0 {
		return nil, false, nil
	}
	return parts, true, nil
}

// MySQL error numbers of partition maintenance.
const (
	erSameNamePartition     = 1517 // ER_SAME_NAME_PARTITION
	erRangeNotIncreasing    = 1493 // ER_RANGE_NOT_INCREASING_ERROR
	erDropPartitionNotExist = 1507 // ER_DROP_PARTITION_NON_EXISTENT
)

// CreatePartition adds the bucket below to after the last one, by
// reorganising the MAXVALUE partition into the bucket and itself (rows of
// the catch-all below to move into the bucket). A bucket another sweep
// added meanwhile is no error (created false). A statement that TiDB
// refused because another DDL changed the schema meanwhile runs again
// (see ddl).
func (d Dialect) CreatePartition(ctx context.Context, db dialectkit.DB, table, suffix string, from, to int64) (bool, error) {
	parts, ok, err := d.Partitions(ctx, db, table)
	if err != nil || !ok {
		return false, err
	}
	last := parts[len(parts)-1]
	if last.Kind != dialectkit.CatchAll {
		return created(ddl(ctx, db, `ALTER TABLE `+d.QuoteIdent(table)+` ADD PARTITION (PARTITION `+d.QuoteIdent(suffix)+
			` VALUES LESS THAN (`+strconv.FormatInt(to, 10)+`))`))
	}
	return created(ddl(ctx, db, `ALTER TABLE `+d.QuoteIdent(table)+` REORGANIZE PARTITION `+d.QuoteIdent(last.Name)+
		` INTO (PARTITION `+d.QuoteIdent(suffix)+` VALUES LESS THAN (`+strconv.FormatInt(to, 10)+`), PARTITION `+
		d.QuoteIdent(last.Name)+` VALUES LESS THAN MAXVALUE)`))
}

// ddlAttempts bounds how often ddl runs a statement of partition
// maintenance that TiDB refused because the schema changed while it ran.
const ddlAttempts = 5

// ddl runs stmt, a statement of partition maintenance, on db. TiDB refuses
// a statement during which another DDL, on any table of the cluster,
// changed the schema (8028 "Information schema is changed", 8027), and
// says to try again: ddl runs it again, up to ddlAttempts times in all.
// Each such statement is safe to repeat: a bucket another run of it
// added or dropped is answered as added or gone (1517, 1507), which the
// callers take as done. MySQL and MariaDB never send those codes.
func ddl(ctx context.Context, db dialectkit.DB, stmt string) error {
	var err error
	for range ddlAttempts {
		if _, err = db.ExecContext(ctx, stmt); !schemaChanged(err) || ctx.Err() != nil {
			return err
		}
	}
	return err
}

// schemaChanged reports whether err is TiDB's refusal of a statement
// during which the schema changed (8028, 8027).
func schemaChanged(err error) bool {
	var me *gomysql.MySQLError
	return errors.As(err, &me) && (me.Number == tidbInfoSchemaChanged || me.Number == tidbInfoSchemaExpired)
}

// created is CreatePartition's answer for err.
func created(err error) (bool, error) {
	var me *gomysql.MySQLError
	if errors.As(err, &me) && (me.Number == erSameNamePartition || me.Number == erRangeNotIncreasing) {
		return false, nil
	}
	return err == nil, err
}

// DropPartition removes bucket p and its rows. On MariaDB it moves the
// partition out into a table of its own first (ALTER TABLE … CONVERT
// PARTITION … TO TABLE <table>_<p>_dropping, a change of metadata), then
// drops that table: claims wait on the ledger table's metadata lock only
// for the change of metadata, not while InnoDB removes the partition's
// file (which DROP PARTITION does under that lock, about 0.3 s per
// million entries). A table of that name that a sweep which died between
// the two statements left behind is dropped first. Where CONVERT
// PARTITION is refused (MySQL, MariaDB before 10.7) or the name would be
// too long, it drops the partition (ALTER TABLE … DROP PARTITION), as it
// does on TiDB, whose DROP PARTITION changes metadata only and removes
// the rows in the background. Either waits for the transactions that
// hold the table. A DROP PARTITION that TiDB refused because another DDL
// changed the schema meanwhile runs again (see ddl).
func (d Dialect) DropPartition(ctx context.Context, db dialectkit.DB, table string, p dialectkit.Partition) error {
	if gone := droppingName(table, p.Name); !d.tidb && len(gone) <= maxIdent {
		if done, err := d.moveOutAndDrop(ctx, db, table, p.Name, gone); done || err != nil {
			return err
		}
	}
	err := ddl(ctx, db, `ALTER TABLE `+d.QuoteIdent(table)+` DROP PARTITION `+d.QuoteIdent(p.Name))
	var me *gomysql.MySQLError
	if errors.As(err, &me) && me.Number == erDropPartitionNotExist {
		return nil
	}
	return err
}

// moveOutAndDrop moves partition out of table into a table named gone
// (CONVERT PARTITION) and drops that; done is false, with a nil error,
// when the server does not know CONVERT PARTITION (the caller then drops
// the partition).
func (d Dialect) moveOutAndDrop(ctx context.Context, db dialectkit.DB, table, partition, gone string) (done bool, err error) {
	if err := d.dropLeftovers(ctx, db, table); err != nil {
		return false, err
	}
	for range convertAttempts {
		_, err := db.ExecContext(ctx, `ALTER TABLE `+d.QuoteIdent(table)+` CONVERT PARTITION `+d.QuoteIdent(partition)+` TO TABLE `+d.QuoteIdent(gone))
		var me *gomysql.MySQLError
		switch {
		case err == nil:
			_, err = db.ExecContext(ctx, `DROP TABLE IF EXISTS `+d.QuoteIdent(gone))
			return true, err
		case !errors.As(err, &me):
			return false, err
		case me.Number == erDropPartitionNotExist:
			return true, nil // another sweep moved or dropped it
		case me.Number == erParse || me.Number == erNotSupportedYet:
			return false, nil
		case me.Number != erTableExists:
			return false, err
		}
		// Another sweep moved the bucket out and is dropping it, or left
		// it behind: drop that table, then try again (the bucket is then
		// gone, or this sweep moves it out).
		if _, err := db.ExecContext(ctx, `DROP TABLE IF EXISTS `+d.QuoteIdent(gone)); err != nil {
			return false, err
		}
	}
	return false, nil
}

// MySQL error numbers of moving a bucket out (erNotSupportedYet, 1235,
// is in explain.go).
const (
	erParse       = 1064 // ER_PARSE_ERROR: MySQL and MariaDB before 10.7 know no CONVERT PARTITION
	erTableExists = 1050 // ER_TABLE_EXISTS_ERROR: the table to move it into is there
)

// convertAttempts bounds how often DropPartition moves a bucket out after
// it found the table to move it into taken (by another sweep's drop).
const convertAttempts = 3

// maxIdent is the longest table name MySQL and MariaDB take.
const maxIdent = 64

// droppingSuffix ends the name of the table a bucket is moved into before
// it is dropped (see [Dialect.DropPartition]).
const droppingSuffix = "_dropping"

// droppingName is the table bucket partition is moved into before it is
// dropped.
func droppingName(table, partition string) string {
	return table + "_" + partition + droppingSuffix
}

// leftoversSQL lists the tables of the current database whose names are
// like ? followed by anything and droppingSuffix: a superset of the names
// of leftovers (a "_" in the table's name matches any character), which
// the caller narrows with isDroppingName.
const leftoversSQL = `SELECT TABLE_NAME FROM information_schema.TABLES WHERE TABLE_SCHEMA = DATABASE() ` +
	`AND TABLE_NAME LIKE CONCAT(?, '%', '` + droppingSuffix + `')`

// dropLeftovers drops the tables that sweeps which died between moving a
// bucket out of table and dropping it left behind: each holds the entries
// of a bucket past its drop time, nothing else. Only names that are table,
// a bucket's name and droppingSuffix are dropped.
func (d Dialect) dropLeftovers(ctx context.Context, db dialectkit.DB, table string) error {
	rows, err := db.QueryContext(ctx, leftoversSQL, table+"_")
	if err != nil {
		return err
	}
	var names []string
	for rows.Next() {
		var name string
		if err := rows.Scan(&name); err != nil {
			rows.Close()
			return err
		}
		if isDroppingName(table, name) {
			names = append(names, name)
		}
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return err
	}
	for _, name := range names {
		if _, err := db.ExecContext(ctx, `DROP TABLE IF EXISTS `+d.QuoteIdent(name)); err != nil {
			return err
		}
	}
	return nil
}

// isDroppingName reports whether name is droppingName(table, b) for a
// bucket's name b: "p" and digits, with a "t" and digits after them for
// buckets narrower than a day. Case is ignored (a server with
// lower_case_table_names lists names in lower case).
func isDroppingName(table, name string) bool {
	b, ok := strings.CutPrefix(strings.ToLower(name), strings.ToLower(table)+"_p")
	if !ok {
		return false
	}
	if b, ok = strings.CutSuffix(b, droppingSuffix); !ok || b == "" {
		return false
	}
	date, tod, timed := strings.Cut(b, "t")
	return digits(date) && (!timed || digits(tod))
}

// digits reports whether s is one or more ASCII digits.
func digits(s string) bool {
	if s == "" {
		return false
	}
	for _, c := range s {
		if c < '0' || c > '9' {
			return false
		}
	}
	return true
}

// inPartition is the condition that reads partition p alone: its range of
// born_at (the optimiser prunes to it).
func inPartition(p dialectkit.Partition) string {
	switch {
	case p.To == maxBound:
		return `born_at >= ` + strconv.FormatInt(p.From, 10)
	case p.From == minBound:
		return `born_at < ` + strconv.FormatInt(p.To, 10)
	}
	return `born_at >= ` + strconv.FormatInt(p.From, 10) + ` AND born_at < ` + strconv.FormatInt(p.To, 10)
}

// SweepQueries returns [Dialect.Queries]' DELETE sweep restricted to
// partition p by its range of born_at (which TiDB prunes as MySQL does;
// no PARTITION clause).
func (d Dialect) SweepQueries(table string, p dialectkit.Partition) dialects.Queries {
	t, in := d.QuoteIdent(table), `(`+inPartition(p)+`) AND `
	// SweepOne names the whole primary key where it can, so that it locks
	// its own entry alone (a range of born_at would lock the gap before
	// the next entry too, which may be a held one).
	one := in
	if p.Kind == dialectkit.Unborn {
		one = `born_at = 0 AND `
	}
	return dialects.Queries{
		Sweep:        `DELETE FROM ` + t + ` WHERE ` + in + `expires_at <= ? ORDER BY expires_at LIMIT ?`,
		CountExpired: `SELECT COUNT(*) FROM ` + t + ` WHERE ` + in + `expires_at <= ?`,
		SweepScan:    `SELECT id FROM ` + t + ` WHERE ` + in + `expires_at <= ? ORDER BY expires_at LIMIT ?`,
		SweepOne:     `DELETE FROM ` + t + ` WHERE ` + one + `id = ? AND expires_at <= ?`,
	}
}
