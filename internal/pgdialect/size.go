package pgdialect

import (
	"context"
	"database/sql"

	"github.com/opledger/opledger/internal/dialectkit"
)

var _ dialectkit.Sizer = Dialect{}

// TableSize returns pg_table_size (heap, TOAST, free space and visibility
// maps) and pg_indexes_size of table.
func (d Dialect) TableSize(ctx context.Context, db *sql.DB, table string) (dialectkit.TableSize, error) {
	var s dialectkit.TableSize
	err := db.QueryRowContext(ctx, "SELECT pg_table_size($1::regclass), pg_indexes_size($1::regclass)", d.QuoteIdent(table)).Scan(&s.Table, &s.Indexes)
	return s, err
}
