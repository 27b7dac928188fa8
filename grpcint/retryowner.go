package grpcint

import (
	"context"
	"errors"
	"strconv"
	"strings"

	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"

	"github.com/opledger/opledger/internal/keyedcore"
	"github.com/opledger/opledger/keyed"
	"github.com/opledger/opledger/policy"
)

// WithTarget gives the client its channel's target, as passed to
// grpc.NewClient. On an xds: target (proxyless gRPC, whose retry policy
// comes from the control plane's RouteConfiguration):
//
//   - for policy.OwnerMesh, DialOptions leave grpc-go's retries on: the
//     control plane is the mesh layer, and grpc.WithDisableRetry would
//     switch its retry policy off;
//   - policy.OwnerServiceConfig is an error (NewClient): the xDS resolver
//     replaces the generated service config, and with
//     grpc.WithDisableServiceConfig the channel gets no addresses.
//
// Without it, or on another target, DialOptions disable grpc-go's retries
// for every owner but the service config.
func WithTarget(target string) keyed.ClientOption {
	return clientOption("WithTarget", func(c *clientOwn) error {
		if strings.TrimSpace(target) == "" {
			return errors.New("empty target")
		}
		c.target = target
		return nil
	})
}

// isXDS reports whether a target uses grpc-go's xDS resolver.
func isXDS(target string) bool {
	scheme, _, ok := strings.Cut(target, ":")
	return ok && strings.EqualFold(scheme, "xds")
}

// declare returns ctx with the channel's owner declared in its outgoing
// metadata (";xds" on an xds:/// channel: grpc-go's retries there are the
// control plane's).
func (c *Client) declare(ctx context.Context, cc *grpc.ClientConn) context.Context {
	d := keyedcore.Declaration{Owner: c.owner, XDS: isXDS(c.own.target) || (cc != nil && isXDS(cc.Target()))}
	return metadata.AppendToOutgoingContext(ctx, keyedcore.RetryOwnerHeader, d.String())
}

// numbered returns an attempt's context with the loop's attempt number,
// on a channel whose retries the application owns.
func (c *Client) numbered(ctx context.Context, attempt int) context.Context {
	if c.owner != policy.OwnerApplication {
		return ctx
	}
	return metadata.AppendToOutgoingContext(ctx, keyedcore.AttemptHeader, strconv.Itoa(attempt))
}

// judgeRetries has the core judge the retry headers of a call of a
// catalog method (unary resolve requests, and unary requests with a
// malformed resolve header, are not judged; a stream's resolve header is
// ignored). It returns the trailer that names the layers that are second
// owners (keyedcore.SecondOwnerHeader), nil when there is none.
func (s *Server) judgeRetries(ctx context.Context, method string, unary bool) metadata.MD {
	md, _ := metadata.FromIncomingContext(ctx)
	h := keyedcore.RetryHeaders{Owner: md[keyedcore.RetryOwnerHeader], Attempt: md[keyedcore.AttemptHeader],
		EnvoyAttempt: md[keyedcore.EnvoyAttemptCountHeader], PreviousAttempts: md[keyedcore.PreviousAttemptsHeader]}
	if v := s.core.RetriesOf(ctx, s.catalog, method, h, unary && len(md.Get(ResolveHeader)) > 0).SecondOwners(); v != "" {
		return metadata.Pairs(keyedcore.SecondOwnerHeader, v)
	}
	return nil
}
