package outbox

import (
	"context"
	"database/sql"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"sync/atomic"
	"time"

	"github.com/opledger/opledger/internal/options"
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
}

// Publisher delivers messages for the relay. Publish returns nil only once
// the broker has accepted (stored) e; any error leaves the message in the
// outbox, and the relay publishes it again later, so a Publisher sees a
// message at least once and, after a failure or a relay that died, more
// than once. Publish must be safe for concurrent use when several relays
// share it.
type Publisher interface {
	Publish(ctx context.Context, e Envelope) error
}

// Defaults of the relay's options.
const (
	DefaultBatchSize      = 100
	MaxBatchSize          = 1000
	DefaultPollInterval   = 200 * time.Millisecond
	DefaultBackoffBase    = 100 * time.Millisecond
	DefaultBackoffMax     = 10 * time.Second
	DefaultPublishTimeout = 10 * time.Second
)

// RelayOption configures a Relay; the With functions build them. Giving
// the same option twice is an error.
type RelayOption struct{ o options.Option[relayConfig] }

type relayConfig struct {
	batch          int
	poll           time.Duration
	base, max      time.Duration
	publishTimeout time.Duration
	log            *slog.Logger
}

func relayOption(name string, f func(*relayConfig) error) RelayOption {
	return RelayOption{options.New(name, f)}
}

// WithBatchSize bounds how many messages one batch reads, locks and
// publishes (default 100, at most 1000).
func WithBatchSize(n int) RelayOption {
	return relayOption("WithBatchSize", func(c *relayConfig) error {
		if n < 1 || n > MaxBatchSize {
			return fmt.Errorf("batch size %d outside [1, %d]", n, MaxBatchSize)
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

// WithLogger makes the relay report failed batches and their backoff
// (never a payload). Nil, the default, logs nothing.
func WithLogger(l *slog.Logger) RelayOption {
	return relayOption("WithLogger", func(c *relayConfig) error {
		c.log = l
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
}

// Relay publishes committed messages from the outbox, in order per
// partition key, at least once, and deletes each once the publisher
// acknowledged it.
//
// On a dialect whose batch locks rows (PostgreSQL, MySQL 8, MariaDB 10.6
// and later: FOR UPDATE SKIP LOCKED) several relays, in one process or
// many, share the outbox: each batch is one READ COMMITTED transaction
// that locks its rows while it publishes them and deletes them before it
// commits; a message whose key has an earlier message held by another
// relay waits for a later batch, so a key's messages are never published
// out of order. A relay that dies mid-batch (its connection closes) rolls
// back: its messages are published again by the next batch, and a
// deduplicating broker (NATS JetStream's Nats-Msg-Id) drops the repeats.
// On SQLite (one writer at a time) the relay reads without a transaction
// and deletes in a short one after publishing, so that handlers never
// wait for a publish; run one relay per SQLite database.
type Relay struct {
	db  *sql.DB
	ob  *Outbox
	pub Publisher
	cfg relayConfig

	batches, published, held, failures atomic.Int64
}

// NewRelay returns a relay that publishes ob's messages from db to pub.
// Configuration errors match ErrInvalid.
func NewRelay(db *sql.DB, ob *Outbox, pub Publisher, opts ...RelayOption) (*Relay, error) {
	if db == nil || ob == nil || pub == nil {
		return nil, fmt.Errorf("%w: database, outbox and publisher must not be nil", ErrInvalid)
	}
	cfg := relayConfig{batch: DefaultBatchSize, poll: DefaultPollInterval, base: DefaultBackoffBase,
		max: DefaultBackoffMax, publishTimeout: DefaultPublishTimeout}
	if err := options.Apply(&cfg, opts, func(o RelayOption) options.Option[relayConfig] { return o.o }); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	if cfg.log == nil {
		cfg.log = slog.New(slog.DiscardHandler)
	}
	return &Relay{db: db, ob: ob, pub: pub, cfg: cfg}, nil
}

// Stats returns a snapshot of the relay's counters.
func (r *Relay) Stats() RelayStats {
	return RelayStats{Batches: r.batches.Load(), Published: r.published.Load(), Held: r.held.Load(), Failures: r.failures.Load()}
}

// Run publishes batches until ctx ends, waiting the poll interval after a
// batch that published nothing and backing off after a failed one. It
// returns ctx's error.
func (r *Relay) Run(ctx context.Context) error {
	failed := 0
	for {
		n, err := r.RunOnce(ctx)
		if cerr := ctx.Err(); cerr != nil {
			return cerr
		}
		var d time.Duration
		switch {
		case err != nil:
			failed++
			d = r.backoff(failed)
			r.cfg.log.LogAttrs(ctx, slog.LevelWarn, "outbox relay: batch failed", slog.String("table", r.ob.table),
				slog.Int("published", n), slog.Int("failures_in_a_row", failed), slog.Duration("backoff", d), slog.String("error", err.Error()))
		case n == 0:
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

// Drain publishes batches until one finds the outbox empty, backing off
// after a failed batch, and returns nil then, or ctx's error: for a
// command that relays what is there and exits, and for tests.
func (r *Relay) Drain(ctx context.Context) error {
	failed := 0
	for {
		read, published, err := r.once(ctx)
		if cerr := ctx.Err(); cerr != nil {
			return cerr
		}
		var d time.Duration
		switch {
		case err != nil:
			failed++
			d = r.backoff(failed)
		case read == 0:
			return nil
		case published == 0:
			failed, d = 0, r.cfg.poll // held by other relays
		default:
			failed = 0
		}
		if err := wait.Sleep(ctx, d); err != nil {
			return err
		}
	}
}

func (r *Relay) backoff(failed int) time.Duration {
	d := r.cfg.base
	for i := 1; i < failed && d < r.cfg.max; i++ {
		d *= 2
	}
	d = min(d, r.cfg.max)
	half := d / 2
	return half + time.Duration(rand.Float64()*float64(d-half))
}

type row struct {
	Envelope
	raw []byte
}

// RunOnce reads one batch, publishes what it may in order and deletes
// what the publisher acknowledged. It returns how many messages were
// published; an error means the batch stopped at a failure (the messages
// published before it are deleted, or published again later if even
// that failed).
func (r *Relay) RunOnce(ctx context.Context) (int, error) {
	_, n, err := r.once(ctx)
	return n, err
}

// once is one batch: how many messages it read and how many it published.
func (r *Relay) once(ctx context.Context) (read, published int, err error) {
	r.batches.Add(1)
	if r.ob.q.Locking {
		read, published, err = r.lockedBatch(ctx)
	} else {
		read, published, err = r.plainBatch(ctx)
	}
	r.published.Add(int64(published))
	if err != nil {
		r.failures.Add(1)
	}
	return read, published, err
}

// lockedBatch is one batch on a dialect whose Batch locks rows.
func (r *Relay) lockedBatch(ctx context.Context) (int, int, error) {
	tx, err := r.db.BeginTx(ctx, &sql.TxOptions{Isolation: sql.LevelReadCommitted})
	if err != nil {
		return 0, 0, fmt.Errorf("outbox relay: begin: %w", err)
	}
	defer tx.Rollback()
	rows, err := r.read(ctx, tx)
	if err != nil || len(rows) == 0 {
		return 0, 0, err
	}
	ready, err := r.firstInKey(ctx, tx, rows)
	if err != nil {
		return len(rows), 0, err
	}
	r.held.Add(int64(len(rows) - len(ready)))
	done, perr := r.publish(ctx, ready)
	return len(rows), len(done), r.delete(ctx, tx, done, perr)
}

// plainBatch is one batch on a dialect without row locks (one relay per
// database): read, publish, then delete in a short transaction.
func (r *Relay) plainBatch(ctx context.Context) (int, int, error) {
	rows, err := r.read(ctx, r.db)
	if err != nil || len(rows) == 0 {
		return 0, 0, err
	}
	done, perr := r.publish(ctx, rows)
	if len(done) == 0 {
		return len(rows), 0, perr
	}
	tx, err := r.db.BeginTx(ctx, nil)
	if err != nil {
		return len(rows), 0, fmt.Errorf("outbox relay: begin: %w", err)
	}
	defer tx.Rollback()
	return len(rows), len(done), r.delete(ctx, tx, done, perr)
}

// delete removes the published rows in tx and commits it; it returns the
// publish error perr when that is all that went wrong.
func (r *Relay) delete(ctx context.Context, tx *sql.Tx, done []row, perr error) error {
	for _, m := range done {
		if _, err := tx.ExecContext(ctx, r.ob.q.Delete, m.Seq); err != nil {
			return fmt.Errorf("outbox relay: delete: %w", err)
		}
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("outbox relay: commit: %w", err)
	}
	return perr
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
		if err := rs.Scan(&m.Seq, &m.raw, &m.Key, &m.Topic, &m.Name, &m.Payload, &at); err != nil {
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

// publish hands rows to the publisher in order and stops at the first
// failure, so that no key's later message goes out before an earlier one.
func (r *Relay) publish(ctx context.Context, rows []row) ([]row, error) {
	for i, m := range rows {
		pctx, cancel := context.WithTimeout(ctx, r.cfg.publishTimeout)
		err := r.pub.Publish(pctx, m.Envelope)
		cancel()
		if err != nil {
			return rows[:i], fmt.Errorf("outbox relay: publish %s (seq %d): %w", m.ID, m.Seq, err)
		}
	}
	return rows, nil
}
