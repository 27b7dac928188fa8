package migrations_test

import (
	"context"
	"database/sql"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/opledger/opledger/dialects/postgres"
	"github.com/opledger/opledger/internal/harness/throwaway"
	"github.com/opledger/opledger/internal/testkit/testdb"
	"github.com/opledger/opledger/migrations"
)

// TestTransactionPoolingRefused: behind PgBouncer in transaction mode,
// where the server connection changes between transactions (two server
// connections, handed out in turn), migrations refuse with
// postgres.ErrTransactionPooling instead of running unprotected by their
// session lock; the lock is not left held, so a migration over a direct
// connection right after succeeds without waiting.
func TestTransactionPoolingRefused(t *testing.T) {
	t.Parallel()
	pg := throwaway.Postgres(t)
	pb := throwaway.PgBouncer(t, pg, throwaway.PgBouncerOptions{PoolSize: 2, Settings: map[string]string{"server_round_robin": "1"}})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for _, c := range []struct{ driver, params string }{
		{"postgres", "&binary_parameters=yes"},
		{"pgx", "&default_query_exec_mode=exec"},
	} {
		t.Run(c.driver, func(t *testing.T) {
			db := testdb.OpenDSN(t, c.driver, pb.DSN()+c.params, 4)
			warm(t, ctx, db, 2)
			m, err := migrations.New(db, postgres.New(), migrations.WithTable("opl_pooled"))
			if err != nil {
				t.Fatal(err)
			}
			_, err = m.Up(ctx)
			if !errors.Is(err, postgres.ErrTransactionPooling) {
				t.Fatalf("Up through PgBouncer: %v, want ErrTransactionPooling", err)
			}
			t.Logf("Up: %v", err)

			direct := testdb.OpenDSN(t, c.driver, pg.DSN(), 2)
			md, err := migrations.New(direct, postgres.New(), migrations.WithTable("opl_pooled"))
			if err != nil {
				t.Fatal(err)
			}
			dctx, dcancel := context.WithTimeout(ctx, 10*time.Second) // the lock waits up to 5 minutes if left held
			defer dcancel()
			if _, err := md.Up(dctx); err != nil {
				t.Fatalf("direct Up after the refusal: %v", err)
			}
			if _, err := md.Down(dctx); err != nil {
				t.Fatalf("direct Down: %v", err)
			}
		})
	}
}

// warm opens n server connections behind the pooler: n clients in a
// transaction at once.
func warm(t *testing.T, ctx context.Context, db *sql.DB, n int) {
	t.Helper()
	var txs []*sql.Tx
	for range n {
		tx, err := db.BeginTx(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := tx.ExecContext(ctx, "SELECT 1"); err != nil {
			t.Fatal(err)
		}
		txs = append(txs, tx)
	}
	for _, tx := range txs {
		_ = tx.Rollback()
	}
}

// TestTransactionPoolingOneServerConnection: behind PgBouncer in
// transaction mode with one server connection, where a migration's
// statements all run on the same backend, a second migration at the same
// time lands on the session that holds the lock; it is refused with
// postgres.ErrTransactionPooling instead of taking the re-entrant lock
// and migrating alongside. The first one, or both in turn, succeed; the
// table is created once.
func TestTransactionPoolingOneServerConnection(t *testing.T) {
	t.Parallel()
	pg := throwaway.Postgres(t)
	pb := throwaway.PgBouncer(t, pg, throwaway.PgBouncerOptions{PoolSize: 1})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	errs := make([]error, 4)
	var wg sync.WaitGroup
	for i := range errs {
		db := testdb.OpenDSN(t, "pgx", pb.DriverDSN("pgx"), 2)
		m, err := migrations.New(db, postgres.New(), migrations.WithTable("opl_one"))
		if err != nil {
			t.Fatal(err)
		}
		wg.Go(func() { _, errs[i] = m.Up(ctx) })
	}
	wg.Wait()
	ok := 0
	for _, err := range errs {
		switch {
		case err == nil:
			ok++
		case errors.Is(err, postgres.ErrTransactionPooling):
			t.Logf("refused: %v", err)
		default:
			t.Errorf("Up: %v (neither success nor ErrTransactionPooling)", err)
		}
	}
	if ok == 0 {
		t.Fatal("no migration succeeded")
	}
	direct := testdb.OpenDSN(t, "pgx", pg.DSN(), 1)
	var applied int
	if err := direct.QueryRowContext(ctx, "SELECT count(*) FROM opl_one_db_version WHERE version_id > 0 AND is_applied").Scan(&applied); err != nil {
		t.Fatal(err)
	}
	if applied != 5 {
		t.Fatalf("%d migrations recorded as applied, want 5 (each once)", applied)
	}
}
