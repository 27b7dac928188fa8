package pgxledger_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"os"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/pgx/v5/stdlib"

	"github.com/opledger/opledger/dialects/postgres"
	"github.com/opledger/opledger/ledger"
	"github.com/opledger/opledger/migrations"
	"github.com/opledger/opledger/outbox"
	"github.com/opledger/opledger/pgxledger"
	"github.com/opledger/opledger/txmiddleware"
)

// The examples need a PostgreSQL database: they are compiled, not run.

// A keyed mutation through the Runner: the claim is sent with BEGIN and
// the completion with COMMIT, so the call costs the round trips of the
// bare transaction; a retry with the same key replays the stored result.
func Example() {
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, os.Getenv("DATABASE_URL"))
	if err != nil {
		log.Fatal(err)
	}
	defer pool.Close()

	store, err := pgxledger.New(ledger.WithTable("payments_ledger"))
	if err != nil {
		log.Fatal(err)
	}
	runner, err := pgxledger.NewRunner(pool, store, txmiddleware.WithLockWait(2*time.Second))
	if err != nil {
		log.Fatal(err)
	}

	id, err := ledger.NewIdentity("tenant-a", "/pay.v1.Payments/Create", "key-7f3a")
	if err != nil {
		log.Fatal(err)
	}
	req := ledger.ClaimRequest{Identity: id, Fingerprint: ledger.FingerprintOf([]byte("amount=4711"))}
	out, err := runner.Run(ctx, req, func(ctx context.Context, tx pgx.Tx) (ledger.Result, error) {
		var n int64
		if err := tx.QueryRow(ctx, `INSERT INTO payments (amount) VALUES ($1) RETURNING id`, 4711).Scan(&n); err != nil {
			return ledger.Result{}, err
		}
		return ledger.Result{Response: fmt.Appendf(nil, "payment #%d", n), TypeName: "pay.v1.CreateResponse"}, nil
	})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("executed %v, replayed %v: %s\n", out.Executed, out.Replayed, out.Result.Response)
}

// Migrations for a pgx pool are the kit's goose migrations, run over
// database/sql on the same pool.
func Example_migrations() {
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, os.Getenv("DATABASE_URL"))
	if err != nil {
		log.Fatal(err)
	}
	defer pool.Close()

	db := stdlib.OpenDBFromPool(pool)
	defer db.Close()
	m, err := migrations.New(db, postgres.New(), migrations.WithTable("payments_ledger"))
	if err != nil {
		log.Fatal(err)
	}
	if _, err := m.Up(ctx); err != nil {
		log.Fatal(err)
	}
}

// In a transaction of your own, the claim, the work and the completion
// are three statements; BeginClaim and CompleteCommit send the claim with
// BEGIN and the completion with COMMIT.
func ExampleStore_BeginClaim() {
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, os.Getenv("DATABASE_URL"))
	if err != nil {
		log.Fatal(err)
	}
	defer pool.Close()
	store, err := pgxledger.New()
	if err != nil {
		log.Fatal(err)
	}
	id, err := ledger.NewIdentity("tenant-a", "/pay.v1.Payments/Create", "key-7f3a")
	if err != nil {
		log.Fatal(err)
	}
	req := ledger.ClaimRequest{Identity: id, Fingerprint: ledger.FingerprintOf([]byte("amount=4711"))}

	tx, c, err := store.BeginClaim(ctx, pool, pgx.TxOptions{}, req)
	switch {
	case errors.Is(err, ledger.ErrKeyReused): // the key was used for another request
	case err != nil: // ErrInProgress, ErrRetryable, …
	case c.Acquired():
		if _, err := tx.Exec(ctx, `INSERT INTO payments (amount) VALUES ($1)`, 4711); err != nil {
			tx.Rollback(ctx)
			log.Fatal(err)
		}
		// The completion and COMMIT in one round trip; tx has ended.
		err = store.CompleteCommit(ctx, tx, c, ledger.Result{Response: []byte("ok"), TypeName: "pay.v1.CreateResponse"})
		if errors.Is(err, txmiddleware.ErrCommitUnknown) {
			// resolve: Lookup, or a retry with the same key
		}
	default:
		// a replay: c.Result; the transaction has ended
	}
}

// The outbox's message, enqueued in the Runner's transaction.
func ExampleEnqueue() {
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, os.Getenv("DATABASE_URL"))
	if err != nil {
		log.Fatal(err)
	}
	defer pool.Close()
	store, err := pgxledger.New()
	if err != nil {
		log.Fatal(err)
	}
	ob, err := outbox.New(postgres.New())
	if err != nil {
		log.Fatal(err)
	}
	runner, err := pgxledger.NewRunner(pool, store)
	if err != nil {
		log.Fatal(err)
	}
	id, err := ledger.NewIdentity("tenant-a", "/pay.v1.Payments/Create", "key-7f3a")
	if err != nil {
		log.Fatal(err)
	}
	_, err = runner.Run(ctx, ledger.ClaimRequest{Identity: id, Fingerprint: ledger.FingerprintOf([]byte("amount=4711"))},
		func(ctx context.Context, tx pgx.Tx) (ledger.Result, error) {
			if _, err := pgxledger.Enqueue(ctx, ob, tx, outbox.Message{Name: "PaymentCreated", Topic: "payments.created", Key: "tenant-a"}); err != nil {
				return ledger.Result{}, err
			}
			return ledger.Result{Response: []byte("ok")}, nil
		})
	if err != nil {
		log.Fatal(err)
	}
}
