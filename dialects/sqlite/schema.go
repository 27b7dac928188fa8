package sqlite

import (
	"embed"
	"io/fs"

	"github.com/opledger/opledger/dialects"
)

//go:embed migrations/*.sql
var migrationFiles embed.FS

var (
	_ dialects.Schema    = Dialect{}
	_ dialects.Described = Dialect{}
)

// Migrations returns the ledger's SQLite migrations. They take no lock of
// their own: SQLite's write lock serialises migrations of one file.
func (Dialect) Migrations() dialects.Migrations {
	sub, err := fs.Sub(migrationFiles, "migrations")
	if err != nil {
		panic(err) // the embedded folder always exists
	}
	return dialects.Migrations{FS: sub, Goose: "sqlite3"}
}

// Traits: the default isolation level only (SQLite transactions are
// serializable), and serial writers, with the write lock taken at BEGIN
// when the pool is opened with [DSN].
func (Dialect) Traits() dialects.Traits { return dialects.Traits{SerialWriters: true} }
