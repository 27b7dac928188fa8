package grpcint

import (
	"context"
	"sync/atomic"

	"google.golang.org/grpc/stats"
)

// evidence is what the stats handler saw of one call through the kit's
// interceptor: of one attempt when the kit owns retries, of all of
// grpc-go's attempts on a service-config-owned channel.
type evidence struct {
	begins      atomic.Int32
	transparent atomic.Int32 // begins that were grpc-go's transparent retries
	sent        atomic.Bool
	header      atomic.Bool
	message     atomic.Bool
	timing      *callTiming // the logical call's, when not nil
}

// reached reports that the request may have reached the server.
func (ev *evidence) reached() bool { return ev.sent.Load() || ev.header.Load() || ev.message.Load() }

type evidenceKey struct{}

// StatsHandler returns the stats.Handler that records per-attempt
// evidence and counts attempts. DialOptions installs it; install it with
// grpc.WithStatsHandler when building the options by hand.
func (c *Client) StatsHandler() stats.Handler { return (*statsHandler)(c) }

type statsHandler Client

func (h *statsHandler) TagRPC(ctx context.Context, _ *stats.RPCTagInfo) context.Context { return ctx }

func (h *statsHandler) HandleRPC(ctx context.Context, s stats.RPCStats) {
	if !s.IsClient() {
		return
	}
	ev, _ := ctx.Value(evidenceKey{}).(*evidence)
	switch st := s.(type) {
	case *stats.Begin:
		h.c.attempts.Add(1)
		if ev != nil {
			ev.begins.Add(1)
			if st.IsTransparentRetryAttempt {
				ev.transparent.Add(1)
			}
			if ev.timing != nil {
				ev.timing.begin(st.BeginTime)
			}
		}
	case *stats.End:
		if ev != nil && ev.timing != nil {
			ev.timing.end(st.EndTime)
		}
	case *stats.OutPayload:
		if ev != nil {
			ev.sent.Store(true)
		}
	case *stats.InHeader:
		if ev != nil {
			ev.header.Store(true)
		}
	case *stats.InPayload:
		if ev != nil {
			ev.message.Store(true)
		}
	}
}

func (h *statsHandler) TagConn(ctx context.Context, _ *stats.ConnTagInfo) context.Context { return ctx }

func (h *statsHandler) HandleConn(context.Context, stats.ConnStats) {}
