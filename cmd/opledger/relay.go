package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/url"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/opledger/opledger/ledger"
	"github.com/opledger/opledger/outbox"
	"github.com/opledger/opledger/outbox/natsjs"
)

func init() {
	extraCommands["relay"] = command{"publish the outbox's committed messages to NATS JetStream (at least once, in order per key)", runRelay}
}

func runRelay(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := newFlags("relay", stderr)
	dsn := fs.String("dsn", "", "database (default $OPLEDGER_DSN, else the SQLite file opledger.db)")
	table := fs.String("table", ledger.DefaultTable, "ledger table name (the outbox is <table>_outbox)")
	to := fs.String("to", "", "where to publish: nats://host:port (JetStream)")
	stream := fs.String("stream", "", "JetStream stream to expect (and create when missing, with --subjects)")
	subjects := fs.String("subjects", "", "comma-separated subjects of a stream to create (with --stream)")
	prefix := fs.String("subject-prefix", "", "put before every topic to make the NATS subject")
	batch := fs.Int("batch", outbox.DefaultBatchSize, "messages per batch (1 to 1000)")
	drainOnly := fs.Bool("drain", false, "exit once the outbox is empty instead of running until interrupted")
	verbose := fs.Bool("v", false, "log failed batches and messages set aside to stderr")
	var dead deadFlags
	fs.BoolVar(&dead.list, "dead", false, "list the messages set aside as undeliverable (dead), oldest first, and exit")
	fs.StringVar(&dead.retry, "retry-dead", "", "make the dead message with this id an ordinary one again, published at the relay's next batch before the rest of its key, and exit")
	fs.StringVar(&dead.discard, "discard-dead", "", "delete the dead message with this id, never to be published (the rest of its key follows), and exit")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if dead.any() {
		return runRelayDead(ctx, fs, dead, dsnFrom(*dsn), *table, stdout, stderr)
	}
	switch {
	case fs.NArg() > 0:
		return fail(stderr, "relay", fmt.Errorf("unexpected argument %q", fs.Arg(0)))
	case *to == "":
		return fail(stderr, "relay", errors.New("--to nats://host:port is required"))
	case *subjects != "" && *stream == "":
		return fail(stderr, "relay", errors.New("--subjects needs --stream"))
	}
	u, err := url.Parse(*to)
	if err != nil || (u.Scheme != "nats" && u.Scheme != "tls") || u.Host == "" {
		return fail(stderr, "relay", errors.New("--to must be a nats:// URL"))
	}
	db, t, err := openDB(ctx, dsnFrom(*dsn))
	if err != nil {
		return fail(stderr, "relay", err)
	}
	defer db.Close()
	ob, err := outbox.New(t.dialect, outbox.WithTable(outbox.TableFor(*table)))
	if err != nil {
		return fail(stderr, "relay", err)
	}
	nc, err := nats.Connect(*to, nats.MaxReconnects(-1), nats.ReconnectWait(500*time.Millisecond), nats.Name("opledger relay"))
	if err != nil {
		return fail(stderr, "relay", fmt.Errorf("connect %s: %w", u.Redacted(), err))
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return fail(stderr, "relay", err)
	}
	var popts []natsjs.Option
	if *prefix != "" {
		popts = append(popts, natsjs.WithSubjectPrefix(*prefix))
	}
	if *stream != "" {
		if *subjects != "" {
			if _, err := natsjs.EnsureStream(ctx, js, *stream, strings.Split(*subjects, ","), 0); err != nil {
				return fail(stderr, "relay", err)
			}
		}
		popts = append(popts, natsjs.WithStream(*stream))
	}
	pub, err := natsjs.New(js, popts...)
	if err != nil {
		return fail(stderr, "relay", err)
	}
	ropts := []outbox.RelayOption{outbox.WithBatchSize(*batch)}
	if *verbose {
		ropts = append(ropts, outbox.WithLogger(slog.New(slog.NewTextHandler(stderr, nil))))
	}
	r, err := outbox.NewRelay(db, ob, pub, ropts...)
	if err != nil {
		return fail(stderr, "relay", err)
	}
	fmt.Fprintf(stdout, "opledger relay: %s table %s → %s\n", t.display, ob.Table(), u.Redacted())
	if *drainOnly {
		err = r.Drain(ctx)
	} else {
		err = r.Run(ctx)
		if errors.Is(err, context.Canceled) {
			err = nil // interrupted: a normal stop
		}
	}
	st, ps := r.Stats(), pub.Stats()
	fmt.Fprintf(stdout, "published %d (stored %d, repeats dropped by JetStream %d), %d failed batches, %d set aside as undeliverable\n",
		st.Published, ps.Stored, ps.Duplicates, st.Failures, st.Dead)
	if errors.Is(err, outbox.ErrDead) { // delivered all it could: the rest waits for an operator
		fmt.Fprintf(stderr, "opledger relay: %s; list them with opledger relay --dead\n", oneLine(err))
		return 1
	}
	if err != nil {
		return fail(stderr, "relay", err)
	}
	return 0
}
