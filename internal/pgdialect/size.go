package pgdialect

import (
	"context"
	"database/sql"

	"github.com/opledger/opledger/internal/dialectkit"
)

var _ dialectkit.Sizer = Dialect{}

// TableSize returns pg_table_size (heap, TOAST, free space and visibility
// maps) and pg_indexes_size of table, summed over the leaves of its
// partition tree when it is partitioned (a partitioned table's own sizes
// are 0: its rows are in its partitions). The leaves are looked up by
// pg_class's oid index, not by a join over pg_class.
func (d Dialect) TableSize(ctx context.Context, db *sql.DB, table string) (dialectkit.TableSize, error) {
	var s dialectkit.TableSize
	err := db.QueryRowContext(ctx, "SELECT COALESCE(SUM(pg_table_size(c.oid)), 0), COALESCE(SUM(pg_indexes_size(c.oid)), 0) "+
		"FROM pg_class c WHERE c.relkind = 'r' AND c.oid = ANY (ARRAY(SELECT relid FROM pg_partition_tree($1::regclass) "+
		"UNION ALL SELECT $1::regclass)::oid[])", d.QuoteIdent(table)).Scan(&s.Table, &s.Indexes)
	return s, err
}
