// Package testdb opens the real databases the kit's tests run against.
//
// SQLite always runs, in a temporary file. PostgreSQL runs when
// OPLEDGER_TEST_POSTGRES_DSN is set, once through lib/pq and once through
// pgx's stdlib driver. MySQL/MariaDB runs when OPLEDGER_TEST_MYSQL_DSN is
// set, in the driver's format (root@tcp(127.0.0.1:3306)/test) or as a URL
// (mysql://root@127.0.0.1:3306/test); a TiDB server there is detected and
// tested with the TiDB dialect. Without its variable a target skips
// with a message naming it, unless OPLEDGER_TEST_REQUIRE_DBS=1, when the skip
// becomes a failure (CI sets it). Every target gets its own freshly
// migrated table, dropped again when the test ends, and a check that no
// connection is left in use.
package testdb

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	gomysql "github.com/go-sql-driver/mysql" // driver "mysql"
	_ "github.com/jackc/pgx/v5/stdlib"       // driver "pgx"
	_ "github.com/lib/pq"                    // driver "postgres"
	_ "github.com/mattn/go-sqlite3"          // driver "sqlite3"

	"github.com/opledger/opledger/dialects"
	"github.com/opledger/opledger/dialects/postgres"
	"github.com/opledger/opledger/dialects/sqlite"
	"github.com/opledger/opledger/internal/migrationfs"
	"github.com/opledger/opledger/internal/mysqldialect"
	"github.com/opledger/opledger/migrations"
)

// Environment variables the tests read.
const (
	EnvPostgres = "OPLEDGER_TEST_POSTGRES_DSN"
	EnvMySQL    = "OPLEDGER_TEST_MYSQL_DSN"
	EnvRequire  = "OPLEDGER_TEST_REQUIRE_DBS"
)

// Target is one database the tests run against.
type Target struct {
	// Name is "sqlite", "sqlite/modernc", "postgres/pq", "postgres/pgx" or
	// "mysql".
	Name    string
	Dialect dialects.Dialect
	// Open returns a new pool with at most maxConns connections, closed
	// when the test ends.
	Open func(t testing.TB, maxConns int) *sql.DB

	// open is Open with a statement counter (nil for none).
	open func(t testing.TB, maxConns int, c *Counter) *sql.DB
}

// Family returns the target's database family, the part of its name
// before "/": "sqlite", "postgres" or "mysql".
func (tg Target) Family() string {
	f, _, _ := strings.Cut(tg.Name, "/")
	return f
}

// Server returns the target's database server kind: its family, or
// "tidb" for the MySQL target on a TiDB server, for what a test pins per
// server (statement counts, for one).
func (tg Target) Server() string {
	if TiDB(tg.Dialect) {
		return "tidb"
	}
	return tg.Family()
}

// Targets returns every target: SQLite always, PostgreSQL (both drivers)
// and MySQL when their DSNs are set. The MySQL target's dialect is the
// server's, as mysql.Detect finds it: mysql.NewTiDB() on TiDB, mysql.New()
// on MySQL and MariaDB (see MySQLDialect). A missing DSN skips (or, with EnvRequire, fails)
// only the subtests that use it: call Require in the subtest.
//
// A test binary that links modernc.org/sqlite (driver "sqlite", pure Go)
// also gets the target "sqlite/modernc", right after "sqlite" (which is
// mattn/go-sqlite3): the same dialect and DSN through the second driver.
func Targets() []Target {
	out := []Target{target("sqlite", sqlite.New(), openSQLite("sqlite3"))}
	if slices.Contains(sql.Drivers(), "sqlite") {
		out = append(out, target(ModerncName, sqlite.New(), openSQLite("sqlite")))
	}
	return append(out,
		target("postgres/pq", postgres.New(), openPostgres("postgres")),
		target("postgres/pgx", postgres.New(), openPostgres("pgx")),
		target("mysql", mysqlTargetDialect(), openMySQL(nil)),
	)
}

// mysqlTargetDialect is the MySQL target's dialect: the detected server's
// (see MySQLDialect), or mysql.New() when it cannot be asked, in which
// case the target's Open fails with the reason.
func mysqlTargetDialect() mysqldialect.Dialect {
	d, _ := mysqlServer()
	return d
}

func target(name string, d dialects.Dialect, open func(testing.TB, int, *Counter) *sql.DB) Target {
	return Target{Name: name, Dialect: d, open: open,
		Open: func(t testing.TB, maxConns int) *sql.DB { t.Helper(); return open(t, maxConns, nil) }}
}

// Skip skips the test for a database that is not configured, naming the
// variable, or fails it when EnvRequire is set.
func Skip(t testing.TB, env string) {
	t.Helper()
	if os.Getenv(EnvRequire) == "1" {
		t.Fatalf("%s is not set, and %s=1 requires every database", env, EnvRequire)
	}
	t.Skipf("set %s to run this test against a real database", env)
}

// openSQLite opens a new SQLite file through driver ("sqlite3" for
// mattn/go-sqlite3, "sqlite" for modernc.org/sqlite: both read the
// dialect's DSN).
func openSQLite(driver string) func(testing.TB, int, *Counter) *sql.DB {
	return func(t testing.TB, maxConns int, c *Counter) *sql.DB {
		t.Helper()
		path := filepath.Join(t.TempDir(), "ledger.db")
		return openWith(t, driver, sqlite.DSN(path, 10*time.Second), maxConns, c)
	}
}

func openPostgres(driver string) func(testing.TB, int, *Counter) *sql.DB {
	return func(t testing.TB, maxConns int, c *Counter) *sql.DB {
		t.Helper()
		dsn := os.Getenv(EnvPostgres)
		if dsn == "" {
			Skip(t, EnvPostgres)
		}
		reserveForOpen(t, "postgres", maxConns)
		return openWith(t, driver, dsn, maxConns, c)
	}
}

// OpenMySQL returns an Open function for the MySQL target whose pool uses
// OPLEDGER_TEST_MYSQL_DSN (either form) with configure applied to the
// driver's configuration, if configure is not nil: for example to set
// ClientFoundRows. It skips like the other targets when the variable is
// not set.
func OpenMySQL(configure func(*gomysql.Config)) func(testing.TB, int) *sql.DB {
	open := openMySQL(configure)
	return func(t testing.TB, maxConns int) *sql.DB { t.Helper(); return open(t, maxConns, nil) }
}

func openMySQL(configure func(*gomysql.Config)) func(testing.TB, int, *Counter) *sql.DB {
	return func(t testing.TB, maxConns int, c *Counter) *sql.DB {
		t.Helper()
		raw := os.Getenv(EnvMySQL)
		if raw == "" {
			Skip(t, EnvMySQL)
		}
		cfg, err := mysqldialect.Config(raw)
		if err != nil {
			t.Fatalf("%s: %v", EnvMySQL, err)
		}
		// TiDB behind a mysql:// URL or the driver's format gets what a
		// tidb:// URL sets (pessimistic transactions), as opledger's
		// commands do after detecting it.
		MySQLDialect(t).Configure(cfg)
		if configure != nil {
			configure(cfg)
		}
		reserveForOpen(t, "mysql", maxConns)
		return openWith(t, "mysql", cfg.FormatDSN(), maxConns, c)
	}
}

func open(t testing.TB, driver, dsn string, maxConns int) *sql.DB {
	t.Helper()
	return openWith(t, driver, dsn, maxConns, nil)
}

// openWith is open with the statements counted in c when c is not nil.
func openWith(t testing.TB, driver, dsn string, maxConns int, c *Counter) *sql.DB {
	t.Helper()
	var (
		db  *sql.DB
		err error
	)
	if c != nil {
		db, err = countingDB(driver, dsn, c)
	} else {
		db, err = sql.Open(driver, dsn)
	}
	if err != nil {
		t.Fatalf("open %s: %v", driver, err)
	}
	db.SetMaxOpenConns(maxConns)
	db.SetMaxIdleConns(maxConns)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := db.PingContext(ctx); err != nil {
		db.Close()
		t.Fatalf("ping %s: %v", driver, err)
	}
	t.Cleanup(func() {
		if n := db.Stats().InUse; n != 0 {
			t.Errorf("%d connections still in use when the test ended (a transaction or rows leaked)", n)
		}
		db.Close()
	})
	return db
}

// NewTable migrates a fresh, uniquely named ledger table into db and
// drops it (with its version table) when the test ends. A migration that
// fails fails the test with nothing of the table left behind.
func NewTable(t testing.TB, db *sql.DB, d dialects.Dialect) string {
	t.Helper()
	var b [5]byte
	_, _ = rand.Read(b[:])
	table := "opl_test_" + hex.EncodeToString(b[:])
	newTable(t, db, d, table)
	return table
}

// newTable is NewTable with the table's name given. The drop is arranged
// before the migrations run: a set-up that fails undoes itself (package
// migrations), and should that fail too (a connection lost half-way), the
// drop at the end of the test removes what is left.
func newTable(t testing.TB, db *sql.DB, d dialects.Dialect, table string) {
	t.Helper()
	m, err := migrations.New(db, d, migrations.WithTable(table))
	if err != nil {
		t.Fatalf("migrations: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if _, err := m.Down(ctx); err != nil {
			t.Errorf("migrate down: %v", err)
		}
		if _, err := db.ExecContext(ctx, "DROP TABLE IF EXISTS "+d.QuoteIdent(migrationfs.VersionTable(table))); err != nil {
			t.Errorf("drop version table: %v", err)
		}
	})
	if _, err := m.Up(context.Background()); err != nil {
		t.Fatalf("migrate up: %v", err)
	}
}

// OpenDSN opens a pool of at most maxConns connections through driver to
// dsn, pings it and closes it when the test ends, like a target's Open.
// It reserves nothing: call Parallel (or Reserve) for the server first.
func OpenDSN(t testing.TB, driver, dsn string, maxConns int) *sql.DB {
	t.Helper()
	return open(t, driver, dsn, maxConns)
}
