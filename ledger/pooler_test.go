package ledger_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/opledger/opledger/dialects/postgres"
	"github.com/opledger/opledger/internal/harness/throwaway"
	"github.com/opledger/opledger/internal/testkit/testdb"
	"github.com/opledger/opledger/ledger"
)

// TestPgBouncerClaims: 16 goroutines claim and complete 10 keys each
// (every key claimed by two of them), and look each up outside a
// transaction, through PgBouncer in transaction mode
// with 3 server connections. With the driver settings of docs/poolers.md
// every claim succeeds, one acquires each key and the other replays; with
// the drivers' defaults, the failures the pooler causes are reported as
// postgres.ErrStatementPooling, naming the setting, never as a bare
// driver error.
func TestPgBouncerClaims(t *testing.T) {
	t.Parallel()
	pg := throwaway.Postgres(t)
	pb := throwaway.PgBouncer(t, pg, throwaway.PgBouncerOptions{PoolSize: 3})
	for _, c := range []struct {
		name, driver, params string
		good                 bool
	}{
		{"pq", "postgres", "&binary_parameters=yes", true},
		{"pgx", "pgx", "&default_query_exec_mode=exec", true},
		{"pq-default", "postgres", "", false},
		{"pgx-default", "pgx", "", false},
	} {
		t.Run(c.name, func(t *testing.T) {
			db := testdb.OpenDSN(t, c.driver, pb.DSN()+c.params, 18)
			d := postgres.New()
			// The table over a direct connection: migrations refuse the pooler.
			direct := testdb.OpenDSN(t, c.driver, pg.DSN(), 2)
			table := testdb.NewTable(t, direct, d)
			s, err := ledger.New(d, ledger.WithTable(table))
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			const workers, keys = 16, 10
			var (
				mu                         sync.Mutex
				acquired, replayed, failed int
				other                      []error
				wg                         sync.WaitGroup
			)
			for w := range workers {
				wg.Go(func() {
					for k := range keys {
						key := fmt.Sprintf("k-%d-%d", w/2, k)
						err := claimThrough(ctx, db, s, testdb.ID(t, "tenant", "/p.v1.S/M", key), key)
						mu.Lock()
						switch {
						case err == nil:
						case errors.Is(err, errReplayed):
							replayed++
						case errors.Is(err, postgres.ErrStatementPooling):
							failed++
						default:
							other = append(other, err)
						}
						if err == nil {
							acquired++
						}
						mu.Unlock()
					}
				})
			}
			wg.Wait()
			if len(other) > 0 {
				t.Fatalf("%d errors other than ErrStatementPooling, first: %v", len(other), other[0])
			}
			if c.good {
				if failed > 0 || acquired != workers/2*keys || replayed != workers/2*keys {
					t.Fatalf("acquired %d, replayed %d, failed %d; want %d, %d, 0", acquired, replayed, failed, workers/2*keys, workers/2*keys)
				}
				return
			}
			if failed == 0 {
				t.Fatalf("the drivers' defaults behind PgBouncer gave no ErrStatementPooling (acquired %d, replayed %d)", acquired, replayed)
			}
			t.Logf("defaults: %d of %d claims failed with ErrStatementPooling", failed, workers*keys)
		})
	}
}

var errReplayed = errors.New("replayed")

// claimThrough claims key in a transaction of its own and completes it
// when acquired, then looks it up outside a transaction (where lib/pq's
// two round trips meet the pooler); errReplayed when the claim replayed.
func claimThrough(ctx context.Context, db *sql.DB, s *ledger.Store, id ledger.Identity, key string) error {
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer tx.Rollback()
	c, err := s.Claim(ctx, tx, ledger.ClaimRequest{Identity: id, Fingerprint: ledger.FingerprintOf([]byte(key))})
	if err != nil {
		return err
	}
	if !c.Acquired() {
		_ = tx.Rollback()
		if err := lookupIs(ctx, db, s, id, key); err != nil {
			return err
		}
		return errReplayed
	}
	if err := s.Complete(ctx, tx, c, ledger.Result{Response: []byte(key), TypeName: "t"}); err != nil {
		return err
	}
	if err := tx.Commit(); err != nil {
		return err
	}
	return lookupIs(ctx, db, s, id, key)
}

// lookupIs checks that Lookup finds key's own entry (not another key's:
// a Bind that reached another client's statement would).
func lookupIs(ctx context.Context, db *sql.DB, s *ledger.Store, id ledger.Identity, key string) error {
	e, err := s.Lookup(ctx, db, id)
	if err != nil {
		return err
	}
	if e.State == ledger.Completed && string(e.Result.Response) != key {
		return fmt.Errorf("lookup of %s found the entry of %q", key, e.Result.Response)
	}
	return nil
}
