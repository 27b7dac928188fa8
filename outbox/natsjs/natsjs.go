// Package natsjs is the outbox's publisher for NATS JetStream: each
// message goes to the subject of its topic with its outbox id as
// Nats-Msg-Id, so that JetStream's duplicate window drops the relay's
// re-sends and the stream stores one message per operation.
//
//	nc, err := nats.Connect("nats://127.0.0.1:4222")
//	js, err := jetstream.New(nc)
//	pub, err := natsjs.New(js)
//	relay, err := outbox.NewRelay(db, ob, pub)
//	err = relay.Run(ctx)
//
// The stream that captures the topics must exist (EnsureStream creates
// one). Its duplicate window (JetStream's default is two minutes) must be
// longer than a message can wait between a relay's publish and its
// delete; a relay that died mid-batch leaves its messages to the next
// batch within seconds. Only this package of the kit imports the NATS
// client.
package natsjs

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/opledger/opledger/internal/options"
	"github.com/opledger/opledger/outbox"
)

// Headers the publisher sets besides Nats-Msg-Id.
const (
	// HeaderName carries the message's name (outbox.Message.Name).
	HeaderName = "Opledger-Message-Name"
	// HeaderKey carries the message's partition key.
	HeaderKey = "Opledger-Partition-Key"
	// HeaderSeq carries the message's position in the outbox.
	HeaderSeq = "Opledger-Outbox-Seq"
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

var _ outbox.Publisher = (*Publisher)(nil)

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
// counts as delivered.
func (p *Publisher) Publish(ctx context.Context, e outbox.Envelope) error {
	m := nats.NewMsg(p.cfg.prefix + e.Topic)
	m.Data = e.Payload
	m.Header.Set(HeaderName, e.Name)
	m.Header.Set(HeaderKey, e.Key)
	m.Header.Set(HeaderSeq, strconv.FormatInt(e.Seq, 10))
	opts := []jetstream.PublishOpt{jetstream.WithMsgID(e.ID)}
	if p.cfg.stream != "" {
		opts = append(opts, jetstream.WithExpectStream(p.cfg.stream))
	}
	ack, err := p.js.PublishMsg(ctx, m, opts...)
	if err != nil {
		p.failed.Add(1)
		return fmt.Errorf("natsjs: publish to %s: %w", m.Subject, err)
	}
	if ack.Duplicate {
		p.dups.Add(1)
	} else {
		p.stored.Add(1)
	}
	return nil
}

// DefaultDuplicateWindow is the duplicate window EnsureStream gives a
// stream it creates: JetStream's own default.
const DefaultDuplicateWindow = 2 * time.Minute

// EnsureStream returns the stream called name, creating it when missing
// with subjects, file storage and a duplicate window of dupWindow
// (DefaultDuplicateWindow when zero). An existing stream is left as it is;
// one without a duplicate window is an error, since it would store the
// relay's re-sends.
func EnsureStream(ctx context.Context, js jetstream.JetStream, name string, subjects []string, dupWindow time.Duration) (jetstream.Stream, error) {
	if dupWindow <= 0 {
		dupWindow = DefaultDuplicateWindow
	}
	s, err := js.Stream(ctx, name)
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		s, err = js.CreateStream(ctx, jetstream.StreamConfig{Name: name, Subjects: subjects,
			Storage: jetstream.FileStorage, Duplicates: dupWindow})
	}
	if err != nil {
		return nil, fmt.Errorf("natsjs: stream %s: %w", name, err)
	}
	if s.CachedInfo().Config.Duplicates <= 0 {
		return nil, fmt.Errorf("natsjs: stream %s has no duplicate window", name)
	}
	return s, nil
}
