package natsjs

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"sync/atomic"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/opledger/opledger/internal/options"
	"github.com/opledger/opledger/outbox"
)

// Headers the publisher sets besides Nats-Msg-Id (the package doc lists
// them for consumers).
const (
	// headerName carries the message's name (outbox.Message.Name).
	headerName = "Opledger-Message-Name"
	// headerKey carries the message's partition key.
	headerKey = "Opledger-Partition-Key"
	// headerSeq carries the message's position in the outbox.
	headerSeq = "Opledger-Outbox-Seq"
)

// ErrInvalidConfig is returned (wrapped) by New for a nil JetStream or a
// bad option.
var ErrInvalidConfig = errors.New("natsjs: invalid configuration")

// Option configures a Publisher; the With functions build them. Giving the
// same option twice is an error.
type Option struct{ o options.Option[config] }

type config struct {
	prefix string
	stream string
}

// WithSubjectPrefix puts prefix before every topic to make the subject
// (default none): WithSubjectPrefix("events.") publishes topic
// "payments.transfers" to "events.payments.transfers".
func WithSubjectPrefix(prefix string) Option {
	return Option{options.New("WithSubjectPrefix", func(c *config) error {
		if strings.ContainsAny(prefix, " \t\r\n*>") {
			return fmt.Errorf("subject prefix %q contains a space or a wildcard", prefix)
		}
		c.prefix = prefix
		return nil
	})}
}

// WithStream makes every publish expect the stream called name to store
// it (Nats-Expected-Stream): a message that another stream would capture
// is refused instead.
func WithStream(name string) Option {
	return Option{options.New("WithStream", func(c *config) error {
		if name == "" {
			return errors.New("empty stream name")
		}
		c.stream = name
		return nil
	})}
}

// Stats are a Publisher's counters.
type Stats struct {
	// Stored counts messages JetStream stored.
	Stored int64
	// Duplicates counts publishes JetStream acknowledged as repeats of a
	// stored message (the relay's re-sends).
	Duplicates int64
	// Failed counts publishes that failed.
	Failed int64
}

// Publisher implements outbox.Publisher on JetStream. It is safe for
// concurrent use.
type Publisher struct {
	js  jetstream.JetStream
	cfg config

	stored, dups, failed atomic.Int64
}

var (
	_ outbox.Publisher = (*Publisher)(nil)
	_ outbox.Checker   = (*Publisher)(nil)
)

// New returns a publisher on js.
func New(js jetstream.JetStream, opts ...Option) (*Publisher, error) {
	if js == nil {
		return nil, fmt.Errorf("%w: nil JetStream", ErrInvalidConfig)
	}
	p := &Publisher{js: js}
	if err := options.Apply(&p.cfg, opts, func(o Option) options.Option[config] { return o.o }); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalidConfig, err)
	}
	return p, nil
}

// Stats returns a snapshot of the publisher's counters.
func (p *Publisher) Stats() Stats {
	return Stats{Stored: p.stored.Load(), Duplicates: p.dups.Load(), Failed: p.failed.Load()}
}

// Publish sends e to the subject of its topic with e.ID as Nats-Msg-Id
// and waits for JetStream's acknowledgement. A repeat that JetStream
// recognises within its duplicate window is acknowledged as such and
// counts as delivered. A message that can never be delivered as it stands
// (see the package's documentation) fails with an error that matches
// outbox.ErrUndeliverable.
func (p *Publisher) Publish(ctx context.Context, e outbox.Envelope) error {
	m := p.message(e)
	if err := checkSubject(m.Subject); err != nil {
		p.failed.Add(1)
		return fmt.Errorf("%w: %w", outbox.ErrUndeliverable, err)
	}
	ack, err := p.js.PublishMsg(ctx, m)
	if err != nil {
		p.failed.Add(1)
		if permanent(err) {
			return fmt.Errorf("natsjs: publish to %s: %w: %w", m.Subject, outbox.ErrUndeliverable, err)
		}
		return fmt.Errorf("natsjs: publish to %s: %w", m.Subject, err)
	}
	if ack.Duplicate {
		p.dups.Add(1)
	} else {
		p.stored.Add(1)
	}
	return nil
}

// message is what Publish sends for e.
func (p *Publisher) message(e outbox.Envelope) *nats.Msg {
	m := nats.NewMsg(p.cfg.prefix + e.Topic)
	m.Data = e.Payload
	m.Header.Set(jetstream.MsgIDHeader, e.ID)
	m.Header.Set(headerName, e.Name)
	m.Header.Set(headerKey, e.Key)
	m.Header.Set(headerSeq, strconv.FormatInt(e.Seq, 10))
	if p.cfg.stream != "" {
		m.Header.Set(jetstream.ExpectedStreamHeader, p.cfg.stream)
	}
	return m
}

// JetStream's error codes for a stream's maximum message size exceeded
// and a message captured by another stream than the expected one.
const (
	errCodeMessageTooLarge = jetstream.JSErrCodeStreamMessageExceedsMaximum // 10054
	errCodeStreamNotMatch  = jetstream.ErrorCode(10060)
)

// permanent reports whether err from a publish means the message will
// never be stored as it stands: retrying it cannot help, while other
// messages may still go through.
func permanent(err error) bool {
	var api *jetstream.APIError
	switch {
	case errors.Is(err, nats.ErrMaxPayload), errors.Is(err, nats.ErrBadSubject):
		return true
	case errors.As(err, &api):
		return api.ErrorCode == errCodeMessageTooLarge || api.ErrorCode == errCodeStreamNotMatch
	}
	return false
}

// CheckMessage implements outbox.Checker: it refuses a message whose
// subject (the prefix and the topic) is no valid NATS subject for a
// publish — empty, with a space or a tab, with an empty token ("a..b", a
// leading or trailing dot) or a wildcard token ("*", ">") — matching
// nats.ErrBadSubject, and one whose payload with the publisher's headers
// (at most 975 bytes and the expected stream's name, counted for the
// message's own name and key) exceeds the max_payload of the server the connection
// is on, read from the server when it connected, matching
// nats.ErrMaxPayload. Before the first connection there is no size to
// check against, and only the subject is checked.
func (p *Publisher) CheckMessage(msg outbox.Message) error {
	// The id and seq are not known yet: count their longest forms.
	m := p.message(outbox.Envelope{Message: msg, ID: strings.Repeat("0", 64), Seq: math.MaxInt64})
	if err := checkSubject(m.Subject); err != nil {
		return err
	}
	max := p.maxPayload()
	if max <= 0 {
		return nil
	}
	size := int64(m.Size() - len(m.Subject))
	if size > max {
		return fmt.Errorf("natsjs: message of %d bytes (payload %d, headers %d) exceeds the server's max_payload of %d: %w",
			size, len(m.Data), size-int64(len(m.Data)), max, nats.ErrMaxPayload)
	}
	return nil
}

// maxPayload is the max_payload of the server the connection is on, 0
// before it connected.
func (p *Publisher) maxPayload() int64 {
	nc := p.js.Conn()
	if nc == nil {
		return 0
	}
	return nc.MaxPayload()
}

// checkSubject refuses what a NATS server does not take as the subject of
// a publish: empty, ASCII white space (which would split the protocol
// line), an empty token, or a token that is a wildcard.
func checkSubject(s string) error {
	why := ""
	switch {
	case s == "":
		why = "is empty"
	case strings.ContainsAny(s, " \t\r\n\f\v"):
		why = "contains white space"
	default:
		for tok := range strings.SplitSeq(s, ".") {
			if tok == "" {
				why = "has an empty token"
				break
			}
			if tok == "*" || tok == ">" {
				why = "has a wildcard token"
				break
			}
		}
	}
	if why == "" {
		return nil
	}
	return fmt.Errorf("natsjs: subject %q %s: %w", s, why, nats.ErrBadSubject)
}
