package payments_test

import (
	"context"
	"strings"
	"sync"
	"testing"

	"go.opentelemetry.io/otel/attribute"

	"github.com/opledger/opledger/internal/harness/otelread"
	"github.com/opledger/opledger/internal/outcomes"
	"github.com/opledger/opledger/internal/testkit/testdb"
	"github.com/opledger/opledger/keyed"
	"github.com/opledger/opledger/ledger"
)

// TestFullRunLogsNoKey runs the demo's scenario (300 transfers with
// answers lost after commit, then an outage) on every database with
// every logger, meter and tracer of the kit on, then scans all the log
// output, every metric attribute and every span attribute for the raw
// idempotency keys and the caller: none may appear. The run's kit
// metrics also agree with its report.
func TestFullRunLogsNoKey(t *testing.T) {
	t.Parallel()
	for _, tg := range e2eTargets() {
		t.Run(tg.Name, func(t *testing.T) {
			testdb.Parallel(t, tg.Family(), 16)
			m, sp, logs := otelread.NewMetrics(), otelread.NewSpans(), otelread.NewLogs()
			var (
				mu   sync.Mutex
				keys []string
			)
			sc := scenario(t, tg, 300)
			sc.OutageCalls = 50
			sc.Faults = lossAtThreePlaces(11)
			sc.Caller = "caller-secret-7e1d"
			sc.NewKey = func() string {
				k := keyed.NewKey()
				mu.Lock()
				keys = append(keys, k)
				mu.Unlock()
				return k
			}
			sc.LedgerOptions = []ledger.Option{ledger.WithMeterProvider(m.Provider), ledger.WithTracerProvider(sp.Provider)}
			sc.ServerOptions = []keyed.ServerOption{keyed.WithMeterProvider(m.Provider),
				keyed.WithTracerProvider(sp.Provider), keyed.WithLogger(logs.Logger)}
			sc.ClientOptions = []keyed.ClientOption{keyed.WithMeterProvider(m.Provider),
				keyed.WithTracerProvider(sp.Provider), keyed.WithLogger(logs.Logger)}
			rep, err := sc.Run(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			checkDefinite(t, rep)
			points, err := m.Collect(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			var all strings.Builder
			all.WriteString(logs.Text())
			for _, p := range points {
				all.WriteString(p.String())
			}
			for _, s := range sp.Ended() {
				for _, a := range s.Attributes {
					all.WriteString(string(a.Key) + "=" + a.Value.Emit() + "\n")
				}
			}
			text := all.String()
			if len(keys) < 350 {
				t.Fatalf("%d keys recorded, want one per call", len(keys))
			}
			for _, k := range append(keys, sc.Caller) {
				if strings.Contains(text, k) {
					t.Fatalf("%q appears in the log, a metric or a span", k)
				}
			}
			events := logs.Events()
			if len(events) == 0 {
				t.Fatal("nothing was logged")
			}
			t.Logf("%s: %d log events, %d metric points, %d spans; no key in any", tg.Name, len(events), len(points), len(sp.Ended()))
			// The server's counters and the SDK's agree.
			if got := otelread.Sum(points, "opledger.server.calls", attribute.String("opledger.outcome", "executed")); int64(got) != rep.Executed {
				t.Errorf("opledger.server.calls executed %v, report %d", got, rep.Executed)
			}
			if got := otelread.Sum(points, "opledger.tx.duration", attribute.String("opledger.outcome", outcomes.Executed)); int64(got) != rep.Executed {
				t.Errorf("opledger.tx.duration executed %v, report %d", got, rep.Executed)
			}
		})
	}
}
