package ledger

import (
	"context"
	"errors"
	"strings"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"

	"github.com/opledger/opledger/dialects"
	"github.com/opledger/opledger/internal/dialectkit"
	"github.com/opledger/opledger/internal/options"
	"github.com/opledger/opledger/internal/outcomes"
	"github.com/opledger/opledger/internal/telemetry"
)

// WithMeterProvider sets where the Store's metrics go (default: the
// global meter provider, a no-op until an SDK is installed). The Store
// records:
//
//   - opledger.ledger.claims, a counter of claims by opledger.outcome
//     (acquired, taken-over-expired, replayed, recorded,
//     idempotency-key-reused, operation-in-progress, operation-incomplete,
//     idempotency-key-expired, retryable, failed: the kit's one set of
//     outcome names);
//   - opledger.ledger.claim.duration and
//     opledger.ledger.complete.duration, histograms in seconds, with the
//     outcome ("ok" or "failed" for Complete).
//
// Every measurement carries db.system.name, db.collection.name (the
// table) and opledger.method (the full method); a failure also carries
// error.type and, when the database gave one, db.response.status_code
// (the SQLSTATE or error number). Never a key or a caller.
func WithMeterProvider(mp metric.MeterProvider) Option {
	return Option{options.New("WithMeterProvider", func(c *config) error {
		if mp == nil {
			return errors.New("meter provider must not be nil")
		}
		c.mp = mp
		return nil
	})}
}

// WithTracerProvider sets where the Store's spans go (default: the global
// tracer provider). Claim and Complete each record a span,
// opledger.claim and opledger.complete, a child of the span in their
// context, with the metrics' attributes and the short hash of the key
// (opledger.key_hash: the first six bytes of its SHA-256, in hex).
func WithTracerProvider(tp trace.TracerProvider) Option {
	return Option{options.New("WithTracerProvider", func(c *config) error {
		if tp == nil {
			return errors.New("tracer provider must not be nil")
		}
		c.tp = tp
		return nil
	})}
}

// observer holds a Store's instruments.
type observer struct {
	d           dialects.Dialect
	tracer      trace.Tracer
	claims      metric.Int64Counter
	claimDur    metric.Float64Histogram
	completeDur metric.Float64Histogram
	base        []attribute.KeyValue // db.system.name, db.collection.name
}

func newObserver(d dialects.Dialect, table string, mp metric.MeterProvider, tp trace.TracerProvider) *observer {
	m := telemetry.MeterProvider(mp).Meter(telemetry.ScopePrefix + "ledger")
	o := &observer{
		d:      d,
		tracer: telemetry.TracerProvider(tp).Tracer(telemetry.ScopePrefix + "ledger"),
		claims: telemetry.Inst(m.Int64Counter("opledger.ledger.claims",
			metric.WithUnit("{claim}"), metric.WithDescription("Claims of the operation ledger, by outcome."))),
		claimDur: telemetry.Inst(m.Float64Histogram("opledger.ledger.claim.duration",
			metric.WithUnit("s"), metric.WithDescription("Duration of a claim of the operation ledger."),
			metric.WithExplicitBucketBoundaries(telemetry.DurationBounds...))),
		completeDur: telemetry.Inst(m.Float64Histogram("opledger.ledger.complete.duration",
			metric.WithUnit("s"), metric.WithDescription("Duration of the completion of an acquired claim."),
			metric.WithExplicitBucketBoundaries(telemetry.DurationBounds...))),
		base: []attribute.KeyValue{
			telemetry.DBSystemName.String(dialectkit.SystemNameOf(d)),
			telemetry.DBCollectionName.String(table),
		},
	}
	return o
}

// op is one observed ledger operation.
type op struct {
	start time.Time
	span  trace.Span
}

func (o *observer) begin(ctx context.Context, name string, id Identity) (context.Context, op) {
	ctx, span := o.tracer.Start(ctx, name, trace.WithSpanKind(trace.SpanKindInternal))
	if span.IsRecording() {
		span.SetAttributes(o.base...)
		span.SetAttributes(telemetry.Method.String(id.Method()), telemetry.KeyHash.String(telemetry.ShortHash(id.keyHash)))
	}
	return ctx, op{start: time.Now(), span: span}
}

// attrs returns the attributes of a finished operation.
func (o *observer) attrs(method, outcome string, err error) []attribute.KeyValue {
	a := append(append(make([]attribute.KeyValue, 0, 6), o.base...), telemetry.Method.String(method), telemetry.Outcome.String(outcome))
	if outcome == outcomes.Failed || outcome == outcomes.Retryable || outcome == outcomes.InProgress {
		if t := errorType(err); t != "" {
			a = append(a, telemetry.ErrorType.String(t))
		}
		if code := dialectkit.StatusCodeOf(o.d, err); code != "" {
			a = append(a, telemetry.DBStatusCode.String(code))
		}
	}
	return a
}

// finish records a finished operation in h (and c, when not nil) and ends
// its span. It builds no attributes when nothing records them.
func (o *observer) finish(ctx context.Context, p op, h metric.Float64Histogram, c metric.Int64Counter, method, outcome string, err error, failed bool) {
	metrics := h.Enabled(ctx) || (c != nil && c.Enabled(ctx))
	if !metrics && !p.span.IsRecording() {
		p.span.End()
		return
	}
	a := o.attrs(method, outcome, err)
	if metrics {
		set := metric.WithAttributeSet(attribute.NewSet(a...))
		h.Record(ctx, time.Since(p.start).Seconds(), set)
		if c != nil {
			c.Add(ctx, 1, set)
		}
	}
	if p.span.IsRecording() {
		p.span.SetAttributes(a[len(o.base)+1:]...) // the base and the method are set already
		if failed {
			p.span.SetStatus(codes.Error, outcome)
		}
	}
	p.span.End()
}

// claimed records a finished Claim.
func (o *observer) claimed(ctx context.Context, p op, id Identity, c *Claim, err error) {
	outcome := claimOutcome(c, err)
	o.finish(ctx, p, o.claimDur, o.claims, id.Method(), outcome, err, outcome == outcomes.Failed || outcome == outcomes.Retryable)
}

// completed records a finished Complete.
func (o *observer) completed(ctx context.Context, p op, c *Claim, err error) {
	outcome := "ok"
	if err != nil {
		outcome = outcomes.Failed
	}
	var method string
	if c != nil {
		method = c.Identity.Method()
	}
	o.finish(ctx, p, o.completeDur, nil, method, outcome, err, err != nil)
}

// claimOutcome names what a Claim returned, as the opledger.outcome of
// the ledger's metrics (package outcomes).
func claimOutcome(c *Claim, err error) string {
	switch {
	case err == nil && c.Acquired() && c.tookOver:
		return outcomes.TakenOver
	case err == nil && c.Acquired():
		return outcomes.Acquired
	case err == nil && c.Recorded():
		return outcomes.Recorded
	case err == nil && c != nil:
		return outcomes.Replayed
	case errors.Is(err, ErrKeyReused):
		return outcomes.KeyReused
	case errors.Is(err, ErrInProgress):
		return outcomes.InProgress
	case errors.Is(err, ErrIncomplete):
		return outcomes.Incomplete
	case errors.Is(err, ErrKeyExpired):
		return outcomes.KeyExpired
	case errors.Is(err, ErrRetryable):
		return outcomes.Retryable
	}
	return outcomes.Failed
}

// errorType is the error.type of a ledger failure: bad input, the
// database's class of failure, or the context's error.
func errorType(err error) string {
	var (
		dbe   *DBError
		class string
	)
	switch {
	case err == nil:
		return ""
	case errors.Is(err, ErrInvalid):
		class = "invalid_input"
	case errors.Is(err, ErrNotAcquired):
		class = "not_acquired"
	case errors.As(err, &dbe):
		class = strings.ReplaceAll(dbe.Class.String(), " ", "_")
	}
	return telemetry.ErrorTypeOf(err, class)
}
