package mysqldialect

import (
	"context"
	"database/sql"
	"errors"

	"github.com/opledger/opledger/internal/dialectkit"
)

var _ dialectkit.Sizer = Dialect{}

// TableSize returns information_schema's DATA_LENGTH (the clustered
// index, which holds the rows) and INDEX_LENGTH of table in the current
// database: InnoDB's estimates, which ANALYZE TABLE refreshes.
func (Dialect) TableSize(ctx context.Context, db *sql.DB, table string) (dialectkit.TableSize, error) {
	s := dialectkit.TableSize{Estimated: true}
	err := db.QueryRowContext(ctx, "SELECT DATA_LENGTH, INDEX_LENGTH FROM information_schema.TABLES "+
		"WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME = ?", table).Scan(&s.Table, &s.Indexes)
	if errors.Is(err, sql.ErrNoRows) {
		return s, errors.New("mysql: table " + table + " not found in the current database")
	}
	return s, err
}
