package ledger_test

import (
	"context"
	"database/sql"
	"errors"
	"testing"
	"time"

	"github.com/opledger/opledger/internal/dialectkit"
	"github.com/opledger/opledger/internal/pgdialect"
	"github.com/opledger/opledger/internal/testkit/poolertest"
	"github.com/opledger/opledger/internal/testkit/testdb"
	"github.com/opledger/opledger/ledger"
)

// TestPgBouncerStatementPaths: database/sql with pgx's driver in its
// default exec mode (cache_statement) behind PgBouncer in transaction
// mode, each statement ledger.Store sends meeting the pooler's error in
// turn (poolertest: the statement it prepared is gone from the server
// connection the next time): the claim, the completion and the record in
// the caller's transaction, Lookup and Sweep on the pool, Sweep's bounded
// batches (WithSweepLockWait: SET LOCAL, then the statement, in a
// transaction of their own). Each returns an error matching
// postgres.ErrStatementPooling that names default_query_exec_mode, with
// the driver's *pgconn.PgError still reachable. TestPgBouncerClaims has
// lib/pq's failures, which a race decides.
func TestPgBouncerStatementPaths(t *testing.T) {
	t.Parallel()
	p := poolertest.New(t)
	d := pgdialect.New()
	q, rq, bq := d.Queries(p.Table), d.RecordQueries(p.Table), d.BirthQueries(p.Table)
	// The table is partitioned by birth (migration 00005): Sweep deletes
	// from the partition of keys without a birth by its own name.
	sq := d.SweepQueries(p.Table, dialectkit.Partition{Name: p.Table + "_born0", Kind: dialectkit.Unborn})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	id := func(key string) ledger.Identity { return testdb.ID(t, "svc-a", "/pay.v1.Payments/Create", key) }
	claimReq := func(key string) ledger.ClaimRequest {
		return ledger.ClaimRequest{Identity: id(key), Fingerprint: ledger.FingerprintOf([]byte(key))}
	}
	res := func(key string) ledger.Result { return ledger.Result{Response: []byte(key), TypeName: "t"} }
	inTx := func(db *sql.DB, f func(tx *sql.Tx) error) error {
		tx, err := db.BeginTx(ctx, nil)
		if err != nil {
			return err
		}
		defer tx.Rollback()
		if err := f(tx); err != nil {
			return err
		}
		return tx.Commit()
	}
	type path func(db *sql.DB, s *ledger.Store, key string) error
	claimComplete := func(db *sql.DB, s *ledger.Store, key string) error {
		return inTx(db, func(tx *sql.Tx) error {
			c, err := s.Claim(ctx, tx, claimReq(key))
			if err != nil {
				return err
			}
			return s.Complete(ctx, tx, c, res(key))
		})
	}
	sweep := func(db *sql.DB, s *ledger.Store, key string) error {
		_, err := s.Sweep(ctx, db, 10)
		return err
	}
	for _, c := range []struct {
		name   string
		forget string
		run    path
		opts   []ledger.Option
	}{
		{"claim", q.Insert, claimComplete, nil},
		// The keys have no birth: the completion and the lookup end with
		// the partition of unknown births as a literal (PruneByHour).
		{"complete", bq.Complete + dialectkit.HourOfBirth(0), claimComplete, nil},
		{"record", rq.Insert, func(db *sql.DB, s *ledger.Store, key string) error {
			return inTx(db, func(tx *sql.Tx) error {
				_, err := s.Record(ctx, tx, claimReq(key), res(key))
				return err
			})
		}, nil},
		{"lookup", bq.Lookup + dialectkit.HourOfBirth(0), func(db *sql.DB, s *ledger.Store, key string) error {
			_, err := s.Lookup(ctx, db, id(key))
			if errors.Is(err, ledger.ErrNotFound) {
				err = nil
			}
			return err
		}, nil},
		{"sweep", sq.Sweep, sweep, nil},
		{"bounded sweep", sq.Sweep, sweep, []ledger.Option{ledger.WithSweepLockWait(time.Second)}},
	} {
		t.Run(c.name, func(t *testing.T) {
			p.Reset(t)
			db := testdb.OpenDSN(t, "pgx", p.PgBouncer.DSN(), 1) // pgx's defaults
			s, err := ledger.New(d, append([]ledger.Option{ledger.WithTable(p.Table)}, c.opts...)...)
			if err != nil {
				t.Fatal(err)
			}
			if err := c.run(db, s, c.name+"-1"); err != nil {
				t.Fatalf("warm-up: %v", err)
			}
			p.Forget(t, c.forget)
			poolertest.Want(t, c.run(db, s, c.name+"-2"), "26000")
		})
	}
}
