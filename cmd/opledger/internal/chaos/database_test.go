package chaos

import (
	"context"
	"database/sql"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/opledger/opledger/dialects/sqlite"
	"github.com/opledger/opledger/internal/testkit/testdb"
	"github.com/opledger/opledger/ledger"
)

// TestGivenDBAddress: the replicas reach a database given by DSN through
// the run's proxy when it is on loopback, and directly otherwise.
func TestGivenDBAddress(t *testing.T) {
	t.Parallel()
	for dsn, want := range map[string]string{
		"postgres://u@127.0.0.1:5432/db?sslmode=disable": "127.0.0.1:5432",
		"mysql://root@localhost:3306/test":               "localhost:3306",
		"root@tcp(127.0.0.1:3306)/test":                  "127.0.0.1:3306",
		"postgres://u@db.internal:5432/db":               "", // not loopback: no proxy
		"sqlite:/tmp/x.db":                               "",
	} {
		g := newGivenDB(dsn, "a given database")
		if got := strings.Join(g.addrs(), ","); got != want {
			t.Errorf("%s: addrs %q, want %q", dsn, got, want)
		}
		if want != "" && g.replicaDSN([]string{"127.0.0.1:9"}) == dsn {
			t.Errorf("%s: the replicas' DSN does not go through the proxy", dsn)
		}
	}
}

// TestMigrateLedgerFailedSetUp: when the ledger's migrations fail on a
// database the run was given (TiDB refused one of them, leaving 472 tables
// over a few runs), the run's set-up fails and leaves no table behind.
func TestMigrateLedgerFailedSetUp(t *testing.T) {
	t.Parallel()
	db, err := sql.Open("sqlite3", sqlite.DSN(filepath.Join(t.TempDir(), "given.db"), 5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	err = migrateLedger(context.Background(), db, testdb.FailingSchema(sqlite.New()))
	if err == nil || !strings.Contains(err.Error(), "no_such_column") {
		t.Fatalf("migrateLedger with a failing migration: %v", err)
	}
	if left := testdb.TablesLike(t, db, sqlite.New(), ledger.DefaultTable); len(left) != 0 {
		t.Fatalf("the failed set-up left %v behind", left)
	}
}
