package keyedcore

import (
	"context"
	"log/slog"
	"sync"

	"go.opentelemetry.io/otel/attribute"
	otelcodes "go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/metric"
	metricnoop "go.opentelemetry.io/otel/metric/noop"
	"go.opentelemetry.io/otel/trace"
	tracenoop "go.opentelemetry.io/otel/trace/noop"

	"github.com/opledger/opledger/internal/keyedconf"
	"github.com/opledger/opledger/internal/telemetry"
	"github.com/opledger/opledger/internal/txrun"
	"github.com/opledger/opledger/keyed"
	"github.com/opledger/opledger/txmiddleware"
)

// Telemetry is a transport server's telemetry, recorded by the core:
//
//   - opledger.server.calls, a counter of keyed calls by opledger.outcome
//     (the outcome's [Row].Name: executed, replayed,
//     idempotency-key-reused, …), opledger.outcome.kind (its [Kind]:
//     executed, replayed, refused, failed), opledger.reason (its
//     [Row].Reason, when it has one) and, once the key was read,
//     opledger.key.birth ([BirthAttr]: where the key's birth came from,
//     key, first-sent or unknown);
//   - opledger.server.resolves, a counter of resolve requests by the same
//     attributes (replayed for a stored answer, operation-not-found of
//     kind not-found, …);
//   - one opledger.keyed_call span per keyed call (opledger.resolve for a
//     resolve request), the parent of its runner's, with the outcome, its
//     kind, the reason and the key's short hash;
//   - one log event per call refused before its claim ("opledger: keyed
//     call refused") and per resolve request ("opledger: resolve"), with
//     the method, the outcome (its name), the reason and the key's short
//     hash;
//   - opledger.server.retries_by_layer, a counter of requests a layer had
//     retried, by opledger.retry.layer, opledger.retry.second_owner and
//     opledger.owner (when known), and one warning per method and layer
//     that is a second retry owner ("opledger: second retry owner"), with
//     the method, the layer, the owner, where it comes from, the header
//     and the attempt (see [Server.Retries]).
//
// Each carries opledger.method, the full method as the ledger stores it
// (on every transport: /pkg.Service/Method, or an HTTP route's "POST
// /path/{id}"; a log event's method field holds the same), and the
// transport's attributes of its rendering (see [Call.End]); never a key, a caller, a request or a
// response. The runners get the same providers and logger (the resolve
// probe only the tracer provider).
type Telemetry struct {
	// MeterProvider; nil: the global one.
	MeterProvider metric.MeterProvider
	// TracerProvider; nil: the global one.
	TracerProvider trace.TracerProvider
	// Logger; nil discards.
	Logger *slog.Logger
	// Scope is the instrumentation scope's name (the transport's import
	// path).
	Scope string
}

// TelemetryOf is the Telemetry of a transport's server configured with
// t (keyed's telemetry options; nil: none given, and nil returned), with
// the transport's scope (its name).
func TelemetryOf(t *keyedconf.Telemetry, transport string) *Telemetry {
	if t == nil {
		return nil
	}
	return &Telemetry{MeterProvider: t.MeterProvider, TracerProvider: t.TracerProvider, Logger: t.Logger,
		Scope: telemetry.ScopePrefix + transport}
}

// observer holds a Server's instruments.
type observer struct {
	tel      *Telemetry
	tracer   trace.Tracer
	log      *slog.Logger
	calls    metric.Int64Counter
	resolves metric.Int64Counter
	retries  metric.Int64Counter
	// logged holds the method and layer pairs whose second owner was
	// logged (see retried).
	logged sync.Map
}

func newObserver(tel *Telemetry) *observer {
	var (
		mp metric.MeterProvider = metricnoop.NewMeterProvider()
		tp trace.TracerProvider = tracenoop.NewTracerProvider()
		lg *slog.Logger
	)
	scope := telemetry.ScopePrefix + "keyed"
	o := &observer{tel: tel}
	if tel != nil {
		mp, tp, lg = telemetry.MeterProvider(tel.MeterProvider), telemetry.TracerProvider(tel.TracerProvider), tel.Logger
		if tel.Scope != "" {
			scope = tel.Scope
		}
	}
	m := mp.Meter(scope)
	o.tracer, o.log = tp.Tracer(scope), telemetry.Logger(lg)
	o.calls = telemetry.Inst(m.Int64Counter("opledger.server.calls", metric.WithUnit("{call}"),
		metric.WithDescription("Keyed calls the server handled, by outcome.")))
	o.resolves = telemetry.Inst(m.Int64Counter("opledger.server.resolves", metric.WithUnit("{resolve}"),
		metric.WithDescription("Resolve requests the server answered, by outcome.")))
	o.retries = telemetry.Inst(m.Int64Counter("opledger.server.retries_by_layer", metric.WithUnit("{attempt}"),
		metric.WithDescription("Requests the server received that a layer had retried, by layer and whether that layer is a second retry owner.")))
	return o
}

// runnerOptions are the telemetry options of the calls' runners.
func (o *observer) runnerOptions() []txmiddleware.Option {
	if o.tel == nil {
		return nil
	}
	return []txmiddleware.Option{txmiddleware.WithMeterProvider(telemetry.MeterProvider(o.tel.MeterProvider)),
		txmiddleware.WithTracerProvider(telemetry.TracerProvider(o.tel.TracerProvider)), txmiddleware.WithLogger(o.tel.Logger)}
}

// probeOptions are the resolve probe's: its spans, neither metrics nor
// log events (its claim always rolls back; the resolve is what counts).
func (o *observer) probeOptions() []txmiddleware.Option {
	opts := []txmiddleware.Option{txrun.WithSpansOnly()}
	if o.tel != nil {
		opts = append(opts, txmiddleware.WithTracerProvider(telemetry.TracerProvider(o.tel.TracerProvider)))
	}
	return opts
}

type callOp struct{ span trace.Span }

// begin starts a keyed call's span.
func (o *observer) begin(ctx context.Context, method string, resolve bool) (context.Context, callOp) {
	name := "opledger.keyed_call"
	if resolve {
		name = "opledger.resolve"
	}
	ctx, span := o.tracer.Start(ctx, name, trace.WithSpanKind(trace.SpanKindInternal))
	if span.IsRecording() {
		span.SetAttributes(telemetry.Method.String(method))
	}
	return ctx, callOp{span: span}
}

// keyed notes the call's key (its short hash) on the span.
func (o *observer) keyed(op callOp, key string) {
	if op.span.IsRecording() {
		op.span.SetAttributes(telemetry.KeyHash.String(telemetry.KeyHashOf(key)))
	}
}

// kindOf is the opledger.outcome.kind of an answer: its outcome's kind
// (failed for one that has none).
func kindOf(o keyed.Outcome) keyed.OutcomeKind {
	if k := o.Row().Kind; k != "" {
		return k
	}
	return keyed.KindFailed
}

// end records a finished call: counter, span and log event.
func (o *observer) end(ctx context.Context, op callOp, method string, resolve bool, key string, a Answer, extra []attribute.KeyValue) {
	row := a.Row()
	outcome, kind := a.Outcome.String(), kindOf(a.Outcome)
	attrs := append([]attribute.KeyValue{telemetry.Method.String(method), telemetry.Outcome.String(outcome), telemetry.OutcomeKind.String(string(kind))}, extra...)
	if row.Reason != "" {
		attrs = append(attrs, telemetry.Reason.String(row.Reason))
	}
	c := o.calls
	if resolve {
		c = o.resolves
	}
	if c.Enabled(ctx) {
		c.Add(ctx, 1, metric.WithAttributes(attrs...))
	}
	if op.span.IsRecording() {
		op.span.SetAttributes(attrs[1:]...)
		if kind == keyed.KindFailed {
			op.span.SetStatus(otelcodes.Error, outcome)
		}
	}
	op.span.End()
	var msg string
	switch {
	case resolve:
		msg = "opledger: resolve"
	case row.Kind == keyed.KindRefused && row.Committed == keyed.CommittedNA:
		msg = "opledger: keyed call refused"
	default:
		return
	}
	if o.log.Enabled(ctx, slog.LevelInfo) {
		la := []slog.Attr{slog.String(telemetry.LogMethod, method), slog.String("outcome", outcome)}
		if row.Reason != "" {
			la = append(la, slog.String("reason", row.Reason))
		}
		if key != "" {
			la = append(la, slog.String("key_hash", telemetry.KeyHashOf(key)))
		}
		o.log.LogAttrs(ctx, slog.LevelInfo, msg, la...)
	}
}
