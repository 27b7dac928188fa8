package grpcint

import (
	"context"
	"sync/atomic"

	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/stats"
	"google.golang.org/grpc/status"

	"github.com/opledger/opledger/internal/keyedcore/retry"
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
	// committable counts the attempts that ended and may have committed
	// (see attemptEvidence.mayHaveCommitted); lastCommittable is the
	// reading of the attempt that ended last.
	committable     atomic.Int32
	lastCommittable atomic.Bool
	timing          *callTiming // the logical call's, when not nil
}

// reached reports that the request may have reached the server.
func (ev *evidence) reached() bool { return ev.sent.Load() || ev.header.Load() || ev.message.Load() }

// earlierMayHaveCommitted reports whether an attempt before the one that
// ended last may have committed: on a service-config-owned channel, one
// of grpc-go's retries underneath the interceptor. The last attempt's
// answer ("nothing was committed") is about that attempt alone.
func (ev *evidence) earlierMayHaveCommitted() bool {
	n := ev.committable.Load()
	if ev.lastCommittable.Load() {
		n--
	}
	return n > 0
}

// ended adds the reading of an attempt that ended.
func (ev *evidence) ended(committable bool) {
	if committable {
		ev.committable.Add(1)
	}
	ev.lastCommittable.Store(committable)
}

// retracted takes back the reading of the attempt that ended last, when
// grpc-go retries it transparently: that attempt never reached the
// server's application.
func (ev *evidence) retracted() {
	if ev.lastCommittable.CompareAndSwap(true, false) {
		ev.committable.Add(-1)
	}
}

// attemptEvidence is what the stats handler saw of one attempt on the
// wire (grpc-go tags each attempt of a call, its retries included).
type attemptEvidence struct {
	sent    atomic.Bool
	header  atomic.Bool
	trailer atomic.Pointer[metadata.MD]
}

// mayHaveCommitted reports whether the attempt, ended with err, may have
// committed the key's operation: it succeeded or was answered with a
// stored outcome, or it reached the server and ended with a status that
// does not say that nothing was committed.
func (a *attemptEvidence) mayHaveCommitted(err error) bool {
	if err == nil {
		return true
	}
	var trl metadata.MD
	if p := a.trailer.Load(); p != nil {
		trl = *p
	}
	if replayedError(err, trl) {
		return true
	}
	if r, ok := retry.ServerRow(ReasonOf(err)); ok {
		return !r.Committed.Nothing()
	}
	return (a.sent.Load() || a.header.Load()) && retry.MayHaveRun(status.Code(err))
}

type (
	evidenceKey struct{}
	attemptKey  struct{}
)

// StatsHandler returns the stats.Handler that records per-attempt
// evidence and counts attempts. DialOptions installs it; install it with
// grpc.WithStatsHandler when building the options by hand.
func (c *Client) StatsHandler() stats.Handler { return (*statsHandler)(c) }

type statsHandler Client

// TagRPC gives each attempt of a call through the interceptor evidence
// of its own.
func (h *statsHandler) TagRPC(ctx context.Context, _ *stats.RPCTagInfo) context.Context {
	if _, ok := ctx.Value(evidenceKey{}).(*evidence); ok {
		return context.WithValue(ctx, attemptKey{}, &attemptEvidence{})
	}
	return ctx
}

func (h *statsHandler) HandleRPC(ctx context.Context, s stats.RPCStats) {
	if !s.IsClient() {
		return
	}
	ev, _ := ctx.Value(evidenceKey{}).(*evidence)
	a, _ := ctx.Value(attemptKey{}).(*attemptEvidence)
	switch st := s.(type) {
	case *stats.Begin:
		h.c.Attempts.Add(1)
		if ev != nil {
			ev.begins.Add(1)
			if st.IsTransparentRetryAttempt {
				ev.transparent.Add(1)
				ev.retracted()
			}
			if ev.timing != nil {
				ev.timing.begin(st.BeginTime)
			}
		}
	case *stats.End:
		if ev != nil && a != nil {
			ev.ended(a.mayHaveCommitted(st.Error))
		}
		if ev != nil && ev.timing != nil {
			ev.timing.end(st.EndTime)
		}
	case *stats.OutPayload:
		if ev != nil {
			ev.sent.Store(true)
		}
		if a != nil {
			a.sent.Store(true)
		}
	case *stats.InHeader:
		if ev != nil {
			ev.header.Store(true)
		}
		if a != nil {
			a.header.Store(true)
		}
	case *stats.InTrailer:
		if a != nil {
			trl := st.Trailer
			a.trailer.Store(&trl)
		}
	case *stats.InPayload:
		if ev != nil {
			ev.message.Store(true)
		}
	}
}

func (h *statsHandler) TagConn(ctx context.Context, _ *stats.ConnTagInfo) context.Context { return ctx }

func (h *statsHandler) HandleConn(context.Context, stats.ConnStats) {}
