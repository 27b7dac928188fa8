package outbox_test

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

// A keyed operation enqueues its event in its own transaction; a relay
// publishes it once the transaction has committed. Running the operation
// again with the same key replays it and enqueues nothing.
func Example() {
	ctx := context.Background()
	dir, err := os.MkdirTemp("", "outbox-example")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)
	db, err := sql.Open("sqlite3", sqlite.DSN(filepath.Join(dir, "pay.db"), 5*time.Second))
	if err != nil {
		log.Fatal(err)
	}
	defer db.Close()
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
	n, err := relay.RunOnce(ctx) // a service runs relay.Run(ctx) instead
	fmt.Println("published", n, err)
	// Output:
	// payments.transfers TransferCompleted key=acct-1 {"amount_cents":100}
	// published 1 <nil>
}
