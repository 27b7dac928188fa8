package sqlitedialect

import (
	"context"
	"database/sql"

	"github.com/opledger/opledger/internal/dialectkit"
)

var _ dialectkit.Sizer = Dialect{}

// TableSize sums the pages of table and of its indexes from the dbstat
// virtual table; it fails when the SQLite build has no dbstat
// (SQLITE_ENABLE_DBSTAT_VTAB).
func (Dialect) TableSize(ctx context.Context, db *sql.DB, table string) (dialectkit.TableSize, error) {
	var s dialectkit.TableSize
	err := db.QueryRowContext(ctx, "SELECT "+
		"COALESCE((SELECT SUM(pgsize) FROM dbstat WHERE name = ?), 0), "+
		"COALESCE((SELECT SUM(pgsize) FROM dbstat WHERE name IN "+
		"(SELECT name FROM sqlite_master WHERE type = 'index' AND tbl_name = ?)), 0)", table, table).Scan(&s.Table, &s.Indexes)
	return s, err
}
