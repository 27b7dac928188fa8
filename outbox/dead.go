package outbox

import (
	"context"
	"database/sql"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/opledger/opledger/internal/outboxkit"
)

var (
	// ErrNotDead is returned (wrapped) by RetryDead and DiscardDead when no
	// dead message has the id: there is none, it was delivered, or it was
	// retried or discarded already.
	ErrNotDead = errors.New("outbox: no dead message with this id")
	// ErrDead is matched by Drain's error when what is
	// left in the outbox is dead messages and the messages of their keys
	// that wait behind them.
	ErrDead = errors.New("outbox: undeliverable messages were set aside")
)

// deadError is Drain's error when the outbox still holds dead messages
// once everything else was published. It matches ErrDead.
type deadError struct {
	// Dead counts the dead messages.
	Dead int64
	// Waiting counts the other messages left: those of the dead messages'
	// keys waiting behind them (and any another relay held or that
	// committed as Drain ended).
	Waiting int64
}

// Error says how many messages are dead and how many wait.
func (e *deadError) Error() string {
	them := "them"
	if e.Dead == 1 {
		them = "it"
	}
	waiting := "none"
	if e.Waiting > 0 {
		waiting = fmt.Sprint(e.Waiting, " more")
	}
	return fmt.Sprintf("outbox: %s set aside as undeliverable (dead), %s waiting behind %s", plural(e.Dead, "message"), waiting, them)
}

// Is reports whether target is ErrDead.
func (e *deadError) Is(target error) bool { return target == ErrDead }

func plural(n int64, noun string) string {
	if n == 1 {
		return "1 " + noun
	}
	return fmt.Sprintf("%d %ss", n, noun)
}

// DeadMessage is a message the relay set aside because the publisher
// refused it as undeliverable (its error matched ErrUndeliverable). It
// stays in the outbox, and holds back the later messages of its partition
// key (messages of every other key keep flowing), until RetryDead makes
// it an ordinary message again or DiscardDead deletes it.
type DeadMessage struct {
	// Seq is the message's position in the outbox.
	Seq int64
	// ID is the message's id (see MessageID).
	ID string
	// Key, Topic and Name are the message's.
	Key, Topic, Name string
	// PayloadSize is the payload's length in bytes.
	PayloadSize int64
	// EnqueuedAt is when Enqueue wrote the message.
	EnqueuedAt time.Time
	// Attempts counts the relay's failed publishes of the message, the
	// one that set it aside included.
	Attempts int64
	// Reason is the publisher's error that set it aside (at most
	// 1000 bytes).
	Reason string
	// DeadAt is when the relay set it aside.
	DeadAt time.Time
	// Waiting counts the later messages of its key, held back behind it.
	Waiting int64
}

// Dead lists up to limit dead messages of the outbox in db, oldest first.
func (o *Outbox) Dead(ctx context.Context, db *sql.DB, limit int) ([]DeadMessage, error) {
	if db == nil || limit < 1 {
		return nil, fmt.Errorf("%w: Dead needs a database and a limit of at least 1", ErrInvalid)
	}
	rs, err := db.QueryContext(ctx, o.q.Dead, limit)
	if err != nil {
		return nil, fmt.Errorf("outbox: list dead messages: %w", err)
	}
	defer rs.Close()
	var out []DeadMessage
	for rs.Next() {
		m, err := scanDead(rs)
		if err != nil {
			return nil, fmt.Errorf("outbox: list dead messages: %w", err)
		}
		out = append(out, m)
	}
	if err := rs.Err(); err != nil {
		return nil, fmt.Errorf("outbox: list dead messages: %w", err)
	}
	return out, nil
}

// RetryDead makes the dead message with id an ordinary message again and
// returns it as it was: the relay's next batch publishes it (its attempts
// and last error are kept), then the messages of its key that waited
// behind it. An id of no dead message is ErrNotDead; one that is no
// message id (64 hex digits) is ErrInvalid.
func (o *Outbox) RetryDead(ctx context.Context, db *sql.DB, id string) (DeadMessage, error) {
	return o.actOnDead(ctx, db, id, o.q.Revive, "retry")
}

// DiscardDead deletes the dead message with id, which will never be
// published, and returns it as it was: the messages of its key that
// waited behind it follow at the relay's next batch. Errors as RetryDead.
func (o *Outbox) DiscardDead(ctx context.Context, db *sql.DB, id string) (DeadMessage, error) {
	return o.actOnDead(ctx, db, id, o.q.Discard, "discard")
}

func (o *Outbox) actOnDead(ctx context.Context, db *sql.DB, id, query, verb string) (DeadMessage, error) {
	raw, err := hex.DecodeString(id)
	if db == nil || err != nil || len(raw) != 32 {
		return DeadMessage{}, fmt.Errorf("%w: %s needs a database and a message id of 64 hex digits", ErrInvalid, verb)
	}
	m, err := scanDead(db.QueryRowContext(ctx, o.q.DeadByID, raw))
	if errors.Is(err, sql.ErrNoRows) {
		return DeadMessage{}, fmt.Errorf("%w: %s", ErrNotDead, id)
	}
	if err != nil {
		return DeadMessage{}, fmt.Errorf("outbox: %s dead message: %w", verb, err)
	}
	res, err := db.ExecContext(ctx, query, raw)
	if err != nil {
		return DeadMessage{}, fmt.Errorf("outbox: %s dead message: %w", verb, err)
	}
	n, err := res.RowsAffected()
	if err != nil {
		return DeadMessage{}, fmt.Errorf("outbox: %s dead message: %w", verb, err)
	}
	if n != 1 { // retried or discarded meanwhile
		return DeadMessage{}, fmt.Errorf("%w: %s", ErrNotDead, id)
	}
	return m, nil
}

type scanner interface{ Scan(dest ...any) error }

func scanDead(s scanner) (DeadMessage, error) {
	var (
		m          DeadMessage
		raw        []byte
		at, deadAt int64
		reason     sql.NullString
	)
	if err := s.Scan(&m.Seq, &raw, &m.Key, &m.Topic, &m.Name, &m.PayloadSize, &at, &m.Attempts, &reason, &deadAt, &m.Waiting); err != nil {
		return DeadMessage{}, err
	}
	m.ID = hex.EncodeToString(raw)
	m.EnqueuedAt = time.UnixMicro(at).UTC()
	m.DeadAt = time.UnixMicro(deadAt).UTC()
	m.Reason = reason.String
	return m, nil
}

// reasonOf is what the relay stores of a publisher's error: its text as
// valid UTF-8 without NUL bytes (which the databases refuse in text), cut
// to outboxkit.MaxReasonLen bytes on a character boundary.
func reasonOf(err error) string {
	s := strings.ReplaceAll(strings.ToValidUTF8(err.Error(), "\uFFFD"), "\x00", "")
	if len(s) <= outboxkit.MaxReasonLen {
		return s
	}
	i := outboxkit.MaxReasonLen
	for i > 0 && !utf8.RuneStart(s[i]) {
		i--
	}
	return s[:i]
}
