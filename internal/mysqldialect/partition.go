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
// added meanwhile is no error (created false).
func (d Dialect) CreatePartition(ctx context.Context, db dialectkit.DB, table, suffix string, from, to int64) (bool, error) {
	parts, ok, err := d.Partitions(ctx, db, table)
	if err != nil || !ok {
		return false, err
	}
	last := parts[len(parts)-1]
	if last.Kind != dialectkit.CatchAll {
		_, err := db.ExecContext(ctx, `ALTER TABLE `+d.QuoteIdent(table)+` ADD PARTITION (PARTITION `+d.QuoteIdent(suffix)+
			` VALUES LESS THAN (`+strconv.FormatInt(to, 10)+`))`)
		return created(err)
	}
	_, err = db.ExecContext(ctx, `ALTER TABLE `+d.QuoteIdent(table)+` REORGANIZE PARTITION `+d.QuoteIdent(last.Name)+
		` INTO (PARTITION `+d.QuoteIdent(suffix)+` VALUES LESS THAN (`+strconv.FormatInt(to, 10)+`), PARTITION `+
		d.QuoteIdent(last.Name)+` VALUES LESS THAN MAXVALUE)`)
	return created(err)
}

// created is CreatePartition's answer for err.
func created(err error) (bool, error) {
	var me *gomysql.MySQLError
	if errors.As(err, &me) && (me.Number == erSameNamePartition || me.Number == erRangeNotIncreasing) {
		return false, nil
	}
	return err == nil, err
}

// DropPartition drops bucket p (ALTER TABLE … DROP PARTITION), which
// waits for the transactions that hold the table.
func (d Dialect) DropPartition(ctx context.Context, db dialectkit.DB, table string, p dialectkit.Partition) error {
	_, err := db.ExecContext(ctx, `ALTER TABLE `+d.QuoteIdent(table)+` DROP PARTITION `+d.QuoteIdent(p.Name))
	var me *gomysql.MySQLError
	if errors.As(err, &me) && me.Number == erDropPartitionNotExist {
		return nil
	}
	return err
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
