// Package outboxkit holds the outbox's limits and the relay's defaults,
// for package outbox, its NATS publisher and the opledger command: the
// numbers the outbox's doc states, without a name in its API.
package outboxkit

import (
	"context"
	"time"
)

// Limits on a message.
const (
	// MaxTopicLen is the longest Message.Topic accepted, in bytes.
	MaxTopicLen = 255
	// MaxKeyLen is the longest Message.Key accepted, in bytes.
	MaxKeyLen = 255
	// MaxPayloadSize is the largest Message.Payload accepted, in bytes:
	// 1 MiB (NATS's default maximum payload) less PublisherHeadroom, so
	// that a message of any name and key the outbox accepts, with the
	// headers the kit's NATS publisher adds, fits a default nats-server.
	// A publisher with a smaller limit states it (outbox.Checker and
	// outbox.WithPublisherLimits).
	MaxPayloadSize = 1<<20 - PublisherHeadroom
	// PublisherHeadroom is what MaxPayloadSize leaves of 1 MiB for a
	// publisher's own bytes: outbox/natsjs's headers take at most 975
	// bytes and the expected stream's name.
	PublisherHeadroom = 4 << 10
	// MaxReasonLen is the longest publisher error the relay stores with a
	// message (DeadMessage.Reason), in bytes; a longer one is cut.
	MaxReasonLen = 1000
)

// Defaults of the relay's options.
const (
	DefaultBatchSize      = 100
	MaxBatchSize          = 1000
	DefaultPollInterval   = 200 * time.Millisecond
	DefaultBackoffBase    = 100 * time.Millisecond
	DefaultBackoffMax     = 10 * time.Second
	DefaultPublishTimeout = 10 * time.Second
)

// Exec runs one statement of the outbox in the caller's transaction and
// returns how many rows it affected.
type Exec func(ctx context.Context, query string, args ...any) (int64, error)

// Enqueue is outbox.Outbox's Enqueue in a transaction of another API than
// database/sql (pgxledger.Enqueue on a pgx.Tx): ob is the *outbox.Outbox,
// msg the outbox.Message, and exec runs the insert in the caller's
// transaction, which the caller has checked is not nil. Package outbox
// sets it when it is initialised, so it is set wherever an *outbox.Outbox
// exists.
var Enqueue func(ctx context.Context, ob, msg any, exec Exec) (string, error)
