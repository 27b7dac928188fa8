package testdb

import (
	"context"
	"database/sql"
	"io/fs"
	"strings"
	"testing"
	"testing/fstest"
	"time"

	"github.com/opledger/opledger/dialects"
)

// FailingMigration is the file name of the migration FailingSchema adds.
const FailingMigration = "00099_fails.sql"

// FailingSchema returns d with one more migration after its own, which
// fails on every database as TiDB failed the MySQL dialect's dead-state
// migration while it was one ALTER TABLE: an index on a column the outbox
// does not have (MySQL and TiDB: Error 1072). Every migration of d's runs
// first, so a set-up with it fails with d's tables created: what a set-up
// leaves behind when it fails. Only d's Dialect methods and its migrations
// are kept (not its optional interfaces): it is for set-up paths.
func FailingSchema(d dialects.Dialect) dialects.Dialect {
	sc, ok := d.(dialects.Schema)
	if !ok {
		panic("testdb.FailingSchema: " + d.Name() + " ships no migrations")
	}
	m := sc.Migrations()
	files := fstest.MapFS{}
	names, err := fs.Glob(m.FS, "*.sql")
	if err != nil || len(names) == 0 {
		panic("testdb.FailingSchema: " + d.Name() + ": no migrations")
	}
	for _, n := range names {
		b, err := fs.ReadFile(m.FS, n)
		if err != nil {
			panic(err)
		}
		files[n] = &fstest.MapFile{Data: b}
	}
	files[FailingMigration] = &fstest.MapFile{Data: []byte(`-- +goose Up
CREATE INDEX {{.Ident "fails_idx"}} ON {{.Ident "outbox"}} (no_such_column);

-- +goose Down
SELECT 1;
`)}
	m.FS = files
	return failingSchema{Dialect: d, m: m}
}

type failingSchema struct {
	dialects.Dialect
	m dialects.Migrations
}

func (f failingSchema) Migrations() dialects.Migrations { return f.m }

// TablesLike returns the names of db's tables (in the connection's
// database or schema) that begin with prefix, asking the catalog of d's
// database: sqlite_master, pg_tables or information_schema.TABLES. A test
// of a set-up that fails checks with it that nothing was left behind.
func TablesLike(t testing.TB, db *sql.DB, d dialects.Dialect, prefix string) []string {
	t.Helper()
	sc, ok := d.(dialects.Schema)
	if !ok {
		t.Fatalf("TablesLike: %s ships no migrations, so its database is not known", d.Name())
	}
	like := strings.NewReplacer(`\`, `\\`, `_`, `\_`, `%`, `\%`).Replace(prefix) + "%"
	var q string
	switch sc.Migrations().Goose {
	case "sqlite3":
		q = `SELECT name FROM sqlite_master WHERE type = 'table' AND name LIKE ? ESCAPE '\'`
	case "postgres":
		// Tables and partitioned tables, not their partitions (dropped
		// with them).
		q = `SELECT relname FROM pg_class WHERE relnamespace = current_schema()::regnamespace ` +
			`AND relkind IN ('r', 'p') AND NOT relispartition AND relname LIKE $1`
	case "mysql":
		q = `SELECT table_name FROM information_schema.TABLES WHERE table_schema = DATABASE() AND table_name LIKE ?`
	default:
		t.Fatalf("TablesLike: no catalog query for goose dialect %q", sc.Migrations().Goose)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	rows, err := db.QueryContext(ctx, q, like)
	if err != nil {
		t.Fatalf("TablesLike: %v", err)
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var n string
		if err := rows.Scan(&n); err != nil {
			t.Fatalf("TablesLike: %v", err)
		}
		out = append(out, n)
	}
	if err := rows.Err(); err != nil {
		t.Fatalf("TablesLike: %v", err)
	}
	return out
}
