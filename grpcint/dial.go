package grpcint

import (
	"context"
	"fmt"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"

	"github.com/opledger/opledger/policy"
)

// WithRetrySettings shapes the retry policy written into the service
// config of a channel owned by the service config. Default: policy's
// defaults, with UNAVAILABLE and ABORTED as retryable codes (ABORTED is
// what a keyed call still in progress returns, with pushback).
func WithRetrySettings(s policy.RetrySettings) ClientOption {
	return func(c *Client) error { c.retrySettings = &s; return nil }
}

// WithServiceConfigJSON gives the channel a service config of your own
// (load balancing, timeouts…). It is checked against the owner when the
// Client is built: with any owner but policy.OwnerServiceConfig a retry or
// hedging entry is an error, because the channel would get a second retry
// owner; with OwnerServiceConfig every finding of policy.Validate against
// the catalog is an error.
func WithServiceConfigJSON(js string) ClientOption {
	return func(c *Client) error { c.serviceConfig = js; c.hasServiceConfig = true; return nil }
}

// checkServiceConfig validates a user-supplied service config at
// construction.
func (c *Client) checkServiceConfig() error {
	if !c.hasServiceConfig {
		return nil
	}
	sc, err := policy.ParseServiceConfig([]byte(c.serviceConfig))
	if err != nil {
		return fmt.Errorf("%w: %w", ErrInvalidConfig, err)
	}
	if err := policy.CheckOwnership(c.owner, sc); err != nil {
		return fmt.Errorf("%w: %w", ErrInvalidConfig, err)
	}
	if c.owner == policy.OwnerServiceConfig {
		return c.validate(c.serviceConfig)
	}
	return nil
}

func (c *Client) validate(js string) error {
	findings, err := policy.Validate([]byte(js), c.catalog, c.owner)
	if err != nil {
		return fmt.Errorf("%w: %w", ErrInvalidConfig, err)
	}
	if len(findings) > 0 {
		return fmt.Errorf("%w: service config: %s (and %d more)", ErrInvalidConfig, findings[0], len(findings)-1)
	}
	return nil
}

// generatedServiceConfig returns the service config of a channel owned by
// the service config: policy.GenerateServiceConfig's retry entry for the
// idempotent and no-side-effects methods, extended to the keyed methods
// that have a durable ledger. grpc-go resends the same metadata on every
// attempt, so a retry of a keyed call carries the same key and the
// server's ledger turns it into a replay: it is as safe as retrying an
// idempotent method. Keyed methods without a ledger are never retried.
func (c *Client) generatedServiceConfig() (string, error) {
	s := policy.RetrySettings{RetryableStatusCodes: []codes.Code{codes.Unavailable, codes.Aborted}}
	if c.retrySettings != nil {
		s = *c.retrySettings
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
	sc, err := policy.GenerateServiceConfig(cat, policy.OwnerServiceConfig, s)
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
	if c.hasServiceConfig || c.owner != policy.OwnerServiceConfig {
		return c.serviceConfig, nil
	}
	return c.generatedServiceConfig()
}

// DialOptions returns the dial options that give a channel exactly one
// retry owner:
//
//   - policy.OwnerApplication: grpc.WithDisableRetry, the retrying unary
//     and stream interceptors and the evidence stats handler;
//   - policy.OwnerServiceConfig: the generated service config (retry
//     policy and throttling) as the channel's only service config
//     (grpc.WithDisableServiceConfig, so a resolver cannot replace it), the
//     key interceptor and the stats handler;
//   - policy.OwnerMesh and policy.OwnerNone: grpc.WithDisableRetry, the key
//     interceptor and the stats handler.
//
// A service config given with WithServiceConfigJSON is installed too, once
// checked. Add your transport credentials and other options after these.
func (c *Client) DialOptions() ([]grpc.DialOption, error) {
	opts := []grpc.DialOption{grpc.WithStatsHandler(c.StatsHandler())}
	switch c.owner {
	case policy.OwnerApplication:
		opts = append(opts, grpc.WithDisableRetry(),
			grpc.WithChainUnaryInterceptor(c.UnaryClientInterceptor()),
			grpc.WithChainStreamInterceptor(c.StreamClientInterceptor()))
	case policy.OwnerServiceConfig:
		js := c.serviceConfig
		if !c.hasServiceConfig {
			var err error
			if js, err = c.generatedServiceConfig(); err != nil {
				return nil, err
			}
		}
		opts = append(opts, grpc.WithDisableServiceConfig(), grpc.WithDefaultServiceConfig(js),
			grpc.WithChainUnaryInterceptor(c.KeyInterceptor()))
		return opts, nil
	default:
		opts = append(opts, grpc.WithDisableRetry(), grpc.WithChainUnaryInterceptor(c.KeyInterceptor()))
	}
	if c.hasServiceConfig {
		opts = append(opts, grpc.WithDefaultServiceConfig(c.serviceConfig))
	}
	return opts, nil
}

// DialOptions builds a Client for the channel and returns its dial
// options (see Client.DialOptions). Use NewClient instead to keep the
// Client and read its Stats.
func DialOptions(catalog *policy.Catalog, owner policy.RetryOwner, opts ...ClientOption) ([]grpc.DialOption, error) {
	c, err := NewClient(catalog, owner, opts...)
	if err != nil {
		return nil, err
	}
	return c.DialOptions()
}

// Resolve asks the server for the stored outcome of a keyed call without
// running it: for an application that persisted the key and lost the
// answer (a crash, a restart). method is the full method name; req must be
// a message of the method's request type (its content is not compared);
// reply receives the stored response.
//
// It returns nil when the call had succeeded (reply holds the response);
// an error with ReasonNotFound (NOT_FOUND) when nothing was committed, so
// running the call again with the same key is safe; an error with
// ReasonInProgress (ABORTED) when an attempt is still in flight; or the
// stored error of a call that failed for good, with its code, message and
// details.
func Resolve(ctx context.Context, cc grpc.ClientConnInterface, method, key string, req, reply any, opts ...grpc.CallOption) error {
	if key == "" {
		return fmt.Errorf("grpcint: resolve %s: empty key", method)
	}
	ctx = metadata.AppendToOutgoingContext(WithKey(ctx, key), ResolveHeader, "1")
	return cc.Invoke(ctx, method, req, reply, opts...)
}

// isResolve reports whether the outgoing call is a resolve request made
// by the application (Resolve), which the interceptor passes through.
func isResolve(ctx context.Context) bool {
	md, ok := metadata.FromOutgoingContext(ctx)
	return ok && len(md.Get(ResolveHeader)) > 0
}
