package outbox_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log"
	"os"
	"path/filepath"
	"time"

	_ "github.com/mattn/go-sqlite3"

	"github.com/opledger/opledger/dialects/sqlite"
	"github.com/opledger/opledger/ledger"
	"github.com/opledger/opledger/migrations"
	"github.com/opledger/opledger/outbox"
	"github.com/opledger/opledger/txmiddleware"
)

// printer is a Publisher that prints what it is given.
type printer struct{}

func (printer) Publish(ctx context.Context, e outbox.Envelope) error {
	fmt.Printf("%s %s key=%s %s\n", e.Topic, e.Name, e.Key, e.Payload)
	return nil
}

// exampleLedger opens an SQLite file in a temporary directory with the
// ledger's table and its outbox, and returns it with a transaction
// runner on the ledger, and what removes them.
func exampleLedger(ctx context.Context) (*sql.DB, *txmiddleware.Runner, func()) {
	dir, err := os.MkdirTemp("", "outbox-example")
	if err != nil {
		log.Fatal(err)
	}
	db, err := sql.Open("sqlite3", sqlite.DSN(filepath.Join(dir, "pay.db"), 5*time.Second))
	if err != nil {
		log.Fatal(err)
	}
	done := func() { db.Close(); os.RemoveAll(dir) }
	m, err := migrations.New(db, sqlite.New()) // the ledger's table and its outbox
	if err != nil {
		log.Fatal(err)
	}
	if _, err := m.Up(ctx); err != nil {
		log.Fatal(err)
	}
	store, err := ledger.New(sqlite.New())
	if err != nil {
		log.Fatal(err)
	}
	runner, err := txmiddleware.New(db, store)
	if err != nil {
		log.Fatal(err)
	}
	return db, runner, done
}

// A keyed operation enqueues its event in its own transaction; a relay
// publishes it once the transaction has committed. Running the operation
// again with the same key replays it and enqueues nothing.
func Example() {
	ctx := context.Background()
	db, runner, done := exampleLedger(ctx)
	defer done()

	ob, err := outbox.New(sqlite.New())
	if err != nil {
		log.Fatal(err)
	}
	id, err := ledger.NewIdentity("alice", "/pay.v1.Payments/Transfer", "key-1")
	if err != nil {
		log.Fatal(err)
	}
	for range 2 { // the second run is a retry: it replays
		_, err = runner.Run(ctx, ledger.ClaimRequest{Identity: id, Fingerprint: ledger.FingerprintOf([]byte("100"))},
			func(ctx context.Context, tx *sql.Tx) (ledger.Result, error) {
				// ... the business write in tx ...
				_, err := ob.Enqueue(ctx, tx, outbox.Message{Name: "TransferCompleted", Topic: "payments.transfers",
					Key: "acct-1", Payload: []byte(`{"amount_cents":100}`)})
				return ledger.Result{}, err
			})
		if err != nil {
			log.Fatal(err)
		}
	}

	relay, err := outbox.NewRelay(db, ob, printer{})
	if err != nil {
		log.Fatal(err)
	}
	err = relay.Drain(ctx) // a service runs relay.Run(ctx) instead
	fmt.Println("published", relay.Stats().Published, err)
	// Output:
	// payments.transfers TransferCompleted key=acct-1 {"amount_cents":100}
	// published 1 <nil>
}

// picky is a Publisher whose broker takes payloads of at most limit
// bytes: a larger one it refuses as undeliverable.
type picky struct{ limit int }

func (p *picky) Publish(ctx context.Context, e outbox.Envelope) error {
	if len(e.Payload) > p.limit {
		return fmt.Errorf("%w: %d bytes, the broker takes %d", outbox.ErrUndeliverable, len(e.Payload), p.limit)
	}
	fmt.Printf("%s key=%s %s\n", e.Name, e.Key, e.Payload)
	return nil
}

// A message the broker refuses for good is set aside (dead): the other
// keys keep flowing, the later messages of its own key wait behind it,
// and Drain says so. Once the broker takes it, RetryDead sends it first,
// then the rest of its key, in order.
func ExampleOutbox_RetryDead() {
	ctx := context.Background()
	db, runner, done := exampleLedger(ctx)
	defer done()
	ob, err := outbox.New(sqlite.New())
	if err != nil {
		log.Fatal(err)
	}
	for i, m := range []outbox.Message{
		{Name: "Opened", Topic: "accounts", Key: "acct-1", Payload: []byte("a statement of many bytes")},
		{Name: "Closed", Topic: "accounts", Key: "acct-1", Payload: []byte("closed")},
		{Name: "Opened", Topic: "accounts", Key: "acct-2", Payload: []byte("opened")},
	} {
		id, err := ledger.NewIdentity("alice", "/acct.v1.Accounts/Change", fmt.Sprint("key-", i))
		if err != nil {
			log.Fatal(err)
		}
		if _, err := runner.Run(ctx, ledger.ClaimRequest{Identity: id, Fingerprint: ledger.FingerprintOf(m.Payload)},
			func(ctx context.Context, tx *sql.Tx) (ledger.Result, error) {
				_, err := ob.Enqueue(ctx, tx, m)
				return ledger.Result{}, err
			}); err != nil {
			log.Fatal(err)
		}
	}

	broker := &picky{limit: 10}
	relay, err := outbox.NewRelay(db, ob, broker)
	if err != nil {
		log.Fatal(err)
	}
	err = relay.Drain(ctx)
	fmt.Println("drain:", err, errors.Is(err, outbox.ErrDead))
	dead, err := ob.Dead(ctx, db, 100)
	if err != nil {
		log.Fatal(err)
	}
	for _, m := range dead {
		fmt.Printf("dead: %s key=%s attempts=%d waiting=%d: %s\n", m.Name, m.Key, m.Attempts, m.Waiting, m.Reason)
	}

	broker.limit = 100 // the broker's limit raised
	if _, err := ob.RetryDead(ctx, db, dead[0].ID); err != nil {
		log.Fatal(err)
	}
	fmt.Println("drain:", relay.Drain(ctx))
	// Output:
	// Opened key=acct-2 opened
	// drain: outbox: 1 message set aside as undeliverable (dead), 1 more waiting behind it true
	// dead: Opened key=acct-1 attempts=1 waiting=1: outbox: the publisher can never deliver this message: 25 bytes, the broker takes 10
	// Opened key=acct-1 a statement of many bytes
	// Closed key=acct-1 closed
	// drain: <nil>
}
