package outbox

import (
	"context"
	"database/sql"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/opledger/opledger/dialects"
	"github.com/opledger/opledger/internal/dialectkit"
	"github.com/opledger/opledger/internal/options"
	"github.com/opledger/opledger/internal/outboxkit"
	"github.com/opledger/opledger/internal/txledger"
	"github.com/opledger/opledger/ledger"
)

// defaultTable is the outbox's table beside the ledger's default table:
// TableFor(ledger.DefaultTable).
const defaultTable = ledger.DefaultTable + "_outbox"

var (
	// ErrInvalid marks a message or an option that cannot be used: an
	// empty name or topic, a part over its limit, a nil transaction.
	// Nothing was written.
	ErrInvalid = errors.New("outbox: invalid input")
	// ErrInvalidConfig marks a bad option or constructor argument of New
	// or NewRelay: the configuration error every package of the kit names
	// ErrInvalidConfig. Such an error matches ErrInvalid too.
	ErrInvalidConfig = errors.New("outbox: invalid configuration")
	// ErrDuplicate means the operation already enqueued a message with
	// this name (in this transaction, or in a committed one whose ledger
	// entry has since expired): each message of an operation needs a name
	// of its own. The transaction is still usable.
	ErrDuplicate = errors.New("outbox: the operation already enqueued a message with this name")
	// ErrUndeliverable marks a message that the publisher can never
	// deliver as it stands: Enqueue's error for a message the publisher's
	// [Checker] refuses (nothing written), and
	// what a Publisher's error wraps when the broker refused a message for
	// good (a subject it does not accept, a message over its size limit),
	// so that the relay sets the message aside (see [Relay]) instead of
	// retrying it.
	ErrUndeliverable = errors.New("outbox: the publisher can never deliver this message")
)

// undeliverableError is Enqueue's error for a message that the
// publisher's [Checker] refuses: nothing was written. It matches
// ErrUndeliverable and ErrInvalid, and unwraps to the checker's error.
type undeliverableError struct {
	// Name is the refused message's name.
	Name string
	// Err says why, from the checker.
	Err error
}

// Error describes the refusal.
func (e *undeliverableError) Error() string {
	return fmt.Sprintf("outbox: message %q can never be delivered: %v", e.Name, e.Err)
}

// Unwrap returns the checker's error.
func (e *undeliverableError) Unwrap() error { return e.Err }

// Is reports whether target is ErrUndeliverable or ErrInvalid.
func (e *undeliverableError) Is(target error) bool {
	return target == ErrUndeliverable || target == ErrInvalid
}

// Checker is an optional interface of a Publisher that knows its limits:
// what its broker never accepts (a topic that is no valid name there, a
// message over its size limit, its own headers counted). Given to
// [WithPublisherLimits], it lets Enqueue refuse such a message in the
// handler's transaction, before anything is written, instead of leaving
// the relay a message it can only set aside. outbox/natsjs's Publisher
// implements it.
type Checker interface {
	// CheckMessage returns nil when the publisher may deliver m, or an
	// error saying why it never can. It must be safe for concurrent use
	// and must not block.
	CheckMessage(m Message) error
}

// TableFor returns the outbox table that the migrations create beside
// the ledger table ledgerTable: "<ledgerTable>_outbox".
func TableFor(ledgerTable string) string { return ledgerTable + "_outbox" }

// Message is what a handler enqueues.
type Message struct {
	// Name names the message within its operation ("TransferCompleted"):
	// with the operation's identity it makes the message's id, so a
	// handler that enqueues several messages gives each its own name. 1
	// to 512 bytes of UTF-8 without control characters.
	Name string
	// Topic is where the relay publishes the message (for NATS, the
	// subject). 1 to 255 bytes of UTF-8 without control
	// characters.
	Topic string
	// Key is the partition key: messages with the same key are published
	// in the order they were enqueued. At most 255 bytes of UTF-8
	// without control characters; "" is a key like any other.
	Key string
	// Payload is the message body, at most 1 MiB less 4 KiB (the headroom
	// of a publisher's own bytes in NATS's default maximum payload).
	Payload []byte
}

// Option configures an Outbox; the With functions build them. Giving the
// same option twice is an error.
type Option struct{ o options.Option[config] }

type config struct {
	table string
	now   func() time.Time
	check Checker
}

// WithTable sets the outbox's table (default "opledger_operations_outbox"): a plain
// identifier, the table the migrations created beside the ledger's
// (TableFor of the ledger table).
func WithTable(name string) Option {
	return Option{options.New("WithTable", func(c *config) error {
		if err := dialectkit.CheckTableName(name); err != nil {
			return err
		}
		c.table = name
		return nil
	})}
}

// withClock replaces time.Now (the enqueue time stored with a message),
// for tests.
func withClock(now func() time.Time) Option {
	return Option{options.New("WithClock", func(c *config) error {
		if now == nil {
			return errors.New("clock must not be nil")
		}
		c.now = now
		return nil
	})}
}

// WithPublisherLimits makes Enqueue refuse, with an
// error matching ErrUndeliverable and nothing written, every message that c (the
// publisher the relay will use, or one configured like it) says it can
// never deliver. Without it Enqueue checks only the outbox's own limits.
func WithPublisherLimits(c Checker) Option {
	return Option{options.New("WithPublisherLimits", func(cfg *config) error {
		if c == nil {
			return errors.New("checker must not be nil")
		}
		cfg.check = c
		return nil
	})}
}

// Outbox writes messages into the outbox table inside the caller's
// transaction. It holds no connection and is safe for concurrent use.
type Outbox struct {
	d     dialects.Dialect
	table string
	q     dialectkit.OutboxQueries
	now   func() time.Time
	check Checker
}

// New returns the outbox of dialect d. A dialect without an outbox (one
// not of the kit) and a bad option are errors matching ErrInvalidConfig
// (and ErrInvalid).
func New(d dialects.Dialect, opts ...Option) (*Outbox, error) {
	if d == nil {
		return nil, fmt.Errorf("%w: nil dialect", errConfig)
	}
	ob, ok := d.(dialectkit.Outboxer)
	if !ok {
		return nil, fmt.Errorf("%w: %w: dialect %q", errConfig, errNoOutbox, d.Name())
	}
	c := config{table: defaultTable, now: time.Now}
	if err := options.Apply(&c, opts, func(o Option) options.Option[config] { return o.o }); err != nil {
		return nil, fmt.Errorf("%w: %w", errConfig, err)
	}
	q := ob.OutboxQueries(c.table)
	for _, s := range []string{q.Insert, q.Batch, q.Upto, q.Delete, q.Fail, q.Dead, q.DeadByID, q.Revive, q.Discard, q.Count} {
		if s == "" {
			return nil, fmt.Errorf("%w: %w: dialect %q lacks a statement (OutboxQueries must give every one)", errConfig, errNoOutbox, d.Name())
		}
	}
	return &Outbox{d: d, table: c.table, q: q, now: c.now, check: c.check}, nil
}

// errNoOutbox is New's error for a dialect that has no outbox (it does not
// implement dialectkit.Outboxer, or its OutboxQueries lack a statement the
// relay needs): a configuration error, wrapped with errConfig.
var errNoOutbox = errors.New("the dialect has no outbox (only the kit's own dialects have one)")

// errConfig is what configuration errors wrap: it matches ErrInvalidConfig
// and ErrInvalid.
var errConfig = configError{}

type configError struct{}

func (configError) Error() string   { return ErrInvalidConfig.Error() }
func (configError) Unwrap() []error { return []error{ErrInvalidConfig, ErrInvalid} }

// tableName returns the outbox's table name.
func (o *Outbox) tableName() string { return o.table }

// dialect returns the outbox's dialect.
func (o *Outbox) dialect() dialects.Dialect { return o.d }

// MessageID returns the id of the message called name of the operation
// id: hex of id.Derive("outbox-message", name), 64 characters. It is what
// Enqueue stores and what the relay hands the publisher (the NATS
// publisher sends it as Nats-Msg-Id).
func MessageID(id ledger.Identity, name string) (string, error) {
	raw, err := messageID(id, name)
	if err != nil {
		return "", err
	}
	return hex.EncodeToString(raw[:]), nil
}

func messageID(id ledger.Identity, name string) ([32]byte, error) {
	raw, err := id.Derive("outbox-message", name)
	if err != nil {
		return [32]byte{}, fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	return raw, nil
}

// Enqueue writes msg in tx, the transaction that holds the operation's
// ledger claim (inside a keyed call: txmiddleware.TxFromContext), and
// returns the message's id. The id is derived from the operation that ctx
// carries (ledger.OperationFromContext: every keyed handler's context
// does) and msg.Name, and inserted first against a unique constraint, as
// the ledger's claim is: a replayed operation does not run its handler,
// and a handler run again after a rollback writes the same id, so one
// operation never produces two messages of one name. The message commits
// or rolls back with the transaction; the relay publishes it only once it
// has committed.
//
// Errors: ledger.ErrNoOperation outside a keyed call, ErrInvalid for a bad
// message, an error matching ErrUndeliverable (and
// ErrInvalid) for one the publisher's limits refuse (see
// [WithPublisherLimits]), ErrDuplicate for a name already enqueued by the operation, or
// the database's error (wrapped; txmiddleware classifies it as it does
// the handler's own statements).
func (o *Outbox) Enqueue(ctx context.Context, tx *sql.Tx, msg Message) (string, error) {
	if tx == nil {
		return "", fmt.Errorf("%w: nil transaction", ErrInvalid)
	}
	return enqueue(ctx, o, func(ctx context.Context, query string, args ...any) (int64, error) {
		return txledger.SQLDriver{}.Exec(ctx, tx, query, args...)
	}, msg)
}

func init() {
	outboxkit.Enqueue = func(ctx context.Context, ob, msg any, exec outboxkit.Exec) (string, error) {
		o, _ := ob.(*Outbox)
		m, _ := msg.(Message)
		return enqueue(ctx, o, exec, m)
	}
}

// enqueue is [Outbox.Enqueue] in a transaction whose statements exec runs
// (package pgxledger's Enqueue reaches it through outboxkit.Enqueue). The
// message is written in that transaction, with Enqueue's checks, id and
// errors.
func enqueue(ctx context.Context, o *Outbox, exec outboxkit.Exec, msg Message) (string, error) {
	if o == nil || exec == nil {
		return "", fmt.Errorf("%w: nil outbox or driver", ErrInvalid)
	}
	op, ok := ledger.OperationFromContext(ctx)
	if !ok {
		return "", fmt.Errorf("outbox: enqueue: %w", ledger.ErrNoOperation)
	}
	if err := checkMessage(msg); err != nil {
		return "", err
	}
	raw, err := messageID(op, msg.Name)
	if err != nil {
		return "", err
	}
	if o.check != nil {
		if err := o.check.CheckMessage(msg); err != nil {
			return "", &undeliverableError{Name: msg.Name, Err: err}
		}
	}
	payload := msg.Payload
	if payload == nil {
		payload = []byte{}
	}
	n, err := exec(ctx, o.q.Insert, raw[:], msg.Key, msg.Topic, msg.Name, payload, o.now().UnixMicro())
	if err != nil {
		if o.d.Classify(err) == dialects.ClassUniqueViolation {
			return "", fmt.Errorf("%w: %q", ErrDuplicate, msg.Name)
		}
		return "", fmt.Errorf("outbox: enqueue: %w", dialectkit.Explain(o.d, err))
	}
	if n != 1 {
		return "", fmt.Errorf("%w: %q", ErrDuplicate, msg.Name)
	}
	return hex.EncodeToString(raw[:]), nil
}

func checkMessage(m Message) error {
	if err := checkText("topic", m.Topic, outboxkit.MaxTopicLen, false); err != nil {
		return err
	}
	if err := checkText("key", m.Key, outboxkit.MaxKeyLen, true); err != nil {
		return err
	}
	if len(m.Payload) > outboxkit.MaxPayloadSize {
		return fmt.Errorf("%w: payload of %d bytes exceeds %d", ErrInvalid, len(m.Payload), outboxkit.MaxPayloadSize)
	}
	return nil // the name is checked by the derivation
}

func checkText(field, s string, max int, emptyOK bool) error {
	switch {
	case s == "" && !emptyOK:
		return fmt.Errorf("%w: %s must not be empty", ErrInvalid, field)
	case len(s) > max:
		return fmt.Errorf("%w: %s longer than %d bytes", ErrInvalid, field, max)
	case !utf8.ValidString(s):
		return fmt.Errorf("%w: %s is not valid UTF-8", ErrInvalid, field)
	case strings.IndexFunc(s, unicode.IsControl) >= 0:
		return fmt.Errorf("%w: %s contains a control character", ErrInvalid, field)
	}
	return nil
}
