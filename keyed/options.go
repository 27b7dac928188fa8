package keyed

import (
	"errors"
	"fmt"
	"log/slog"
	"time"

	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/protobuf/reflect/protoregistry"

	"github.com/opledger/opledger/internal/keyedconf"
	"github.com/opledger/opledger/policy"
	"github.com/opledger/opledger/txmiddleware"
)

// ServerOption configures a keyed server: grpcint.NewServer's,
// connectint.NewServer's and httpint.New's, which take the same options.
// The With functions of this package build the shared ones; a transport's
// own (httpint.WithMaxRequestBody, …) are ServerOptions too, and mix with
// them in one list. A server refuses, with an error wrapping its
// ErrInvalidConfig, an option it cannot honour (another transport's, or a
// shared one it has no use for, such as WithTypeResolver for httpint), an
// option given twice and a nil one. Only the kit implements it.
type ServerOption interface {
	// ApplyToServer applies the option to the kit's configuration.
	ApplyToServer(*keyedconf.Server) error
}

// ClientOption configures a keyed client: grpcint.NewClient's and
// connectint.NewClient's, as ServerOption does a server.
type ClientOption interface {
	// ApplyToClient applies the option to the kit's configuration.
	ApplyToClient(*keyedconf.Client) error
}

// Option configures both sides (the telemetry): give it to a server or
// to a client.
type Option interface {
	ServerOption
	ClientOption
}

// WithTxOptions passes options to the server's transaction runners:
// isolation, transaction attempts and backoff, a retry hook. The lock-wait
// bound, the error codec and the telemetry are the server's own options
// (WithLockWait, WithErrorCodec, WithMeterProvider, WithTracerProvider,
// WithLogger); giving them here as well is an error.
func WithTxOptions(opts ...txmiddleware.Option) ServerOption {
	return keyedconf.ServerOption("WithTxOptions", func(c *keyedconf.Server) error {
		c.TxOptions = append(c.TxOptions, opts...)
		return nil
	})
}

// WithClaimAtCommit runs the named keyed methods claim at commit (see
// txmiddleware.WithClaimAtCommit): full method names ("/pkg.Service/Method")
// for grpcint and connectint, routes as given to httpint.New ("POST
// /transfers"). The handler runs first, then its answer is recorded as the
// last statement of its transaction; a retry of a completed call, or a
// concurrent duplicate, runs the handler and rolls it back before
// replaying. Choose it for short handlers whose every effect is in the
// transaction and whose retries are rare. A name that is not a keyed
// method of the server is an error, and so is a ledger that cannot record
// at commit. The other keyed methods claim first.
func WithClaimAtCommit(methods ...string) ServerOption {
	return keyedconf.ServerOption("WithClaimAtCommit", func(c *keyedconf.Server) error {
		if len(methods) == 0 {
			return errors.New("no method named")
		}
		c.AtCommit = append([]string(nil), methods...)
		return nil
	})
}

// WithLockWait bounds how long a keyed call (and a resolve) waits before
// its claim is decided (default 2 s): for a connection of the pool, for
// BEGIN (on SQLite, for the database's single write lock) and for another
// attempt with the same key that is still in flight (see
// txmiddleware.WithLockWait). Past it the call is answered as
// [InProgress] when an attempt with the same key holds what it waited
// for, and as [StorageBusy] when the database was busy with other keys,
// both with a pushback (gRPC and connect: ABORTED or UNAVAILABLE with
// grpc-retry-pushback-ms; HTTP: 409 or 503 with Retry-After). The dialect
// must implement dialects.LockWaiter; zero sets no bound (the database's
// own settings and the call's deadline bound the wait).
func WithLockWait(d time.Duration) ServerOption {
	return keyedconf.ServerOption("WithLockWait", func(c *keyedconf.Server) error {
		if d < 0 {
			return errors.New("lock wait must not be negative")
		}
		c.LockWait = d
		return nil
	})
}

// WithErrorCodec sets which handler errors are final, recorded and
// replayed (default: grpcint.StatusCodec(grpcint.DefaultFinalCodes()...),
// connectint.ErrorCodec(connectint.DefaultFinalCodes()...)). It must
// decode what it encodes: replays and resolves return its Decode. httpint
// stores responses, not errors (see httpint.WithFinalStatus), and refuses
// it.
func WithErrorCodec(codec txmiddleware.ErrorCodec) ServerOption {
	return keyedconf.ServerOption("WithErrorCodec", func(c *keyedconf.Server) error {
		if codec == nil {
			return errors.New("codec must not be nil")
		}
		c.Codec = codec
		return nil
	})
}

// WithInProgressPushback sets the grpc-retry-pushback-ms that grpcint's
// and connectint's servers send with [InProgress] and [StorageBusy]
// (default 200 ms). httpint sends Retry-After in whole seconds (see
// httpint.WithRetryAfter) and refuses it.
func WithInProgressPushback(d time.Duration) ServerOption {
	return keyedconf.ServerOption("WithInProgressPushback", func(c *keyedconf.Server) error {
		if d < 0 {
			return errors.New("negative pushback")
		}
		c.Pushback = d
		return nil
	})
}

// WithTypeResolver sets where grpcint's and connectint's servers find the
// message type of a stored response by its full name (default
// protoregistry.GlobalTypes). httpint stores no messages and refuses it.
func WithTypeResolver(r protoregistry.MessageTypeResolver) ServerOption {
	return keyedconf.ServerOption("WithTypeResolver", func(c *keyedconf.Server) error {
		if r == nil {
			return errors.New("type resolver must not be nil")
		}
		c.Types = r
		return nil
	})
}

// WithRetryOwner sets the retry owner of the channels that call the
// server, against which it judges a request that declares none (a client
// that is not the kit's): a retry by a layer that is not the owner counts
// in opledger.server.retries_by_layer as a second owner and is logged
// once per method and layer. The kit's clients declare their owner on
// every request (the opledger-retry-owner header), which wins. Without
// the option such a request is judged by its method's kind: a retry of a
// method that is not safe to retry is a second owner, and so is every
// layer when two retried the same request. See docs/retry-ownership.md.
func WithRetryOwner(owner policy.RetryOwner) ServerOption {
	return keyedconf.ServerOption("WithRetryOwner", func(c *keyedconf.Server) error {
		if !owner.Valid() {
			return fmt.Errorf("%w: %v", policy.ErrInvalidOwner, owner)
		}
		c.RetryOwner = owner
		return nil
	})
}

// WithMeterProvider sets where the metrics go (default: the global meter
// provider, a no-op until an SDK is installed). A server's:
// opledger.server.calls and opledger.server.resolves, counters of keyed
// calls and resolve requests by opledger.outcome (the [Outcome]'s name),
// opledger.outcome.kind, opledger.reason and the transport's status
// attribute, and opledger.server.retries_by_layer; its transaction
// runners get the same provider (giving txmiddleware's telemetry options
// in WithTxOptions as well is an error). grpcint's client: gRFC A96's
// retry histograms and opledger.client.calls, .resolves and
// .budget.refusals and the gauge opledger.client.budget.balance.
// docs/operations.md lists them with their attributes; none carries a key
// or a caller. A nil provider is an error. connectint's client records no
// telemetry and refuses it.
func WithMeterProvider(mp metric.MeterProvider) Option {
	return keyedconf.TelemetryOption("WithMeterProvider", func(t *keyedconf.Telemetry) error {
		if mp == nil {
			return errors.New("meter provider must not be nil")
		}
		t.MeterProvider = mp
		return nil
	})
}

// WithTracerProvider sets where the spans go (default: the global tracer
// provider): a server's opledger.keyed_call span per keyed call
// (opledger.resolve for a resolve request), the parent of its runner's
// and its ledger's; a client's opledger.resolve span per resolve request.
// They carry the method, the outcome, the reason and the key's short
// hash. A nil provider is an error; connectint's client refuses it.
func WithTracerProvider(tp trace.TracerProvider) Option {
	return keyedconf.TelemetryOption("WithTracerProvider", func(t *keyedconf.Telemetry) error {
		if tp == nil {
			return errors.New("tracer provider must not be nil")
		}
		t.TracerProvider = tp
		return nil
	})
}

// WithLogger sets the logger of the events (default: none; nil
// discards): a server's per keyed call refused before its claim, per
// resolve request and per second retry owner (once per method and layer),
// besides its runners' (see txmiddleware.WithLogger); grpcint's client's
// per retry its budget refused and per resolve request. Each has the
// method, the outcome and the short hash of the key (key_hash), never the
// key, the caller, the request or the response. connectint's client
// refuses it.
func WithLogger(l *slog.Logger) Option {
	return keyedconf.TelemetryOption("WithLogger", func(t *keyedconf.Telemetry) error {
		t.Logger = l
		return nil
	})
}

// WithBudget sets the retry budget shared by the client's calls (one per
// target). Default: policy.NewBudget with its defaults (10% of calls plus
// 5 retries a second over 10 s). The budget bounds how often calls run
// again; resolve requests, which only read, do not spend it.
func WithBudget(b *policy.Budget) ClientOption {
	return keyedconf.ClientOption("WithBudget", func(c *keyedconf.Client) error {
		if b == nil {
			return errors.New("nil budget")
		}
		c.Budget = b
		return nil
	})
}

// WithBudgetFundedBySuccess deposits into the budget once per successful
// call instead of once per call, so that under total failure retries fall
// to the budget's floor. Pair it with a larger budget percent (0.5).
func WithBudgetFundedBySuccess() ClientOption {
	return keyedconf.ClientOption("WithBudgetFundedBySuccess", func(c *keyedconf.Client) error {
		c.FundBySuccess = true
		return nil
	})
}

// WithBackoff sets the backoff between attempts, resolves included.
// Default: policy.Backoff's defaults (100 ms doubling to 1 s, ±20%).
// Server pushback (grpc-retry-pushback-ms) always wins.
func WithBackoff(b policy.Backoff) ClientOption {
	return keyedconf.ClientOption("WithBackoff", func(c *keyedconf.Client) error {
		if err := b.Validate(); err != nil {
			return err
		}
		c.Backoff = b
		return nil
	})
}

// WithMaxAttempts bounds how many times one logical call is run, the first
// attempt and the retries: 1 to 100; default 5. The call's deadline bounds
// them too. Resolve requests are not counted: they are bounded by the
// deadline (see WithResolveWindow).
func WithMaxAttempts(n int) ClientOption {
	return keyedconf.ClientOption("WithMaxAttempts", func(c *keyedconf.Client) error {
		if n < 1 || n > 100 {
			return fmt.Errorf("max attempts %d outside [1, 100]", n)
		}
		c.MaxAttempts = n
		return nil
	})
}

// WithResolveWindow bounds how long the client keeps resolving a keyed
// call whose outcome is unknown when the call has no deadline (default
// 30 s, at least 1 ms). With a deadline, the deadline bounds it.
func WithResolveWindow(d time.Duration) ClientOption {
	return keyedconf.ClientOption("WithResolveWindow", func(c *keyedconf.Client) error {
		if d < time.Millisecond {
			return fmt.Errorf("resolve window %v under 1ms", d)
		}
		c.ResolveWindow = d
		return nil
	})
}

// WithDownstreamKeys makes the client attach a derived key to a keyed
// method called from inside a keyed call (a context that carries an
// operation, as a keyed handler's does) without a key of its own:
// [DownstreamKey](ctx, method), with the called full method as the step,
// instead of a new random key. The downstream call then has the same key
// on every retry of the upstream call, so a chain of keyed services
// behaves as one. A handler that calls the same method more than once per
// operation gives each call its own key (grpcint.WithKey,
// connectint.WithKey, with DownstreamKey(ctx, step)). Outside a keyed
// call, and with a key set, the client behaves as without the option.
func WithDownstreamKeys() ClientOption {
	return keyedconf.ClientOption("WithDownstreamKeys", func(c *keyedconf.Client) error {
		c.DownstreamKeys = true
		return nil
	})
}
