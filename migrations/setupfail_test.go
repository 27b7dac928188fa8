package migrations_test

import (
	"context"
	"strings"
	"testing"

	"github.com/opledger/opledger/internal/migrationfs"
	"github.com/opledger/opledger/internal/testkit/testdb"
	"github.com/opledger/opledger/migrations"
)

// TestFailedSetUpLeavesNothing: on every target, an Up that starts where
// no migration is applied and fails at its last migration (an index on a
// column that does not exist, what TiDB answered the outbox's dead-state
// migration with) undoes itself: no table of the ledger is left, the
// version table included, and the error says so; where the version table
// was there before (at version 0, after a Down), it stays. An upgrade that
// fails keeps what it applied (goose's behaviour): only a set-up is all
// or nothing.
func TestFailedSetUpLeavesNothing(t *testing.T) {
	testdb.ParallelOn(t, map[string]int{"postgres": 2, "mysql": 2})
	for _, tg := range testdb.Targets() {
		t.Run(tg.Name, func(t *testing.T) {
			ctx := context.Background()
			db := tg.Open(t, 2)
			failing := testdb.FailingSchema(tg.Dialect)
			table := uniqueTable("opl_fail_")
			t.Cleanup(func() {
				for _, n := range testdb.TablesLike(t, db, tg.Dialect, table) {
					db.Exec("DROP TABLE " + tg.Dialect.QuoteIdent(n))
				}
			})
			left := func() []string { t.Helper(); return testdb.TablesLike(t, db, tg.Dialect, table) }

			// A set-up on an empty database.
			m, err := migrations.New(db, failing, migrations.WithTable(table))
			if err != nil {
				t.Fatal(err)
			}
			rs, err := m.Up(ctx)
			if err == nil || !strings.Contains(err.Error(), "no_such_column") || !strings.Contains(err.Error(), "set-up was undone") {
				t.Fatalf("Up with a failing migration: %v, want its error and that it was undone", err)
			}
			if len(rs) != 0 {
				t.Errorf("Up returned %d results for migrations it rolled back", len(rs))
			}
			if n := left(); len(n) != 0 {
				t.Fatalf("the failed set-up left tables behind: %v", n)
			}

			// A set-up where a Down left the version table at version 0:
			// undone too, the version table kept.
			good, err := migrations.New(db, tg.Dialect, migrations.WithTable(table))
			if err != nil {
				t.Fatal(err)
			}
			if _, err := good.Up(ctx); err != nil {
				t.Fatal(err)
			}
			if _, err := good.Down(ctx); err != nil {
				t.Fatal(err)
			}
			if _, err := m.Up(ctx); err == nil || !strings.Contains(err.Error(), "set-up was undone") {
				t.Fatalf("Up after a Down: %v, want the failure, undone", err)
			}
			if n := left(); len(n) != 1 || n[0] != migrationfs.VersionTable(table) {
				t.Fatalf("after a failed set-up on a version table at 0: %v, want only the version table", n)
			}

			// An upgrade: the dialect's migrations are applied; the failing
			// one is not, and the ledger's tables stay.
			if _, err := good.Up(ctx); err != nil {
				t.Fatal(err)
			}
			if _, err := m.Up(ctx); err == nil || strings.Contains(err.Error(), "undone") {
				t.Fatalf("failing upgrade: %v, want the failure, not undone", err)
			}
			if n := left(); len(n) != 3 {
				t.Fatalf("after a failed upgrade: %v, want the ledger's, the outbox's and the version table", n)
			}
			if _, err := good.Down(ctx); err != nil {
				t.Fatal(err)
			}
		})
	}
}
