package txrun

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/metric/noop"
	"go.opentelemetry.io/otel/trace"

	"github.com/opledger/opledger/dialects"
	"github.com/opledger/opledger/internal/dialectkit"
	"github.com/opledger/opledger/internal/outcomes"
	"github.com/opledger/opledger/internal/telemetry"
	"github.com/opledger/opledger/internal/txledger"
	"github.com/opledger/opledger/ledger"
)

// observer holds a runner's instruments.
type observer struct {
	d             dialects.Dialect
	system        attribute.KeyValue
	tracer        trace.Tracer
	log           *slog.Logger
	duration      metric.Float64Histogram
	attempts      metric.Int64Histogram
	commitUnknown metric.Int64Counter
}

func newObserver(d dialects.Dialect, c *Config) *observer {
	mp, logger := telemetry.MeterProvider(c.MP), c.Logger
	if c.SpansOnly {
		mp, logger = noop.NewMeterProvider(), nil
	}
	m := mp.Meter(telemetry.ScopePrefix + "txmiddleware")
	return &observer{
		d:      d,
		system: telemetry.DBSystemName.String(dialectkit.SystemNameOf(d)),
		tracer: telemetry.TracerProvider(c.TP).Tracer(telemetry.ScopePrefix + "txmiddleware"),
		log:    telemetry.Logger(logger),
		duration: telemetry.Inst(m.Float64Histogram("opledger.tx.duration", metric.WithUnit("s"),
			metric.WithDescription("Duration of a keyed transaction, all its attempts included."),
			metric.WithExplicitBucketBoundaries(telemetry.DurationBounds...))),
		attempts: telemetry.Inst(m.Int64Histogram("opledger.tx.attempts", metric.WithUnit("{attempt}"),
			metric.WithDescription("Attempts of the transaction per run."),
			metric.WithExplicitBucketBoundaries(telemetry.AttemptBounds...))),
		commitUnknown: telemetry.Inst(m.Int64Counter("opledger.tx.commit_unknown", metric.WithUnit("{commit}"),
			metric.WithDescription("Commits whose outcome is unknown (the connection broke or the context ended during COMMIT)."))),
	}
}

// internalSpan is the kind of the runner's span, made once.
var internalSpan = trace.WithSpanKind(trace.SpanKindInternal)

type runOp struct {
	start time.Time
	span  trace.Span
}

func (o *observer) begin(ctx context.Context, req ledger.ClaimRequest) (context.Context, runOp) {
	ctx, span := o.tracer.Start(ctx, "opledger.tx", internalSpan)
	if span.IsRecording() {
		span.SetAttributes(o.system, telemetry.Method.String(req.Identity.Method()),
			telemetry.KeyHash.String(telemetry.ShortHash(txledger.KeyHash(req.Identity))))
	}
	return ctx, runOp{start: time.Now(), span: span}
}

// outcome names what Run returned.
func (o *observer) outcome(out Result, err error) string {
	switch {
	case out.Executed:
		return outcomes.Executed // a result, or a recorded final error
	case out.Replayed:
		return outcomes.Replayed
	case errors.Is(err, ledger.ErrKeyReused):
		return outcomes.KeyReused
	case errors.Is(err, ledger.ErrInProgress):
		return outcomes.InProgress
	case errors.Is(err, ErrBusy):
		return outcomes.Busy
	case errors.Is(err, ledger.ErrIncomplete):
		return outcomes.Incomplete
	case errors.Is(err, ledger.ErrKeyExpired):
		return outcomes.KeyExpired
	case errors.Is(err, ErrCommitUnknown):
		return outcomes.CommitUnknown
	case errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded):
		return outcomes.RequestEnded
	case errors.Is(err, ledger.ErrRetryable):
		return outcomes.TxAborted
	}
	return outcomes.Failed
}

func (o *observer) errorType(err error) string {
	class := ""
	if c := o.d.Classify(err); c != dialects.ClassOther {
		class = strings.ReplaceAll(c.String(), " ", "_")
	}
	return telemetry.ErrorTypeOf(err, class)
}

// ran records a finished Run and logs its event, if it has one.
func (o *observer) ran(ctx context.Context, p runOp, req ledger.ClaimRequest, out Result, err error) {
	outcome := o.outcome(out, err)
	method := req.Identity.Method()
	failed := outcome == outcomes.CommitUnknown || outcome == outcomes.TxAborted || outcome == outcomes.Failed
	metrics := o.duration.Enabled(ctx) || o.attempts.Enabled(ctx) || o.commitUnknown.Enabled(ctx)
	if metrics || p.span.IsRecording() {
		a := []attribute.KeyValue{o.system, telemetry.Method.String(method), telemetry.Outcome.String(outcome)}
		switch {
		case failed:
			a = append(a, telemetry.ErrorType.String(o.errorType(err)))
		case outcome == outcomes.Executed && err != nil:
			a = append(a, telemetry.ErrorType.String(outcomes.ErrorTypeFinal))
		}
		if metrics {
			set := metric.WithAttributeSet(attribute.NewSet(a...))
			o.duration.Record(ctx, time.Since(p.start).Seconds(), set)
			if out.Attempts > 0 {
				o.attempts.Record(ctx, int64(out.Attempts), set)
			}
			if outcome == outcomes.CommitUnknown {
				o.commitUnknown.Add(ctx, 1, metric.WithAttributes(o.system, telemetry.Method.String(method)))
			}
		}
		if p.span.IsRecording() {
			p.span.SetAttributes(append(a[2:], telemetry.Attempts.Int(out.Attempts))...)
			if failed {
				p.span.SetStatus(codes.Error, outcome)
			}
		}
	}
	p.span.End()

	var level slog.Level
	msg := "opledger: claim refused"
	switch outcome {
	case outcomes.KeyReused, outcomes.Incomplete:
		level = slog.LevelWarn
	case outcomes.InProgress, outcomes.Busy, outcomes.KeyExpired:
		level = slog.LevelInfo
	case outcomes.CommitUnknown:
		level, msg = slog.LevelError, "opledger: commit outcome unknown"
	default:
		return
	}
	if o.log.Enabled(ctx, level) {
		o.log.LogAttrs(ctx, level, msg, slog.String(telemetry.LogMethod, method), slog.String("outcome", outcome),
			slog.String("key_hash", telemetry.ShortHash(txledger.KeyHash(req.Identity))), slog.Int("attempts", out.Attempts))
	}
}

// claimed logs a claim that took over an expired entry.
func (o *observer) claimed(ctx context.Context, req ledger.ClaimRequest, c *ledger.Claim) {
	if txledger.TookOver(c) && o.log.Enabled(ctx, slog.LevelInfo) {
		o.log.LogAttrs(ctx, slog.LevelInfo, "opledger: expired entry taken over", slog.String(telemetry.LogMethod, req.Identity.Method()),
			slog.String("outcome", outcomes.TakenOver), slog.String("key_hash", telemetry.ShortHash(txledger.KeyHash(req.Identity))))
	}
}
