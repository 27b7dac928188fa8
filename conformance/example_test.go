package conformance_test

import (
	"context"
	"database/sql"
	"fmt"
	"log"
	"os"
	"path/filepath"
	"testing"
	"time"

	_ "github.com/jackc/pgx/v5/stdlib"
	_ "github.com/mattn/go-sqlite3"

	"github.com/opledger/opledger/conformance"
	"github.com/opledger/opledger/dialects"
	"github.com/opledger/opledger/dialects/postgres"
	"github.com/opledger/opledger/dialects/sqlite"
	"github.com/opledger/opledger/ledger"
)

// Check runs cases of the suite against a database and reports instead of
// failing a test: here two cases against the kit's own ledger on SQLite,
// with the table created from the dialect's migrations. In a test, use
// conformance.Run(t, target) instead.
func ExampleCheck() {
	dir, err := os.MkdirTemp("", "conformance-example")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)
	db, err := sql.Open("sqlite3", sqlite.DSN(filepath.Join(dir, "ledger.db"), 10*time.Second))
	if err != nil {
		log.Fatal(err)
	}
	defer db.Close()
	db.SetMaxOpenConns(8)

	target := conformance.StoreTarget("sqlite", db, sqlite.New())
	rep := conformance.Check(context.Background(), target,
		conformance.WithCases("herd", "replay-fidelity"), conformance.WithKeys(5), conformance.WithConcurrency(4))
	for _, r := range rep.Results {
		fmt.Println(r.Name, r.Verdict)
	}
	fmt.Println("failed:", rep.Failed())
	// Output:
	// herd/default pass
	// replay-fidelity pass
	// failed: false
}

// Run makes each case a subtest of a test of your module. Here the test
// runs the kit's own ledger on PostgreSQL through pgx (the driver is
// imported for its side effect: _ "github.com/jackc/pgx/v5/stdlib"); in
// your module the function below is a top-level
// func TestLedgerConformance(t *testing.T).
func ExampleRun() {
	testLedgerConformance := func(t *testing.T) {
		dsn := os.Getenv("DATABASE_URL")
		if dsn == "" {
			t.Skip("set DATABASE_URL")
		}
		db, err := sql.Open("pgx", dsn)
		if err != nil {
			t.Fatal(err)
		}
		defer db.Close()
		db.SetMaxOpenConns(conformance.DefaultConcurrency + 4)
		conformance.Run(t, conformance.StoreTarget("postgres", db, postgres.New()),
			conformance.WithKeys(50)) // a quicker herd for CI
	}
	_ = testLedgerConformance
}

// A Target for a ledger of your own: NewLedger builds it for each case
// from what the case asks for, and Setup creates its table. Here the
// kit's Store stands in for your ledger and SQLite for your database,
// with the table created by hand; in a test, conformance.Run(t, tg) runs
// the same cases as subtests.
func ExampleTarget() {
	dir, err := os.MkdirTemp("", "conformance-example")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)
	db, err := sql.Open("sqlite3", sqlite.DSN(filepath.Join(dir, "ledger.db"), 10*time.Second))
	if err != nil {
		log.Fatal(err)
	}
	defer db.Close()
	db.SetMaxOpenConns(8)

	d := sqlite.New()
	tg := conformance.Target{
		Name:    "my-ledger",
		DB:      db,
		Dialect: d, // placeholders, quoting, error classification
		NewLedger: func(cfg conformance.LedgerConfig) (ledger.Ledger, error) {
			// Use cfg.Table, cfg.Retention, cfg.Clock and cfg.MaxResultSize.
			return ledger.New(d, ledger.WithTable(cfg.Table), ledger.WithRetention(cfg.Retention),
				ledger.WithClock(cfg.Clock), ledger.WithMaxResultSize(cfg.MaxResultSize))
		},
		// Optional: create the table yourself (default: the dialect's migrations).
		Setup: func(ctx context.Context, db *sql.DB, table string) (func(context.Context) error, error) {
			q := d.QuoteIdent(table)
			if _, err := db.ExecContext(ctx, "CREATE TABLE "+q+" (id BLOB NOT NULL PRIMARY KEY, "+
				"caller TEXT NOT NULL, method TEXT NOT NULL, request_fp BLOB NOT NULL, "+
				"code INTEGER, response BLOB, response_type TEXT, "+
				"created_at INTEGER NOT NULL, completed_at INTEGER, expires_at INTEGER NOT NULL, "+
				"born_at INTEGER NOT NULL DEFAULT 0) WITHOUT ROWID"); err != nil {
				return nil, err
			}
			return func(ctx context.Context) error {
				_, err := db.ExecContext(ctx, "DROP TABLE "+q)
				return err
			}, nil
		},
		// Optional: nil means conformance.DefaultCapabilities(Dialect).
		Capabilities: nil,
	}
	rep := conformance.Check(context.Background(), tg,
		conformance.WithCases("herd", "replay-fidelity"), conformance.WithKeys(5), conformance.WithConcurrency(4))
	for _, r := range rep.Results {
		fmt.Println(r.Name, r.Verdict)
	}
	// Output:
	// herd/default pass
	// replay-fidelity pass
}

// To change one capability, start from the default. sql.Open does not
// connect, so this runs without a server.
func ExampleDefaultCapabilities() {
	d := postgres.New()
	db, err := sql.Open("pgx", "postgres://suite@db.internal:5432/app")
	if err != nil {
		log.Fatal(err)
	}
	defer db.Close()
	tg := conformance.StoreTarget("postgres", db, d)

	caps := conformance.DefaultCapabilities(d)
	caps.KillConnections = false // the suite's user may not kill sessions
	tg.Capabilities = &caps

	fmt.Println(tg.Capabilities.Levels, tg.Capabilities.KillConnections)
	// Output: [Read Committed Repeatable Read Serializable] false
}

// A dialect of your own needs no change to the kit: migrations.New,
// ledger.New and StoreTarget accept it, and the suite derives its
// capabilities from the interfaces it implements.
func Example_dialectOfYourOwn() {
	var d dialects.Dialect = pgCompatible{postgres.New()} // outside_test.go
	_, hasMigrations := d.(dialects.Schema)
	_, boundsLockWaits := d.(dialects.LockWaiter)
	caps := conformance.DefaultCapabilities(d)
	fmt.Println(d.Name(), hasMigrations, boundsLockWaits)
	fmt.Println(caps.Levels, caps.KillConnections)
	// Output:
	// acme-pg true true
	// [Default] false
}

// The same suite claim at commit: the business write first, then the
// ledger's Record as the last statement (the order of
// txmiddleware.WithClaimAtCommit).
func ExampleTarget_AtCommit() {
	dir, err := os.MkdirTemp("", "conformance-example")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)
	db, err := sql.Open("sqlite3", sqlite.DSN(filepath.Join(dir, "ledger.db"), 10*time.Second))
	if err != nil {
		log.Fatal(err)
	}
	defer db.Close()
	db.SetMaxOpenConns(8)
	ctx := context.Background()

	tg := conformance.StoreTarget("sqlite", db, sqlite.New())
	rep := conformance.Check(ctx, tg.AtCommit(), conformance.WithCases("herd", "atomicity"))
	fmt.Println(rep.Target)
	for _, r := range rep.Results {
		fmt.Println(r.Name, r.Verdict)
	}
	// Output:
	// sqlite/claim-at-commit
	// herd/default pass
	// atomicity pass
}
