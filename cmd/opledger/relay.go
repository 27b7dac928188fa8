package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
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
	to := fs.String("to", "", "where to publish: nats://host:port (JetStream), or a comma-separated list of servers; nats://user:password@host or nats://TOKEN@host for auth (never printed)")
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
	if code, stop := parseFlags(fs, args, stdout); stop {
		return code
	}
	if dead.any() {
		return runRelayDead(ctx, fs, dead, dsnFrom(*dsn), *table, stdout, stderr)
	}
	switch {
	case fs.NArg() > 0:
		return fail(stderr, "relay", unexpectedArg(fs))
	case *to == "":
		return fail(stderr, "relay", errors.New("--to nats://host:port is required"))
	case *subjects != "" && *stream == "":
		return fail(stderr, "relay", errors.New("--subjects needs --stream"))
	}
	servers, err := parseNATSServers(*to)
	if err != nil {
		return fail(stderr, "relay", err)
	}
	db, t, err := openExisting(ctx, dsnFrom(*dsn))
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
		return fail(stderr, "relay", fmt.Errorf("connect %s: %s", servers.display, servers.scrub(err.Error())))
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return fail(stderr, "relay", errors.New(servers.scrub(err.Error())))
	}
	var popts []natsjs.Option
	if *prefix != "" {
		popts = append(popts, natsjs.WithSubjectPrefix(*prefix))
	}
	if *stream != "" {
		if *subjects != "" {
			if _, err := natsjs.EnsureStream(ctx, js, *stream, strings.Split(*subjects, ","), 0); err != nil {
				return fail(stderr, "relay", errors.New(servers.scrub(err.Error())))
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
		ropts = append(ropts, outbox.WithLogger(scrubbingLogger(stderr, t, servers)))
	}
	r, err := outbox.NewRelay(db, ob, pub, ropts...)
	if err != nil {
		return fail(stderr, "relay", err)
	}
	fmt.Fprintf(stdout, "opledger relay: %s table %s → %s\n", t.display, ob.Table(), servers.display)
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
		return fail(stderr, "relay", errors.New(servers.scrub(t.scrub(err.Error()))))
	}
	return 0
}

// scrubbingLogger is relay -v's logger: text to w, every string
// attribute (the outbox relay's "error") scrubbed of the database's and
// the servers' credentials.
func scrubbingLogger(w io.Writer, t target, servers natsServers) *slog.Logger {
	return slog.New(slog.NewTextHandler(w, &slog.HandlerOptions{
		ReplaceAttr: func(_ []string, a slog.Attr) slog.Attr {
			switch a.Value.Kind() {
			case slog.KindString:
				a.Value = slog.StringValue(servers.scrub(t.scrub(a.Value.String())))
			case slog.KindAny:
				if err, ok := a.Value.Any().(error); ok {
					a.Value = slog.StringValue(servers.scrub(t.scrub(err.Error())))
				}
			}
			return a
		},
	}))
}
