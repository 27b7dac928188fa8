package migrations_test

import (
	"context"
	"database/sql"
	"fmt"
	"log"
	"os"
	"path/filepath"
	"time"

	_ "github.com/mattn/go-sqlite3"

	"github.com/opledger/opledger/dialects/sqlite"
	"github.com/opledger/opledger/migrations"
)

// New takes the dialect's migrations and runs them through goose with the
// kit's own version table: Up creates the ledger's table, a second Up is a
// no-op, Down removes it.
func Example() {
	dir, err := os.MkdirTemp("", "migrations-example")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)
	db, err := sql.Open("sqlite3", sqlite.DSN(filepath.Join(dir, "app.db"), 5*time.Second))
	if err != nil {
		log.Fatal(err)
	}
	defer db.Close()
	ctx := context.Background()

	m, err := migrations.New(db, sqlite.New(), migrations.WithTable("payments_ledger"))
	if err != nil {
		log.Fatal(err)
	}
	applied, err := m.Up(ctx)
	if err != nil {
		log.Fatal(err)
	}
	for _, r := range applied {
		fmt.Println(r.Direction, r.Name)
	}
	again, err := m.Up(ctx)
	fmt.Println("second up:", len(again), err)
	if _, err := m.Down(ctx); err != nil {
		log.Fatal(err)
	}
	// Output:
	// up 00001_create_operations.sql
	// up 00002_create_outbox.sql
	// up 00003_outbox_dead.sql
	// up 00004_operations_born_at.sql
	// up 00005_operations_partitioned.sql
	// second up: 0 <nil>
}

// Export writes the rendered files for another migration tool.
func ExampleExport() {
	dir, err := os.MkdirTemp("", "migrations-export")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)
	paths, err := migrations.Export(dir, sqlite.New(), "opledger_operations")
	if err != nil {
		log.Fatal(err)
	}
	for _, p := range paths {
		fmt.Println(filepath.Base(p))
	}
	// Output:
	// 00001_create_operations.sql
	// 00002_create_outbox.sql
	// 00003_outbox_dead.sql
	// 00004_operations_born_at.sql
	// 00005_operations_partitioned.sql
}
