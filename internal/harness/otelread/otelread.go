// Package otelread reads what an OpenTelemetry SDK collected, for the
// kit's tests and for opledger demo: a meter provider with a manual
// reader whose data come back as flat points, a tracer provider with an
// in-memory exporter, and a slog logger into memory. It imports the SDK, so only tests and commands
// import it, never a library package.
package otelread

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"sort"
	"strings"
	"sync"

	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
)

// Metrics is a meter provider whose measurements are read on demand.
type Metrics struct {
	// Provider is the meter provider to pass to the kit's options.
	Provider *sdkmetric.MeterProvider
	reader   *sdkmetric.ManualReader
}

// NewMetrics returns a meter provider with a manual reader.
func NewMetrics() *Metrics {
	r := sdkmetric.NewManualReader()
	return &Metrics{Provider: sdkmetric.NewMeterProvider(sdkmetric.WithReader(r)), reader: r}
}

// Point is one data point: a counter's or gauge's value, or a
// histogram's count, sum and buckets.
type Point struct {
	Scope  string
	Name   string
	Unit   string
	Attrs  attribute.Set
	Value  float64 // sum or gauge value; a histogram's sum
	Count  uint64  // histogram only
	Bounds []float64
	Counts []uint64 // histogram bucket counts, len(Bounds)+1
	IsHist bool
}

// Attr returns the value of attribute k as a string ("" when absent).
func (p Point) Attr(k attribute.Key) string {
	v, ok := p.Attrs.Value(k)
	if !ok {
		return ""
	}
	return v.Emit()
}

// Collect reads every point recorded so far.
func (m *Metrics) Collect(ctx context.Context) ([]Point, error) {
	var rm metricdata.ResourceMetrics
	if err := m.reader.Collect(ctx, &rm); err != nil {
		return nil, err
	}
	var out []Point
	for _, sm := range rm.ScopeMetrics {
		for _, md := range sm.Metrics {
			base := Point{Scope: sm.Scope.Name, Name: md.Name, Unit: md.Unit}
			switch d := md.Data.(type) {
			case metricdata.Sum[int64]:
				out = values(out, base, d.DataPoints)
			case metricdata.Sum[float64]:
				out = values(out, base, d.DataPoints)
			case metricdata.Gauge[int64]:
				out = values(out, base, d.DataPoints)
			case metricdata.Gauge[float64]:
				out = values(out, base, d.DataPoints)
			case metricdata.Histogram[float64]:
				out = histograms(out, base, d.DataPoints)
			case metricdata.Histogram[int64]:
				out = histograms(out, base, d.DataPoints)
			}
		}
	}
	sort.SliceStable(out, func(i, j int) bool {
		if out[i].Name != out[j].Name {
			return out[i].Name < out[j].Name
		}
		return out[i].Attrs.Encoded(attribute.DefaultEncoder()) < out[j].Attrs.Encoded(attribute.DefaultEncoder())
	})
	return out, nil
}

func values[N int64 | float64](out []Point, base Point, dps []metricdata.DataPoint[N]) []Point {
	for _, dp := range dps {
		p := base
		p.Attrs, p.Value = dp.Attributes, float64(dp.Value)
		out = append(out, p)
	}
	return out
}

func histograms[N int64 | float64](out []Point, base Point, dps []metricdata.HistogramDataPoint[N]) []Point {
	for _, dp := range dps {
		p := base
		p.Attrs, p.Value, p.Count, p.IsHist = dp.Attributes, float64(dp.Sum), dp.Count, true
		p.Bounds, p.Counts = dp.Bounds, dp.BucketCounts
		out = append(out, p)
	}
	return out
}

// Select returns the points of metric name whose attributes include all
// of match.
func Select(points []Point, name string, match ...attribute.KeyValue) []Point {
	var out []Point
	for _, p := range points {
		if p.Name != name {
			continue
		}
		ok := true
		for _, kv := range match {
			if v, has := p.Attrs.Value(kv.Key); !has || v != kv.Value {
				ok = false
				break
			}
		}
		if ok {
			out = append(out, p)
		}
	}
	return out
}

// Sum adds the values (a histogram's: the counts) of the points of name
// that match.
func Sum(points []Point, name string, match ...attribute.KeyValue) float64 {
	var s float64
	for _, p := range Select(points, name, match...) {
		if p.IsHist {
			s += float64(p.Count)
		} else {
			s += p.Value
		}
	}
	return s
}

// HistSum adds the sums of the histogram points of name that match.
func HistSum(points []Point, name string, match ...attribute.KeyValue) float64 {
	var s float64
	for _, p := range Select(points, name, match...) {
		s += p.Value
	}
	return s
}

// String renders a point on one line: name{attrs} value (or count and
// sum for a histogram).
func (p Point) String() string {
	var b strings.Builder
	b.WriteString(p.Name)
	b.WriteString("{")
	b.WriteString(p.Attrs.Encoded(attribute.DefaultEncoder()))
	b.WriteString("} ")
	if p.IsHist {
		fmt.Fprintf(&b, "count=%d sum=%g", p.Count, p.Value)
	} else {
		fmt.Fprintf(&b, "%g", p.Value)
	}
	return b.String()
}

// Spans is a tracer provider that keeps every ended span in memory.
type Spans struct {
	// Provider is the tracer provider to pass to the kit's options.
	Provider *sdktrace.TracerProvider
	exp      *tracetest.InMemoryExporter
}

// NewSpans returns a tracer provider that samples every span and exports
// it synchronously to memory.
func NewSpans() *Spans {
	exp := tracetest.NewInMemoryExporter()
	return &Spans{Provider: sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp), sdktrace.WithSampler(sdktrace.AlwaysSample())), exp: exp}
}

// Ended returns the spans ended so far.
func (s *Spans) Ended() tracetest.SpanStubs { return s.exp.GetSpans() }

// SpanAttr returns attribute key of the first span called name, as a
// string ("" when there is none).
func SpanAttr(spans tracetest.SpanStubs, name string, key attribute.Key) string {
	for _, s := range spans {
		if s.Name != name {
			continue
		}
		for _, kv := range s.Attributes {
			if kv.Key == key {
				return kv.Value.Emit()
			}
		}
	}
	return ""
}

// Logs is a JSON slog logger that writes into memory, for tests that read
// back the events the kit logged.
type Logs struct {
	// Logger logs at every level, Debug included.
	Logger *slog.Logger
	mu     sync.Mutex
	buf    bytes.Buffer
}

// NewLogs returns an empty log.
func NewLogs() *Logs {
	l := &Logs{}
	l.Logger = slog.New(slog.NewJSONHandler(lockedWriter{l}, &slog.HandlerOptions{Level: slog.LevelDebug}))
	return l
}

type lockedWriter struct{ l *Logs }

func (w lockedWriter) Write(p []byte) (int, error) {
	w.l.mu.Lock()
	defer w.l.mu.Unlock()
	return w.l.buf.Write(p)
}

// Text returns everything logged so far.
func (l *Logs) Text() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.String()
}

// Events returns the events logged so far, each as its JSON fields.
func (l *Logs) Events() []map[string]any {
	var out []map[string]any
	for _, line := range strings.Split(l.Text(), "\n") {
		if line == "" {
			continue
		}
		var m map[string]any
		if json.Unmarshal([]byte(line), &m) == nil {
			out = append(out, m)
		}
	}
	return out
}

// Count returns how many events have all the given fields (as strings).
func (l *Logs) Count(fields map[string]string) int {
	n := 0
	for _, e := range l.Events() {
		ok := true
		for k, v := range fields {
			if fmt.Sprint(e[k]) != v {
				ok = false
				break
			}
		}
		if ok {
			n++
		}
	}
	return n
}
