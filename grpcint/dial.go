package grpcint

import (
	"context"
	"fmt"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/opledger/opledger/internal/keyedcore/retry"
	"github.com/opledger/opledger/keyed"
	"github.com/opledger/opledger/policy"
	"github.com/opledger/opledger/policy/serviceconfig"
)

// WithRetrySettings shapes the retry policy written into the service
// config of a channel owned by the service config. Default: policy's
// defaults, with UNAVAILABLE and ABORTED as retryable codes (ABORTED is
// what a keyed call still in progress returns, with pushback).
func WithRetrySettings(s serviceconfig.RetrySettings) keyed.ClientOption {
	return clientOption("WithRetrySettings", func(c *clientOwn) error { c.retrySettings = &s; return nil })
}

// WithServiceConfigJSON gives the channel a service config of your own
// (load balancing, timeouts…). It is checked against the owner when the
// Client is built: with any owner but policy.OwnerServiceConfig a retry or
// hedging entry is an error, because the channel would get a second retry
// owner; with OwnerServiceConfig every finding of serviceconfig.Validate against
// the catalog is an error.
func WithServiceConfigJSON(js string) keyed.ClientOption {
	return clientOption("WithServiceConfigJSON", func(c *clientOwn) error {
		c.serviceConfig, c.hasServiceConfig = js, true
		return nil
	})
}

// checkServiceConfig validates a user-supplied service config at
// construction.
func (c *Client) checkServiceConfig() error {
	if c.owner == policy.OwnerServiceConfig && isXDS(c.own.target) {
		return fmt.Errorf("%w: the owner service-config on the xds: target %q: the xDS resolver replaces the channel's service config (its retry policy is not used), and with grpc.WithDisableServiceConfig the channel gets no addresses; make the owner mesh (the control plane's retry policy) or application", ErrInvalidConfig, c.own.target)
	}
	if !c.own.hasServiceConfig {
		return nil
	}
	sc, err := serviceconfig.Parse([]byte(c.own.serviceConfig))
	if err != nil {
		return fmt.Errorf("%w: %w", ErrInvalidConfig, err)
	}
	if err := serviceconfig.CheckOwnership(c.owner, sc); err != nil {
		return fmt.Errorf("%w: %w", ErrInvalidConfig, err)
	}
	if c.owner == policy.OwnerServiceConfig {
		return c.validate(c.own.serviceConfig)
	}
	return nil
}

func (c *Client) validate(js string) error {
	findings, err := serviceconfig.Validate([]byte(js), c.catalog, c.owner)
	if err != nil {
		return fmt.Errorf("%w: %w", ErrInvalidConfig, err)
	}
	if len(findings) > 0 {
		return fmt.Errorf("%w: service config: %s (and %d more)", ErrInvalidConfig, findings[0], len(findings)-1)
	}
	return nil
}

// generatedServiceConfig returns the service config of a channel owned by
// the service config: serviceconfig.Generate's retry entry for the
// idempotent and no-side-effects methods, extended to the keyed methods
// that have a durable ledger. grpc-go resends the same metadata on every
// attempt, so a retry of a keyed call carries the same key and the
// server's ledger turns it into a replay: it is as safe as retrying an
// idempotent method. Keyed methods without a ledger are never retried.
func (c *Client) generatedServiceConfig() (string, error) {
	s := serviceconfig.RetrySettings{RetryableStatusCodes: []codes.Code{codes.Unavailable, codes.Aborted}}
	if c.own.retrySettings != nil {
		s = *c.own.retrySettings
	}
	var widened []policy.MethodPolicy
	for _, p := range c.catalog.Methods() {
		if p.Kind == policy.KindKeyed && p.DurableLedger && p.Shape == policy.ShapeUnary {
			p.Kind = policy.KindIdempotent
			widened = append(widened, p)
		}
	}
	cat, err := c.catalog.With(widened...)
	if err != nil {
		return "", fmt.Errorf("%w: %w", ErrInvalidConfig, err)
	}
	sc, err := serviceconfig.Generate(cat, policy.OwnerServiceConfig, s)
	if err != nil {
		return "", fmt.Errorf("%w: %w", ErrInvalidConfig, err)
	}
	js, err := sc.JSON()
	if err != nil {
		return "", fmt.Errorf("%w: %w", ErrInvalidConfig, err)
	}
	if err := c.validate(js); err != nil {
		return "", err
	}
	return js, nil
}

// ServiceConfigJSON returns the service config DialOptions installs: the
// generated one for policy.OwnerServiceConfig (unless one was given with
// WithServiceConfigJSON), the given one or "" (none) for the other
// owners. Print it to review what grpc-go will retry.
func (c *Client) ServiceConfigJSON() (string, error) {
	if c.own.hasServiceConfig || c.owner != policy.OwnerServiceConfig {
		return c.own.serviceConfig, nil
	}
	return c.generatedServiceConfig()
}

// DialOptions returns the dial options that give a channel exactly one
// retry owner, with the client's interceptors (see UnaryClientInterceptor)
// and its stats handler:
//
//   - policy.OwnerApplication: grpc.WithDisableRetry and the retrying
//     interceptors;
//   - policy.OwnerServiceConfig: the generated service config (retry
//     policy and throttling) as the channel's only service config
//     (grpc.WithDisableServiceConfig, so a resolver cannot replace it);
//   - policy.OwnerMesh and policy.OwnerNone: grpc.WithDisableRetry,
//     except for policy.OwnerMesh on an xds: target given with WithTarget:
//     there the control plane's retry policy is the mesh layer, and
//     grpc-go's retries stay on for it (the xDS resolver's service config
//     replaces any other, so it is the only retry policy the channel has).
//
// A service config given with WithServiceConfigJSON is installed too, once
// checked. Add your transport credentials and other options after these.
func (c *Client) DialOptions() ([]grpc.DialOption, error) {
	opts := []grpc.DialOption{grpc.WithStatsHandler(c.StatsHandler()),
		grpc.WithChainUnaryInterceptor(c.UnaryClientInterceptor()),
		grpc.WithChainStreamInterceptor(c.StreamClientInterceptor())}
	if c.owner == policy.OwnerServiceConfig {
		js := c.own.serviceConfig
		if !c.own.hasServiceConfig {
			var err error
			if js, err = c.generatedServiceConfig(); err != nil {
				return nil, err
			}
		}
		return append(opts, grpc.WithDisableServiceConfig(), grpc.WithDefaultServiceConfig(js)), nil
	}
	if c.owner != policy.OwnerMesh || !isXDS(c.own.target) {
		opts = append(opts, grpc.WithDisableRetry())
	}
	if c.own.hasServiceConfig {
		opts = append(opts, grpc.WithDefaultServiceConfig(c.own.serviceConfig))
	}
	return opts, nil
}

// Resolve asks the server for the stored outcome of a keyed call without
// running it: for an application that persisted the key and lost the
// answer (a crash, a restart), or got ReasonCallOutcomeUnknown. method is
// the full method name; req must be a message of the method's request type
// (its content is not compared); reply receives the stored response.
//
// A resolve only reads, so Resolve asks again, after a backoff (100 ms
// doubling to 1 s, or the server's pushback), while the answer is lost on
// the way (a transport failure), the server's database fails, or another
// attempt with the key is still in flight; it stops when ctx ends, or
// after 10 tries when ctx has no deadline. It returns nil when the call
// had succeeded (reply holds the response); an error with ReasonNotFound
// (NOT_FOUND) when nothing was committed, so running the call again with
// the same key is safe; the stored error of a call that failed for good,
// with its code, message and details; or the last failure when it had to
// stop.
func Resolve(ctx context.Context, cc grpc.ClientConnInterface, method, key string, req, reply any, opts ...grpc.CallOption) error {
	if key == "" {
		return fmt.Errorf("grpcint: resolve %s: empty key", method)
	}
	ctx = metadata.AppendToOutgoingContext(WithKey(ctx, key), ResolveHeader, "1")
	return retry.Resolve(ctx, func() retry.Attempt {
		var trl metadata.MD
		err := cc.Invoke(ctx, method, req, reply, append(opts, grpc.Trailer(&trl))...)
		return resolveAttempt(err, trl)
	})
}

// resolveAttempt is what the client saw of one resolve request.
func resolveAttempt(err error, trl metadata.MD) retry.Attempt {
	if err == nil {
		return retry.Attempt{}
	}
	return retry.Attempt{Err: err, Code: status.Code(err), Reason: ReasonOf(err), ReplayedError: replayedError(err, trl),
		Pushback: trl.Get(policy.PushbackHeader)}
}
