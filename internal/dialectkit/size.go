package dialectkit

import (
	"context"
	"database/sql"
)

// Sizer is implemented by dialects whose database reports how many bytes
// a table and its indexes take on disk. opledger stats shows it.
//
// It is optional: check for it with a type assertion.
type Sizer interface {
	// TableSize returns the bytes of table (unquoted) and of its indexes
	// in db.
	TableSize(ctx context.Context, db *sql.DB, table string) (TableSize, error)
}

// TableSize is the space a table takes.
type TableSize struct {
	// Table is the bytes of the rows: the heap (with TOAST) on
	// PostgreSQL, the clustered index on InnoDB.
	Table int64
	// Indexes is the bytes of the other indexes (and, on PostgreSQL, of
	// the primary key's).
	Indexes int64
	// Estimated says the figures are the database's statistics (InnoDB's,
	// refreshed by ANALYZE TABLE), not an exact count of pages.
	Estimated bool
}
