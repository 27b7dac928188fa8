package sqlite

import (
	"time"

	"github.com/opledger/opledger/dialects"
	"github.com/opledger/opledger/internal/sqlitedialect"
)

// New returns the SQLite dialect. It is a stateless value, safe for
// concurrent use.
func New() dialects.Dialect { return sqlitedialect.New() }

// DSN returns a data source name that every pooled connection applies,
// for mattn/go-sqlite3 (driver "sqlite3") and modernc.org/sqlite (driver
// "sqlite", pure Go; it reads the same parameters): WAL journal, the given
// busy timeout (5 s when zero or negative) and immediate transactions
// (_txlock=immediate), so a transaction takes the write lock at BEGIN and
// never fails with SQLITE_BUSY on upgrade after a read.
func DSN(path string, busyTimeout time.Duration) string {
	return sqlitedialect.DSN(path, busyTimeout)
}
