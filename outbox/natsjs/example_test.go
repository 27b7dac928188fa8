package natsjs_test

import (
	"context"
	"database/sql"
	"log"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/opledger/opledger/dialects/postgres"
	"github.com/opledger/opledger/outbox"
	"github.com/opledger/opledger/outbox/natsjs"
)

// A relay from a PostgreSQL outbox to JetStream: the stream captures the
// topics and drops repeated Nats-Msg-Ids within its duplicate window.
// Several such relays may run at once. With the publisher's limits, the
// outbox's Enqueue refuses a message the server could never take.
func Example() {
	ctx := context.Background()
	var db *sql.DB // the service's pool, holding the ledger and its outbox
	nc, err := nats.Connect("nats://127.0.0.1:4222")
	if err != nil {
		log.Fatal(err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		log.Fatal(err)
	}
	// The stream's duplicate window drops the relay's re-sends.
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "PAYMENTS", Subjects: []string{"payments.>"},
		Duplicates: 2 * time.Minute}); err != nil {
		log.Fatal(err)
	}
	pub, err := natsjs.New(js, natsjs.WithStream("PAYMENTS"))
	if err != nil {
		log.Fatal(err)
	}
	ob, err := outbox.New(postgres.New(), outbox.WithPublisherLimits(pub)) // subjects, the server's max_payload
	if err != nil {
		log.Fatal(err)
	}
	relay, err := outbox.NewRelay(db, ob, pub)
	if err != nil {
		log.Fatal(err)
	}
	if err := relay.Run(ctx); err != nil && ctx.Err() == nil {
		log.Fatal(err)
	}
}
