package pgxledger_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"io/fs"
	"testing"

	"github.com/jackc/pgx/v5/stdlib"

	"github.com/opledger/opledger/internal/migrationfs"
	"github.com/opledger/opledger/internal/pgdialect"
	"github.com/opledger/opledger/internal/testkit/testdb"
	"github.com/opledger/opledger/migrations"
)

// TestMigrations: the kit's goose migrations run for a pgx pool over
// database/sql on the same pool (stdlib.OpenDBFromPool), under their
// session lock: Up creates the ledger's and the outbox's tables, a second
// Up is a no-op, Down removes them; the pool's connections all come back.
func TestMigrations(t *testing.T) {
	testdb.Parallel(t, "postgres", 4)
	pool := testdb.OpenPgx(t, testdb.PgxConfig(t, "", 4, nil))
	ctx := context.Background()
	db := stdlib.OpenDBFromPool(pool)
	defer db.Close()
	var b [5]byte
	_, _ = rand.Read(b[:])
	table := "opl_pgxmig_" + hex.EncodeToString(b[:])
	m, err := migrations.New(db, pgdialect.New(), migrations.WithTable(table))
	if err != nil {
		t.Fatal(err)
	}
	// The dialect's migrations: the ledger's, the outbox's and the
	// outbox's dead state.
	files, err := fs.Glob(pgdialect.New().Migrations().FS, "*.sql")
	if err != nil || len(files) == 0 {
		t.Fatalf("the dialect's migrations: %v %v", files, err)
	}
	applied, err := m.Up(ctx)
	if err != nil || len(applied) != len(files) {
		t.Fatalf("up: %d applied, %v", len(applied), err)
	}
	if again, err := m.Up(ctx); err != nil || len(again) != 0 {
		t.Fatalf("second up: %d applied, %v", len(again), err)
	}
	var n int
	if err := pool.QueryRow(ctx, "SELECT count(*) FROM pg_tables WHERE tablename IN ($1, $2)", table, table+"_outbox").Scan(&n); err != nil || n != 2 {
		t.Fatalf("%d tables after up (%v), want the ledger's and the outbox's", n, err)
	}
	if _, err := m.Down(ctx); err != nil {
		t.Fatalf("down: %v", err)
	}
	if _, err := db.ExecContext(ctx, "DROP TABLE "+pgdialect.New().QuoteIdent(migrationfs.VersionTable(table))); err != nil {
		t.Fatal(err)
	}
	if err := pool.QueryRow(ctx, "SELECT count(*) FROM pg_tables WHERE tablename LIKE $1", table+"%").Scan(&n); err != nil || n != 0 {
		t.Fatalf("%d tables after down (%v)", n, err)
	}
}
