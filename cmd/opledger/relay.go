package main

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/opledger/opledger/internal/outboxkit"
	"github.com/opledger/opledger/internal/wait"
	"github.com/opledger/opledger/ledger"
	"github.com/opledger/opledger/outbox"
	"github.com/opledger/opledger/outbox/natsjs"
)

func init() {
	extraCommands["relay"] = command{"publish the outbox's committed messages to NATS JetStream (at least once, in order per key)", runRelay}
}

// relayUsage is what opledger relay --help prints before its flags.
const relayUsage = `usage: opledger relay --to nats://host:port [--dsn DSN] [--stream NAME [--subjects A,B]] [--drain] [-v]
       opledger relay --dead | --retry-dead ID | --discard-dead ID [--dsn DSN] [--table NAME]

Publishes the outbox's committed messages to NATS JetStream, at least once and
in order per partition key, until interrupted (SIGINT or SIGTERM); with --drain it exits
once the outbox is empty (0) or holds only dead messages and those behind them
(1). Failed batches are retried after a backoff (100 ms doubling to 10 s,
jittered); -v logs them.

A broker that cannot be reached at start (connection refused, host unreachable,
timed out) is waited for, with or without --drain: one line on stderr per
attempt ("opledger relay: waiting for broker", with the servers, the attempt,
the backoff and the client's error; never a password or token), the next
attempt after the same backoff. A server that refuses the relay (a wrong
password or token, TLS wanted on one side only, a certificate that fails
verification) ends it at once. Interrupted while it waits, the relay exits as
an interrupted relay does: 0 with its count, or with --drain 2.

Exit codes: 0 interrupted, or --drain emptied the outbox; 1 dead messages are
left (--drain); 2 a usage or set-up error, or --drain interrupted.
`

func runRelay(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := newFlags("relay", stderr)
	fs.Usage = func() {
		io.WriteString(fs.Output(), relayUsage+"\nflags:\n")
		fs.PrintDefaults()
	}
	dsn := fs.String("dsn", "", "database (default $OPLEDGER_DSN, else the SQLite file opledger.db)")
	table := fs.String("table", ledger.DefaultTable, "ledger table name (the outbox is <table>_outbox)")
	to := fs.String("to", "", "where to publish: nats://host:port (JetStream), or a comma-separated list of servers; nats://user:password@host or nats://TOKEN@host for auth (never printed); waited for while none can be reached")
	stream := fs.String("stream", "", "JetStream stream to expect (and create when missing, with --subjects)")
	subjects := fs.String("subjects", "", "comma-separated subjects of a stream to create (with --stream)")
	prefix := fs.String("subject-prefix", "", "put before every topic to make the NATS subject")
	batch := fs.Int("batch", outboxkit.DefaultBatchSize, "messages per batch (1 to 1000)")
	drainOnly := fs.Bool("drain", false, "exit once the outbox is empty instead of running until interrupted (a broker down at start is waited for first)")
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
	fmt.Fprintf(stdout, "opledger relay: %s table %s → %s\n", t.display, outbox.TableFor(*table), servers.display)
	log := scrubbingLogger(stderr, t, servers)
	nc, err := connectBroker(ctx, *to, servers, log)
	if err != nil {
		if ctx.Err() != nil { // interrupted while waiting for the broker
			return relayExit(stdout, stderr, ctx.Err(), *drainOnly, outbox.RelayStats{}, natsjs.Stats{}, t, servers)
		}
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
			if _, err := ensureStream(ctx, js, *stream, strings.Split(*subjects, ","), 0); err != nil {
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
		ropts = append(ropts, outbox.WithLogger(log))
	}
	r, err := outbox.NewRelay(db, ob, pub, ropts...)
	if err != nil {
		return fail(stderr, "relay", err)
	}
	if *drainOnly {
		err = r.Drain(ctx)
	} else {
		err = r.Run(ctx)
	}
	return relayExit(stdout, stderr, err, *drainOnly, r.Stats(), pub.Stats(), t, servers)
}

// relayExit prints what the relay did and returns its exit code, given
// how it ended (err: Run's or Drain's, or the context's while it waited
// for its broker): an interrupted relay stopped normally (0); --drain
// ends 0 with the outbox empty, 1 with dead messages left, 2 on an
// error or an interrupt.
func relayExit(stdout, stderr io.Writer, err error, drain bool, st outbox.RelayStats, ps natsjs.Stats, t target, servers natsServers) int {
	if !drain && errors.Is(err, context.Canceled) {
		err = nil // interrupted: a normal stop
	}
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

// connectBroker connects to the servers of --to (to, as nats.Connect
// reads it). While none can be reached (connection refused, host
// unreachable, timed out, closed during the handshake) it waits and
// tries again: one WARN line per failed attempt on log, the same format
// as the relay's own lines, then the relay's backoff
// (internal/wait.Backoff with outboxkit.DefaultBackoffBase and
// DefaultBackoffMax: the wait after failed batches while
// a broker is down later). A server that refuses the relay (see
// brokerRefused) ends the wait with its error, as does ctx.
func connectBroker(ctx context.Context, to string, servers natsServers, log *slog.Logger) (*nats.Conn, error) {
	for attempt := 1; ; attempt++ {
		nc, err := dialBroker(ctx, to)
		if err == nil || ctx.Err() != nil || brokerRefused(err) {
			return nc, err
		}
		d := wait.Backoff(outboxkit.DefaultBackoffBase, outboxkit.DefaultBackoffMax, attempt)
		log.LogAttrs(ctx, slog.LevelWarn, "opledger relay: waiting for broker", slog.String("to", servers.display),
			slog.Int("attempt", attempt), slog.Duration("backoff", d), slog.String("error", err.Error()))
		if err := wait.Sleep(ctx, d); err != nil {
			return nil, err
		}
	}
}

// dialBroker is one nats.Connect to the servers of to, each tried once
// (for up to nats.go's connect timeout, 2 s), given up when ctx ends: a
// connection it makes after that is closed. The connection it returns
// reconnects for ever, every 500 ms, while the relay's batches back off.
func dialBroker(ctx context.Context, to string) (*nats.Conn, error) {
	type dialed struct {
		nc  *nats.Conn
		err error
	}
	done := make(chan dialed, 1)
	go func() {
		nc, err := nats.Connect(to, nats.MaxReconnects(-1), nats.ReconnectWait(500*time.Millisecond), nats.Name("opledger relay"))
		done <- dialed{nc, err}
	}()
	select {
	case d := <-done:
		return d.nc, d.err
	case <-ctx.Done():
		go func() {
			if d := <-done; d.nc != nil {
				d.nc.Close()
			}
		}()
		return nil, ctx.Err()
	}
}

// brokerRefused reports whether err, nats.Connect's, says that a server
// answered and refused the relay, which no wait would change: an
// authorization violation (a wrong password or token, a token where a
// user is wanted), a credential expired or revoked, TLS wanted by one
// side only, a certificate that fails verification. relay exits on these
// (2) instead of waiting for its broker.
func brokerRefused(err error) bool {
	for _, refusal := range []error{nats.ErrAuthorization, nats.ErrAuthExpired, nats.ErrAuthRevoked, nats.ErrAccountAuthExpired,
		nats.ErrSecureConnRequired, nats.ErrSecureConnWanted} {
		if errors.Is(err, refusal) {
			return true
		}
	}
	var cert *tls.CertificateVerificationError
	return errors.As(err, &cert)
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
