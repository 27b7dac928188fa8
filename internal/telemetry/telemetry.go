// Package telemetry holds what the kit's packages share for their
// OpenTelemetry instruments and structured logs: the attribute keys, the
// histogram boundaries, the short key hash, the error.type of a failure
// and the default (global) providers. It uses the OpenTelemetry API only;
// without an SDK every instrument is a no-op.
package telemetry

import (
	"context"
	"crypto/sha256"
	"database/sql"
	"encoding/hex"
	"errors"
	"log/slog"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"
)

// ScopePrefix is the start of every instrumentation scope name: the
// package's import path follows it.
const ScopePrefix = "github.com/opledger/opledger/"

// Attribute keys. The db.*, error.type, http.response.status_code and
// rpc.connect_rpc.error_code keys are OpenTelemetry's semantic
// conventions; grpc.method, grpc.target and grpc.status are gRFC A66's;
// the opledger.* keys are the kit's own.
//
// One key names a method on every transport: opledger.method, the full
// method as the ledger stores it ("/pkg.Service/Method" for gRPC and
// connect, "POST /path/{id}" for an HTTP route), on every instrument, span
// and log event (whose field is [LogMethod]) of the kit's, so that one
// query covers the three transports and the ledger's and runner's
// instruments. grpc.method (without the leading slash) is only on gRFC
// A96's client histograms, beside opledger.method, because A96 defines
// them with it.
const (
	DBSystemName     = attribute.Key("db.system.name")
	DBCollectionName = attribute.Key("db.collection.name")
	DBStatusCode     = attribute.Key("db.response.status_code")
	ErrorType        = attribute.Key("error.type")
	GRPCMethod       = attribute.Key("grpc.method")
	GRPCTarget       = attribute.Key("grpc.target")
	GRPCStatus       = attribute.Key("grpc.status")
	ConnectCode      = attribute.Key("rpc.connect_rpc.error_code")
	HTTPStatus       = attribute.Key("http.response.status_code")
	Method           = attribute.Key("opledger.method")
	Outcome          = attribute.Key("opledger.outcome")
	OutcomeKind      = attribute.Key("opledger.outcome.kind")
	Reason           = attribute.Key("opledger.reason")
	Owner            = attribute.Key("opledger.owner")
	Attempts         = attribute.Key("opledger.attempts")
	KeyHash          = attribute.Key("opledger.key_hash")
	KeyBirth         = attribute.Key("opledger.key.birth")
	RetryLayer       = attribute.Key("opledger.retry.layer")
	SecondOwner      = attribute.Key("opledger.retry.second_owner")
)

// LogMethod is the field of a log event that names its method: the value
// of [Method] (the full method as the ledger stores it).
const LogMethod = "method"

// Histogram boundaries.
var (
	// DurationBounds are the boundaries, in seconds, of the kit's duration
	// histograms: OpenTelemetry's database-operation boundaries with finer
	// steps below 10 ms.
	DurationBounds = []float64{0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10}
	// AttemptBounds are the boundaries of the attempts-per-run histogram.
	AttemptBounds = []float64{1, 2, 3, 4, 5, 10}
	// RetryBounds and TransparentRetryBounds are gRFC A96's recommended
	// boundaries for grpc.client.call.retries and
	// grpc.client.call.transparent_retries.
	RetryBounds            = []float64{1, 2, 3, 4, 5}
	TransparentRetryBounds = []float64{1, 2, 3, 4, 5, 10}
	// LatencyBounds are gRFC A66's latency boundaries, which A96
	// recommends for grpc.client.call.retry_delay.
	LatencyBounds = []float64{0, 0.00001, 0.00005, 0.0001, 0.0003, 0.0006, 0.0008, 0.001, 0.002,
		0.003, 0.004, 0.005, 0.006, 0.008, 0.01, 0.013, 0.016, 0.02, 0.025, 0.03,
		0.04, 0.05, 0.065, 0.08, 0.1, 0.13, 0.16, 0.2, 0.25, 0.3, 0.4, 0.5, 0.65,
		0.8, 1, 2, 5, 10, 20, 50, 100}
)

// MeterProvider returns mp, or the global meter provider when mp is nil.
func MeterProvider(mp metric.MeterProvider) metric.MeterProvider {
	if mp == nil {
		return otel.GetMeterProvider()
	}
	return mp
}

// TracerProvider returns tp, or the global tracer provider when tp is nil.
func TracerProvider(tp trace.TracerProvider) trace.TracerProvider {
	if tp == nil {
		return otel.GetTracerProvider()
	}
	return tp
}

// Logger returns l, or a logger that discards everything when l is nil.
func Logger(l *slog.Logger) *slog.Logger {
	if l == nil {
		return slog.New(slog.DiscardHandler)
	}
	return l
}

// ShortHash is the short form of a SHA-256 that logs and spans carry: its
// first six bytes in hex.
func ShortHash(sum [32]byte) string { return hex.EncodeToString(sum[:6]) }

// KeyHashOf returns the short hash of an idempotency key: ShortHash of
// its SHA-256, the hash the ledger stores (never the key itself).
func KeyHashOf(key string) string { return ShortHash(sha256.Sum256([]byte(key))) }

// ErrorTypeOf returns a low-cardinality name for err, for error.type:
// the context's errors and sql.ErrTxDone by name, else class (the
// database's classification, or "" when none applies), else "_OTHER" as
// the semantic conventions say. It never returns an error's message.
func ErrorTypeOf(err error, class string) string {
	switch {
	case err == nil:
		return ""
	case errors.Is(err, context.Canceled):
		return "canceled"
	case errors.Is(err, context.DeadlineExceeded):
		return "deadline_exceeded"
	case errors.Is(err, sql.ErrTxDone):
		return "tx_done"
	case class != "":
		return class
	}
	return "_OTHER"
}

// Inst returns inst and drops err: the API returns a usable instrument
// even with an error (which the SDK also reports to otel's error
// handler), and the kit never fails because telemetry could not be set
// up.
func Inst[T any](inst T, _ error) T { return inst }
