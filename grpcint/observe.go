package grpcint

import (
	"context"
	"log/slog"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/attribute"
	otelcodes "go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/opledger/opledger/internal/keyedcore/retry"
	"github.com/opledger/opledger/internal/telemetry"
	"github.com/opledger/opledger/keyed"
)

// a96Method is gRFC A66's grpc.method, which only A96's histograms carry
// (beside opledger.method, which every instrument, span and log event of
// the kit's carries): the full method without its leading slash.
func a96Method(fullMethod string) attribute.KeyValue {
	return telemetry.GRPCMethod.String(strings.TrimPrefix(fullMethod, "/"))
}

// ---------------------------------------------------------------------------
// Client

// clientObs holds a Client's instruments.
type clientObs struct {
	owner       attribute.KeyValue
	tracer      trace.Tracer
	log         *slog.Logger
	retries     metric.Int64Histogram
	transparent metric.Int64Histogram
	retryDelay  metric.Float64Histogram
	calls       metric.Int64Counter
	resolves    metric.Int64Counter
	refusals    metric.Int64Counter
	target      *atomic.Pointer[string] // the first call's canonical target
}

func newClientObs(c *Client) *clientObs {
	m := telemetry.MeterProvider(c.cfg.Tel().MeterProvider).Meter(telemetry.ScopePrefix + "grpcint")
	o := &clientObs{
		owner:  telemetry.Owner.String(c.owner.String()),
		tracer: telemetry.TracerProvider(c.cfg.Tel().TracerProvider).Tracer(telemetry.ScopePrefix + "grpcint"),
		log:    telemetry.Logger(c.cfg.Tel().Logger),
		retries: telemetry.Inst(m.Int64Histogram("grpc.client.call.retries", metric.WithUnit("{retry}"),
			metric.WithDescription("Number of retries during the client call. If there were no retries, 0 is not reported."),
			metric.WithExplicitBucketBoundaries(telemetry.RetryBounds...))),
		transparent: telemetry.Inst(m.Int64Histogram("grpc.client.call.transparent_retries", metric.WithUnit("{transparent_retry}"),
			metric.WithDescription("Number of transparent retries during the client call. If there were no transparent retries, 0 is not reported."),
			metric.WithExplicitBucketBoundaries(telemetry.TransparentRetryBounds...))),
		retryDelay: telemetry.Inst(m.Float64Histogram("grpc.client.call.retry_delay", metric.WithUnit("s"),
			metric.WithDescription("Total time of delay while there is no active attempt during the client call."),
			metric.WithExplicitBucketBoundaries(telemetry.LatencyBounds...))),
		calls: telemetry.Inst(m.Int64Counter("opledger.client.calls", metric.WithUnit("{call}"),
			metric.WithDescription("Logical calls through the kit's client interceptor, by outcome."))),
		resolves: telemetry.Inst(m.Int64Counter("opledger.client.resolves", metric.WithUnit("{resolve}"),
			metric.WithDescription("Resolve requests the client sent, by outcome."))),
		refusals: telemetry.Inst(m.Int64Counter("opledger.client.budget.refusals", metric.WithUnit("{retry}"),
			metric.WithDescription("Retries the retry budget refused."))),
		target: new(atomic.Pointer[string]),
	}
	gauge := telemetry.Inst(m.Int64ObservableGauge("opledger.client.budget.balance", metric.WithUnit("{retry}"),
		metric.WithDescription("Retries the client's retry budget would allow now.")))
	budget, owner, target := c.cfg.Budget, o.owner, o.target
	reg, err := m.RegisterCallback(func(_ context.Context, obs metric.Observer) error {
		attrs := []attribute.KeyValue{owner}
		if t := target.Load(); t != nil {
			attrs = append(attrs, telemetry.GRPCTarget.String(*t))
		}
		obs.ObserveInt64(gauge, int64(budget.Available()), metric.WithAttributes(attrs...))
		return nil
	}, gauge)
	if err == nil {
		// The callback holds the budget, not the Client: once the Client is
		// unreachable its callback is unregistered.
		runtime.AddCleanup(c, func(r metric.Registration) { _ = r.Unregister() }, reg)
	}
	return o
}

// callTiming is what the stats handler measures of one logical call: the
// time between one attempt's end and the next one's begin.
type callTiming struct {
	mu      sync.Mutex
	lastEnd time.Time
	delay   time.Duration
}

func (t *callTiming) begin(at time.Time) {
	t.mu.Lock()
	if !t.lastEnd.IsZero() && at.After(t.lastEnd) {
		t.delay += at.Sub(t.lastEnd)
	}
	t.mu.Unlock()
}

func (t *callTiming) end(at time.Time) {
	t.mu.Lock()
	t.lastEnd = at
	t.mu.Unlock()
}

func (t *callTiming) total() time.Duration {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.delay
}

// callStats are A96's counts of one logical call, and its outcome.
type callStats struct {
	retries, transparent int
	timing               callTiming
	outcome              keyed.Outcome // how the call ended: Executed, Replayed, or its error's reading
}

// attempted adds an attempt's evidence: grpc-go's transparent retries
// and, on a channel whose retries grpc-go owns, its own retries.
func (s *callStats) attempted(ev *evidence, rerun bool) {
	tr := int(ev.transparent.Load())
	s.transparent += tr
	if own := int(ev.begins.Load()) - tr - 1; own > 0 {
		s.retries += own
	}
	if rerun {
		s.retries++
	}
}

// callDone records a finished logical call.
func (o *clientObs) callDone(ctx context.Context, cc *grpc.ClientConn, method string, s *callStats, err error) {
	target := ""
	if cc != nil {
		target = cc.CanonicalTarget()
		if o.target.Load() == nil {
			o.target.Store(&target)
		}
	}
	if !o.retryDelay.Enabled(ctx) && !o.calls.Enabled(ctx) && !o.retries.Enabled(ctx) && !o.transparent.Enabled(ctx) {
		return
	}
	a96 := metric.WithAttributeSet(attribute.NewSet(a96Method(method), telemetry.GRPCTarget.String(target), telemetry.Method.String(method)))
	if s.retries > 0 {
		o.retries.Record(ctx, int64(s.retries), a96)
	}
	if s.transparent > 0 {
		o.transparent.Record(ctx, int64(s.transparent), a96)
	}
	o.retryDelay.Record(ctx, s.timing.total().Seconds(), a96)
	outcome := s.outcome
	if outcome == 0 {
		outcome = keyed.Executed
		if err != nil {
			outcome = keyed.ServerAnswered
		}
	}
	attrs := []attribute.KeyValue{telemetry.Method.String(method), o.owner, telemetry.Outcome.String(outcome.String())}
	if r := ReasonOf(err); err != nil && r != "" {
		attrs = append(attrs, telemetry.Reason.String(r))
	}
	o.calls.Add(ctx, 1, metric.WithAttributes(attrs...))
}

// resolveOutcome is what a resolve request found, in package keyed's
// classification.
func resolveOutcome(err error, trl metadata.MD) keyed.Outcome {
	r, kit := retry.ServerRow(ReasonOf(err))
	switch {
	case err == nil || replayedError(err, trl):
		return keyed.Replayed
	case kit:
		return r.Outcome
	case retry.MayHaveRun(status.Code(err)):
		return keyed.CallOutcomeUnknown // the answer was lost on the way
	}
	return keyed.ServerAnswered
}

// resolving starts the span of a resolve request.
func (o *clientObs) resolving(ctx context.Context, method, key string) (context.Context, trace.Span) {
	ctx, span := o.tracer.Start(ctx, "opledger.resolve", trace.WithSpanKind(trace.SpanKindInternal))
	if span.IsRecording() {
		span.SetAttributes(telemetry.Method.String(method), o.owner, telemetry.KeyHash.String(telemetry.KeyHashOf(key)))
	}
	return ctx, span
}

// resolved records a finished resolve request: counter, span, log event.
func (o *clientObs) resolved(ctx context.Context, span trace.Span, method, key string, err error, trl metadata.MD) {
	found := resolveOutcome(err, trl)
	outcome := found.String()
	if o.resolves.Enabled(ctx) {
		o.resolves.Add(ctx, 1, metric.WithAttributes(telemetry.Method.String(method), o.owner, telemetry.Outcome.String(outcome)))
	}
	if span.IsRecording() {
		span.SetAttributes(telemetry.Outcome.String(outcome))
		if found != keyed.Replayed && found != keyed.NotFound && found != keyed.InProgress {
			span.SetStatus(otelcodes.Error, outcome)
		}
	}
	span.End()
	if o.log.Enabled(ctx, slog.LevelInfo) {
		o.log.LogAttrs(ctx, slog.LevelInfo, "opledger: resolve", slog.String(telemetry.LogMethod, method), slog.String("owner", o.owner.Value.AsString()),
			slog.String("outcome", outcome), slog.String("key_hash", telemetry.KeyHashOf(key)))
	}
}

// refused records a retry the budget refused.
func (o *clientObs) refused(ctx context.Context, method, key string) {
	if o.refusals.Enabled(ctx) {
		o.refusals.Add(ctx, 1, metric.WithAttributes(telemetry.Method.String(method), o.owner))
	}
	if o.log.Enabled(ctx, slog.LevelWarn) {
		attrs := []slog.Attr{slog.String(telemetry.LogMethod, method), slog.String("owner", o.owner.Value.AsString()), slog.String("decision", "budget-exhausted")}
		if key != "" {
			attrs = append(attrs, slog.String("key_hash", telemetry.KeyHashOf(key)))
		}
		o.log.LogAttrs(ctx, slog.LevelWarn, "opledger: retry budget exhausted", attrs...)
	}
}

// ---------------------------------------------------------------------------
// Server

// codeName is the status code of err in gRFC A66's grpc.status form
// ("OK", "FAILED_PRECONDITION", …).
func codeName(err error) string {
	c := status.Code(err)
	if int(c) < len(statusNames) {
		return statusNames[c]
	}
	return c.String()
}

var statusNames = [...]string{"OK", "CANCELLED", "UNKNOWN", "INVALID_ARGUMENT", "DEADLINE_EXCEEDED", "NOT_FOUND",
	"ALREADY_EXISTS", "PERMISSION_DENIED", "RESOURCE_EXHAUSTED", "FAILED_PRECONDITION", "ABORTED", "OUT_OF_RANGE",
	"UNIMPLEMENTED", "INTERNAL", "UNAVAILABLE", "DATA_LOSS", "UNAUTHENTICATED"}
