package pgxledger_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/opledger/opledger/internal/dialectkit"
	"github.com/opledger/opledger/internal/pgdialect"
	"github.com/opledger/opledger/internal/testkit/poolertest"
	"github.com/opledger/opledger/internal/testkit/testdb"
	"github.com/opledger/opledger/ledger"
	"github.com/opledger/opledger/outbox"
	"github.com/opledger/opledger/pgxledger"
)

// client returns a pool of one connection through p's PgBouncer with
// pgx's default exec mode (QueryExecModeCacheStatement, which prepares
// every statement under a name) and a Store on its ledger table, on a
// server connection left with no statement of an earlier client.
func client(t *testing.T, p *poolertest.Pooler) (*pgxpool.Pool, *pgxledger.Store) {
	t.Helper()
	p.Reset(t)
	return sharing(t, p)
}

// sharing is client without the Reset: the server connection keeps what
// the clients before this one prepared there.
func sharing(t *testing.T, p *poolertest.Pooler) (*pgxpool.Pool, *pgxledger.Store) {
	t.Helper()
	pool := testdb.OpenPgx(t, testdb.PgxConfigDSN(t, p.PgBouncer.DSN(), 1, nil))
	if m := pool.Config().ConnConfig.DefaultQueryExecMode; m != pgx.QueryExecModeCacheStatement {
		t.Fatalf("the client's exec mode is %v, want pgx's default (cache_statement)", m)
	}
	// A connection released in a failed transaction (a COMMIT the
	// database refused) is destroyed in the background: wait for it before
	// OpenPgx's cleanup counts the connections still acquired.
	t.Cleanup(func() {
		for deadline := time.Now().Add(10 * time.Second); pool.Stat().AcquiredConns() > 0 && time.Now().Before(deadline); {
			time.Sleep(5 * time.Millisecond)
		}
	})
	s, err := pgxledger.New(ledger.WithTable(p.Table))
	if err != nil {
		t.Fatal(err)
	}
	return pool, s
}

// TestPgBouncerStatementErrors: pgx with its default exec mode behind
// PgBouncer in transaction mode, each statement the kit sends on pgx
// meeting the pooler's error in turn: claim, complete and record in the
// caller's transaction; the pipelined batches ({BEGIN, claim},
// {complete, COMMIT}, {record, COMMIT}) and their COMMIT, claim first and
// at commit; lookup, sweep and the outbox's enqueue; and the Runner's
// paths (its COMMIT in both orders, its BEGIN, its resolve, the work's own
// statement). Every one returns an error matching
// postgres.ErrStatementPooling whose message names
// default_query_exec_mode, with pgx's *pgconn.PgError still reachable, as
// docs/poolers.md promises; the COMMITs' errors are definite (nothing
// committed), never ErrCommitUnknown.
func TestPgBouncerStatementErrors(t *testing.T) {
	t.Parallel()
	p := poolertest.New(t)
	d := pgdialect.New()
	q, rq, bq := d.Queries(p.Table), d.RecordQueries(p.Table), d.BirthQueries(p.Table)
	pq, _ := d.PipelineQueries(p.Table, 0)
	// The pipelined completion of a key without a birth, as the ledger
	// sends it: with the hour of its birth where its WHERE ends.
	pqComplete := pq.Complete[:pq.CompleteHour] + dialectkit.HourOfBirth(0) + pq.Complete[pq.CompleteHour:]
	// The table is partitioned by birth (migration 00005): Sweep on the
	// pool deletes from the partition of keys without a birth by its own
	// name.
	sq := d.SweepQueries(p.Table, dialectkit.Partition{Name: p.Table + "_born0", Kind: dialectkit.Unborn})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	// inTx runs f in a transaction of pool's, committing when f succeeds.
	inTx := func(t *testing.T, pool *pgxpool.Pool, f func(tx pgx.Tx) error) error {
		t.Helper()
		tx, err := pool.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer tx.Rollback(ctx)
		if err := f(tx); err != nil {
			return err
		}
		return tx.Commit(ctx)
	}
	claimComplete := func(t *testing.T, pool *pgxpool.Pool, s *pgxledger.Store, key string) error {
		return inTx(t, pool, func(tx pgx.Tx) error {
			c, err := s.Claim(ctx, tx, req(t, key))
			if err != nil {
				return err
			}
			return s.Complete(ctx, tx, c, result(key))
		})
	}
	record := func(t *testing.T, pool *pgxpool.Pool, s *pgxledger.Store, key string) error {
		return inTx(t, pool, func(tx pgx.Tx) error {
			_, err := s.Record(ctx, tx, req(t, key), result(key))
			return err
		})
	}
	pipelinedFirst := func(t *testing.T, pool *pgxpool.Pool, s *pgxledger.Store, key string) error {
		tx, c, err := s.BeginClaim(ctx, pool, pgx.TxOptions{}, req(t, key))
		if err != nil {
			return err
		}
		if !c.Acquired() {
			t.Fatalf("%s: %v, want acquired", key, c.Outcome)
		}
		return s.CompleteCommit(ctx, tx, c, result(key))
	}
	pipelinedAtCommit := func(t *testing.T, pool *pgxpool.Pool, s *pgxledger.Store, key string) error {
		tx, err := s.Begin(ctx, pool, pgx.TxOptions{})
		if err != nil {
			return err
		}
		_, err = s.RecordCommit(ctx, tx, req(t, key), result(key))
		return err
	}
	// notCommitted checks that key left no entry.
	notCommitted := func(t *testing.T, s *pgxledger.Store, key string) {
		t.Helper()
		var n int
		p.Query(t, &n, "SELECT COUNT(*) FROM "+pgxQuote(p.Table)+" WHERE id = $1", idBytes(req(t, key).Identity))
		if n != 0 {
			t.Fatalf("%s: %d entries after the failed COMMIT, want none", key, n)
		}
	}

	// Each path: a warm-up with key "<name>-1" that prepares its
	// statements, then the statement named by forget deallocated on the
	// server connection, then the same path with key "<name>-2".
	for _, c := range []struct {
		name   string
		forget []string
		run    func(t *testing.T, pool *pgxpool.Pool, s *pgxledger.Store, key string) error
		after  func(t *testing.T, s *pgxledger.Store, key string)
	}{
		{"claim", []string{q.Insert}, claimComplete, nil},
		{"complete", []string{bq.Complete + dialectkit.HourOfBirth(0)}, claimComplete, nil},
		{"record", []string{rq.Insert}, record, nil},
		{"pipelined claim", []string{q.Insert}, pipelinedFirst, nil},
		{"pipelined complete", []string{pqComplete}, pipelinedFirst, notCommitted},
		{"COMMIT claim first", []string{"commit"}, pipelinedFirst, notCommitted},
		{"pipelined record", []string{pq.Record}, pipelinedAtCommit, notCommitted},
		{"COMMIT at commit", []string{"commit"}, pipelinedAtCommit, notCommitted},
		{"lookup", []string{bq.Lookup + dialectkit.HourOfBirth(0)}, func(t *testing.T, pool *pgxpool.Pool, s *pgxledger.Store, key string) error {
			_, err := s.Lookup(ctx, pool, req(t, key).Identity)
			if errors.Is(err, ledger.ErrNotFound) {
				err = nil
			}
			return err
		}, nil},
		{"sweep", []string{sq.Sweep}, func(t *testing.T, pool *pgxpool.Pool, s *pgxledger.Store, key string) error {
			_, err := s.Sweep(ctx, pool, 10)
			return err
		}, nil},
		{"enqueue", []string{d.OutboxQueries(outbox.TableFor(p.Table)).Insert}, func(t *testing.T, pool *pgxpool.Pool, s *pgxledger.Store, key string) error {
			ob, err := outbox.New(d, outbox.WithTable(outbox.TableFor(p.Table)))
			if err != nil {
				t.Fatal(err)
			}
			return inTx(t, pool, func(tx pgx.Tx) error {
				octx := ledger.ContextWithOperation(ctx, req(t, key).Identity)
				_, err := pgxledger.Enqueue(octx, ob, tx, outbox.Message{Name: "Created", Topic: "payments.created", Key: key})
				return err
			})
		}, nil},
	} {
		t.Run(c.name, func(t *testing.T) {
			pool, s := client(t, p)
			if err := c.run(t, pool, s, c.name+"-1"); err != nil {
				t.Fatalf("warm-up: %v", err)
			}
			p.Forget(t, c.forget...)
			poolertest.Want(t, c.run(t, pool, s, c.name+"-2"), "26000")
			if c.after != nil {
				c.after(t, s, c.name+"-2")
			}
		})
	}

	// The Runner: its COMMIT in both orders, its resolve, and the work's
	// own statement (the runner passes every error it returns through the
	// dialect).
	work := func(ctx context.Context, tx pgx.Tx) (ledger.Result, error) {
		op, _ := ledger.OperationFromContext(ctx)
		id := op.ID()
		if _, err := tx.Exec(ctx, "SELECT $1::bytea", id[:]); err != nil {
			return ledger.Result{}, err
		}
		return ledger.Result{Response: []byte("ok")}, nil
	}
	for _, order := range orders {
		t.Run("runner COMMIT "+order.name, func(t *testing.T) {
			pool, s := client(t, p)
			r, err := pgxledger.NewRunner(pool, s, order.opts...)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := r.Run(ctx, req(t, "runner-commit-"+order.name+"-1"), work); err != nil {
				t.Fatalf("warm-up: %v", err)
			}
			p.Forget(t, "commit")
			key := "runner-commit-" + order.name + "-2"
			out, err := r.Run(ctx, req(t, key), work)
			poolertest.Want(t, err, "26000")
			if out.Executed || out.Attempts != 1 {
				t.Fatalf("%+v, want one attempt, not executed", out)
			}
			notCommitted(t, s, key)
		})
		t.Run("runner work "+order.name, func(t *testing.T) {
			pool, s := client(t, p)
			r, err := pgxledger.NewRunner(pool, s, order.opts...)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := r.Run(ctx, req(t, "runner-work-"+order.name+"-1"), work); err != nil {
				t.Fatalf("warm-up: %v", err)
			}
			p.Forget(t, "SELECT $1::bytea")
			_, err = r.Run(ctx, req(t, "runner-work-"+order.name+"-2"), work)
			poolertest.Want(t, err, "26000")
		})
	}
	t.Run("runner lookup", func(t *testing.T) {
		pool, s := client(t, p)
		r, err := pgxledger.NewRunner(pool, s)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := r.Lookup(ctx, req(t, "runner-lookup").Identity); !errors.Is(err, ledger.ErrNotFound) {
			t.Fatalf("warm-up: %v", err)
		}
		p.Forget(t, pgdialect.New().BirthQueries(p.Table).Lookup+dialectkit.HourOfBirth(0))
		_, err = r.Lookup(ctx, req(t, "runner-lookup").Identity)
		poolertest.Want(t, err, "26000")
	})
	// Two clients, one server connection: the second client's first
	// pipelined transaction prepares the Store's statements under the
	// names the first one's already has there (42P05), at Store.Begin.
	t.Run("Begin", func(t *testing.T) {
		first, s := client(t, p)
		if err := pipelinedAtCommit(t, first, s, "begin-1"); err != nil {
			t.Fatalf("first client: %v", err)
		}
		second, s2 := sharing(t, p)
		tx, err := s2.Begin(ctx, second, pgx.TxOptions{})
		if err == nil {
			tx.Rollback(ctx)
		}
		poolertest.Want(t, err, "42P05")
	})
	// Two clients, one server connection: the second client's first
	// pipelined transaction prepares the Store's statements under the
	// names the first one's already has there (42P05), at the Runner's
	// BEGIN (claim at commit) and at its {BEGIN, claim} (claim first).
	for _, order := range orders {
		t.Run("runner BEGIN "+order.name, func(t *testing.T) {
			first, s := client(t, p)
			r, err := pgxledger.NewRunner(first, s, order.opts...)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := r.Run(ctx, req(t, "runner-begin-"+order.name+"-1"), work); err != nil {
				t.Fatalf("first client: %v", err)
			}
			second, s2 := sharing(t, p)
			r2, err := pgxledger.NewRunner(second, s2, order.opts...)
			if err != nil {
				t.Fatal(err)
			}
			out, err := r2.Run(ctx, req(t, "runner-begin-"+order.name+"-2"), work)
			poolertest.Want(t, err, "42P05")
			if out.Executed {
				t.Fatalf("%+v, want not executed", out)
			}
		})
	}
}

// idBytes is id's primary key in the ledger's table.
func idBytes(id ledger.Identity) []byte {
	b := id.ID()
	return b[:]
}
