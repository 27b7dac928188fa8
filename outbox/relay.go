package outbox

import (
	"context"
	"database/sql"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/metric"

	"github.com/opledger/opledger/internal/options"
	"github.com/opledger/opledger/internal/outboxkit"
	"github.com/opledger/opledger/internal/telemetry"
	"github.com/opledger/opledger/internal/wait"
)

// Envelope is a committed message as the relay hands it to a Publisher.
type Envelope struct {
	Message
	// ID is the message's id (see MessageID): a publisher to a
	// deduplicating broker sends it as the broker's message id, so that
	// the relay's re-sends are dropped.
	ID string
	// Seq is the message's position in the outbox: increasing in the
	// order messages were enqueued.
	Seq int64
	// EnqueuedAt is when Enqueue wrote the message.
	EnqueuedAt time.Time
	// Attempts counts the relay's earlier failed publishes of the message
	// (0 on its first).
	Attempts int
}

// Publisher delivers messages for the relay. Publish returns nil only once
// the broker has accepted (stored) e. An error that matches
// ErrUndeliverable says the broker will never accept e as it stands (the
// publisher decides which of its broker's errors mean that): the relay
// sets the message aside (dead) and holds back only the later messages of
// its partition key. Any other error leaves the message in the outbox,
// and the relay publishes it again later, after a backoff; so a Publisher
// sees a message at least once and, after a failure or a relay that died,
// more than once. Publish must be safe for concurrent use when several
// relays share it. A Publisher that knows its limits also implements
// [Checker].
type Publisher interface {
	Publish(ctx context.Context, e Envelope) error
}

// RelayOption configures a Relay; the With functions build them. Giving
// the same option twice is an error.
type RelayOption struct{ o options.Option[relayConfig] }

type relayConfig struct {
	batch          int
	poll           time.Duration
	base, max      time.Duration
	publishTimeout time.Duration
	log            *slog.Logger
	mp             metric.MeterProvider
}

func relayOption(name string, f func(*relayConfig) error) RelayOption {
	return RelayOption{options.New(name, f)}
}

// WithBatchSize bounds how many messages one batch reads, locks and
// publishes (default 100, at most 1000).
func WithBatchSize(n int) RelayOption {
	return relayOption("WithBatchSize", func(c *relayConfig) error {
		if n < 1 || n > outboxkit.MaxBatchSize {
			return fmt.Errorf("batch size %d outside [1, %d]", n, outboxkit.MaxBatchSize)
		}
		c.batch = n
		return nil
	})
}

// WithPollInterval sets how long Run waits after a batch that published
// nothing before it looks again (default 200ms).
func WithPollInterval(d time.Duration) RelayOption {
	return relayOption("WithPollInterval", func(c *relayConfig) error {
		if d <= 0 {
			return errors.New("poll interval must be positive")
		}
		c.poll = d
		return nil
	})
}

// WithBackoff sets the wait after a failed batch (the publisher or the
// database failed): base, doubled for each failure in a row up to max,
// jittered to between half and all of it (defaults 100ms and 10s). A
// batch that publishes resets it.
func WithBackoff(base, max time.Duration) RelayOption {
	return relayOption("WithBackoff", func(c *relayConfig) error {
		if base <= 0 || max < base {
			return errors.New("backoff needs 0 < base <= max")
		}
		c.base, c.max = base, max
		return nil
	})
}

// WithPublishTimeout bounds each Publish call (default 10s): a publisher
// that hangs must not hold a batch's locks for ever.
func WithPublishTimeout(d time.Duration) RelayOption {
	return relayOption("WithPublishTimeout", func(c *relayConfig) error {
		if d <= 0 {
			return errors.New("publish timeout must be positive")
		}
		c.publishTimeout = d
		return nil
	})
}

// WithLogger makes the relay (Run and Drain) report failed batches and
// their backoff (a warning, "outbox relay: batch failed") and each message
// it sets aside as undeliverable (an error, "outbox relay: message set
// aside as undeliverable", with the message's seq, id, topic, name,
// attempts and the publisher's error); never a payload or a partition key.
// Nil, the default, logs nothing.
func WithLogger(l *slog.Logger) RelayOption {
	return relayOption("WithLogger", func(c *relayConfig) error {
		c.log = l
		return nil
	})
}

// WithMeterProvider sets where the relay's metrics go (default: the
// global meter provider, a no-op until an SDK is installed):
//
//   - opledger.outbox.published, a counter of messages the publisher
//     acknowledged;
//   - opledger.outbox.failed_batches, a counter of batches that stopped
//     at a failure (the publisher's or the database's), which the relay
//     retries after a backoff;
//   - opledger.outbox.dead, a counter of messages set aside as
//     undeliverable, each holding back the rest of its partition key
//     until an operator retries or discards it.
//
// Every measurement carries db.system.name and db.collection.name (the
// outbox table). Never a topic, a key or a payload.
func WithMeterProvider(mp metric.MeterProvider) RelayOption {
	return relayOption("WithMeterProvider", func(c *relayConfig) error {
		if mp == nil {
			return errors.New("meter provider must not be nil")
		}
		c.mp = mp
		return nil
	})
}

// RelayStats are the counters of a Relay.
type RelayStats struct {
	// Batches counts batches read, empty ones included.
	Batches int64
	// Published counts messages the publisher accepted and the relay
	// deleted (or tried to: a failed delete publishes them again).
	Published int64
	// Held counts messages a batch read but left for later because an
	// earlier message of their key was held by another relay.
	Held int64
	// Failures counts failed batches (publisher or database).
	Failures int64
	// Dead counts messages the relay set aside as undeliverable.
	Dead int64
}

// Relay publishes committed messages from the outbox, in order per
// partition key, at least once, and deletes each once the publisher
// acknowledged it. Several relays, in one process or many, may share the
// outbox on PostgreSQL, MySQL 8 and MariaDB 10.6 and later (each batch
// takes its rows with FOR UPDATE SKIP LOCKED, and sharing never reorders a
// key); run one relay per SQLite database. A relay that dies mid-batch
// rolls back, and the next batch publishes its messages again.
//
// A message the publisher refuses with an error matching ErrUndeliverable
// is set aside in the outbox table as dead, logged and counted
// (opledger.outbox.dead); only its own partition key waits behind it,
// until Outbox.RetryDead or Outbox.DiscardDead. Any other failure stops
// the batch and backs off (WithBackoff). docs/beyond-the-transaction.md
// ("The relay", "Dead messages") has the details.
type Relay struct {
	db  *sql.DB
	ob  *Outbox
	pub Publisher
	cfg relayConfig
	obs *relayObserver

	batches, published, held, failures, dead atomic.Int64
}

// NewRelay returns a relay that publishes ob's messages from db to pub.
// Configuration errors match ErrInvalidConfig (and ErrInvalid).
func NewRelay(db *sql.DB, ob *Outbox, pub Publisher, opts ...RelayOption) (*Relay, error) {
	if db == nil || ob == nil || pub == nil {
		return nil, fmt.Errorf("%w: database, outbox and publisher must not be nil", errConfig)
	}
	cfg := relayConfig{batch: outboxkit.DefaultBatchSize, poll: outboxkit.DefaultPollInterval, base: outboxkit.DefaultBackoffBase,
		max: outboxkit.DefaultBackoffMax, publishTimeout: outboxkit.DefaultPublishTimeout}
	if err := options.Apply(&cfg, opts, func(o RelayOption) options.Option[relayConfig] { return o.o }); err != nil {
		return nil, fmt.Errorf("%w: %w", errConfig, err)
	}
	cfg.log = telemetry.Logger(cfg.log)
	return &Relay{db: db, ob: ob, pub: pub, cfg: cfg, obs: newRelayObserver(ob, cfg.mp)}, nil
}

// Stats returns a snapshot of the relay's counters.
func (r *Relay) Stats() RelayStats {
	return RelayStats{Batches: r.batches.Load(), Published: r.published.Load(), Held: r.held.Load(), Failures: r.failures.Load(),
		Dead: r.dead.Load()}
}

// Run publishes batches until ctx ends, waiting the poll interval after a
// batch that did nothing and backing off after a failed one. It returns
// ctx's error.
func (r *Relay) Run(ctx context.Context) error {
	failed := 0
	for {
		b, err := r.once(ctx)
		if cerr := ctx.Err(); cerr != nil {
			return cerr
		}
		var d time.Duration
		switch {
		case err != nil:
			failed++
			d = r.failedBatch(ctx, b, failed, err)
		case b.published+b.dead == 0:
			failed = 0
			d = r.cfg.poll
		default:
			failed = 0
			continue
		}
		if err := wait.Sleep(ctx, d); err != nil {
			return err
		}
	}
}

// Drain publishes batches until one finds nothing it may publish,
// backing off after a failed batch (and logging it, as Run does), and
// returns then: nil when the outbox is empty (or what is left is held by
// another relay), an error matching ErrDead, with the counts, when dead messages are
// left, with the messages of their keys waiting behind them, or ctx's
// error. It is for a command that relays what is there and exits, and for
// tests.
func (r *Relay) Drain(ctx context.Context) error {
	failed := 0
	for {
		b, err := r.once(ctx)
		if cerr := ctx.Err(); cerr != nil {
			return cerr
		}
		var d time.Duration
		switch {
		case err != nil:
			failed++
			d = r.failedBatch(ctx, b, failed, err)
		case b.read == 0:
			return r.leftOver(ctx)
		case b.published+b.dead == 0:
			failed, d = 0, r.cfg.poll // held by other relays
		default:
			failed = 0
		}
		if err := wait.Sleep(ctx, d); err != nil {
			return err
		}
	}
}

// failedBatch logs a failed batch and returns the backoff before the next.
func (r *Relay) failedBatch(ctx context.Context, b batch, failed int, err error) time.Duration {
	d := r.backoff(failed)
	r.cfg.log.LogAttrs(ctx, slog.LevelWarn, "outbox relay: batch failed", slog.String("table", r.ob.table),
		slog.Int("published", b.published), slog.Int("failures_in_a_row", failed), slog.Duration("backoff", d), slog.String("error", err.Error()))
	return d
}

// leftOver is Drain's answer once a batch found nothing to publish: a
// error matching ErrDead when dead messages are left.
func (r *Relay) leftOver(ctx context.Context) error {
	var all, dead int64
	if err := r.db.QueryRowContext(ctx, r.ob.q.Count).Scan(&all, &dead); err != nil {
		return fmt.Errorf("outbox relay: count: %w", err)
	}
	if dead == 0 {
		return nil
	}
	return &deadError{Dead: dead, Waiting: all - dead}
}

func (r *Relay) backoff(failed int) time.Duration {
	return wait.Backoff(r.cfg.base, r.cfg.max, failed)
}

type row struct {
	Envelope
	raw []byte
}

// failure is a message whose publish failed, and why.
type failure struct {
	row
	err error
}

// batch is what one batch did.
type batch struct {
	read      int       // messages read
	published int       // acknowledged (and deleted, unless the batch failed after)
	dead      int       // set aside
	done      []row     // acknowledged, to delete
	deadRows  []failure // refused as undeliverable, to set aside
	failed    *failure  // the failure that stopped the batch, if any
}

// runOnce reads one batch, publishes what it may in order, deletes what
// the publisher acknowledged and sets aside what it refused as
// undeliverable. It returns how many messages were published; an error
// means the batch stopped at a failure (the messages published before it
// are deleted, or published again later if even that failed).
func (r *Relay) runOnce(ctx context.Context) (int, error) {
	b, err := r.once(ctx)
	return b.published, err
}

// once is one batch.
func (r *Relay) once(ctx context.Context) (batch, error) {
	r.batches.Add(1)
	var (
		b   batch
		err error
	)
	if r.ob.q.Locking {
		b, err = r.lockedBatch(ctx)
	} else {
		b, err = r.plainBatch(ctx)
	}
	r.published.Add(int64(b.published))
	r.obs.published.Add(ctx, int64(b.published), r.obs.attrs)
	if err != nil {
		r.failures.Add(1)
		r.obs.failedBatches.Add(ctx, 1, r.obs.attrs)
	}
	return b, err
}

// lockedBatch is one batch on a dialect whose Batch locks rows.
func (r *Relay) lockedBatch(ctx context.Context) (batch, error) {
	tx, err := r.db.BeginTx(ctx, &sql.TxOptions{Isolation: sql.LevelReadCommitted})
	if err != nil {
		return batch{}, fmt.Errorf("outbox relay: begin: %w", err)
	}
	defer tx.Rollback()
	rows, err := r.read(ctx, tx)
	if err != nil || len(rows) == 0 {
		return batch{}, err
	}
	ready, err := r.firstInKey(ctx, tx, rows)
	if err != nil {
		return batch{read: len(rows)}, err
	}
	r.held.Add(int64(len(rows) - len(ready)))
	b := r.publish(ctx, ready)
	b.read = len(rows)
	return r.finish(ctx, tx, b)
}

// plainBatch is one batch on a dialect without row locks (one relay per
// database): read, publish, then write what happened in a short
// transaction.
func (r *Relay) plainBatch(ctx context.Context) (batch, error) {
	rows, err := r.read(ctx, r.db)
	if err != nil || len(rows) == 0 {
		return batch{}, err
	}
	b := r.publish(ctx, rows)
	b.read = len(rows)
	tx, err := r.db.BeginTx(ctx, nil)
	if err != nil {
		return batch{read: b.read}, fmt.Errorf("outbox relay: begin: %w", err)
	}
	defer tx.Rollback()
	return r.finish(ctx, tx, b)
}

// finish writes what the batch did in tx and commits it: it deletes the
// acknowledged messages, sets aside the undeliverable ones and counts the
// failed attempt of the message that stopped the batch. It returns that
// message's error when that is all that went wrong. Dead messages are
// reported once the commit made them so.
func (r *Relay) finish(ctx context.Context, tx *sql.Tx, b batch) (batch, error) {
	nothing := batch{read: b.read, published: len(b.done)} // a failed delete publishes them again
	for _, m := range b.done {
		if _, err := tx.ExecContext(ctx, r.ob.q.Delete, m.Seq); err != nil {
			return nothing, fmt.Errorf("outbox relay: delete: %w", err)
		}
	}
	deadAt := r.ob.now().UnixMicro()
	for _, f := range b.deadRows {
		if _, err := tx.ExecContext(ctx, r.ob.q.Fail, reasonOf(f.err), deadAt, f.Seq); err != nil {
			return nothing, fmt.Errorf("outbox relay: set aside: %w", err)
		}
	}
	if f := b.failed; f != nil {
		if _, err := tx.ExecContext(ctx, r.ob.q.Fail, reasonOf(f.err), nil, f.Seq); err != nil {
			return nothing, fmt.Errorf("outbox relay: count the failed attempt: %w", err)
		}
	}
	if err := tx.Commit(); err != nil {
		return nothing, fmt.Errorf("outbox relay: commit: %w", err)
	}
	b.published, b.dead = len(b.done), len(b.deadRows)
	r.dead.Add(int64(b.dead))
	for _, f := range b.deadRows {
		r.obs.dead.Add(ctx, 1, r.obs.attrs)
		r.cfg.log.LogAttrs(ctx, slog.LevelError, "outbox relay: message set aside as undeliverable", slog.String("table", r.ob.table),
			slog.Int64("seq", f.Seq), slog.String("id", f.ID), slog.String("topic", f.Topic), slog.String("name", f.Name),
			slog.Int("attempts", f.Attempts+1), slog.String("error", f.err.Error()))
	}
	if f := b.failed; f != nil {
		return b, fmt.Errorf("outbox relay: publish %s (seq %d): %w", f.ID, f.Seq, f.err)
	}
	return b, nil
}

type querier interface {
	QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error)
}

func (r *Relay) read(ctx context.Context, q querier) ([]row, error) {
	rs, err := q.QueryContext(ctx, r.ob.q.Batch, r.cfg.batch)
	if err != nil {
		return nil, fmt.Errorf("outbox relay: read: %w", err)
	}
	defer rs.Close()
	var out []row
	for rs.Next() {
		var m row
		var at int64
		if err := rs.Scan(&m.Seq, &m.raw, &m.Key, &m.Topic, &m.Name, &m.Payload, &at, &m.Attempts); err != nil {
			return nil, fmt.Errorf("outbox relay: read: %w", err)
		}
		m.ID = hex.EncodeToString(m.raw)
		m.EnqueuedAt = time.UnixMicro(at).UTC()
		out = append(out, m)
	}
	if err := rs.Err(); err != nil {
		return nil, fmt.Errorf("outbox relay: read: %w", err)
	}
	return out, nil
}

// firstInKey returns the rows of the batch that may be published now: for
// each key, the batch's rows up to the first message of that key (up to
// the batch's last seq) that the batch does not hold, because another
// relay holds it or it committed after the batch was read.
func (r *Relay) firstInKey(ctx context.Context, tx *sql.Tx, rows []row) ([]row, error) {
	ours := make(map[int64]int, len(rows))
	for i, m := range rows {
		ours[m.Seq] = i
	}
	rs, err := tx.QueryContext(ctx, r.ob.q.Upto, rows[len(rows)-1].Seq)
	if err != nil {
		return nil, fmt.Errorf("outbox relay: read keys: %w", err)
	}
	defer rs.Close()
	blocked := map[string]bool{}
	ok := make([]bool, len(rows))
	for rs.Next() {
		var (
			seq int64
			key string
		)
		if err := rs.Scan(&seq, &key); err != nil {
			return nil, fmt.Errorf("outbox relay: read keys: %w", err)
		}
		if blocked[key] {
			continue
		}
		i, mine := ours[seq]
		if !mine {
			blocked[key] = true
			continue
		}
		ok[i] = true
	}
	if err := rs.Err(); err != nil {
		return nil, fmt.Errorf("outbox relay: read keys: %w", err)
	}
	var out []row
	for i, m := range rows {
		if ok[i] {
			out = append(out, m)
		}
	}
	return out, nil
}

// publish hands rows to the publisher in order. A message refused as
// undeliverable is set aside and the batch skips the later messages of
// its key; any other failure stops the batch, so that no key's later
// message goes out before an earlier one.
func (r *Relay) publish(ctx context.Context, rows []row) batch {
	var (
		b       batch
		blocked map[string]bool
	)
	for _, m := range rows {
		if blocked[m.Key] {
			continue
		}
		pctx, cancel := context.WithTimeout(ctx, r.cfg.publishTimeout)
		err := r.pub.Publish(pctx, m.Envelope)
		cancel()
		switch {
		case err == nil:
			b.done = append(b.done, m)
		case errors.Is(err, ErrUndeliverable) && ctx.Err() == nil:
			if blocked == nil {
				blocked = map[string]bool{}
			}
			blocked[m.Key] = true
			b.deadRows = append(b.deadRows, failure{m, err})
		default:
			b.failed = &failure{m, err}
			return b
		}
	}
	return b
}
