package payments_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/opledger/opledger/examples/payments"
	"github.com/opledger/opledger/internal/testkit/testdb"
)

// TestScenarioEvents: OnEvent receives every logical call of both
// phases, the outage, and the faults injected, as many as the report
// counts; resolved answers are told apart.
func TestScenarioEvents(t *testing.T) {
	for _, transport := range []string{payments.TransportGRPC, payments.TransportHTTP} {
		t.Run(transport, func(t *testing.T) {
			sc := scenario(t, testdb.Targets()[0], 200)
			sc.Transport = transport
			sc.OutageCalls = 30
			sc.OutagePause = 100 * time.Millisecond
			sc.Faults = payments.FaultSettings{DropAfterCommit: 0.2, FailBeforeSend: 0.05, Seed: 5}
			var mu sync.Mutex
			var calls, outages, resolved, failed int
			var faults payments.FaultCounts
			sc.OnEvent = func(e payments.Event) {
				mu.Lock()
				defer mu.Unlock()
				switch e.Kind {
				case payments.EventCall:
					calls++
					if e.Resolved {
						resolved++
					}
					if e.Err != nil {
						failed++
					}
					if e.Took <= 0 || e.At.IsZero() {
						t.Errorf("a call at %v that took %v", e.At, e.Took)
					}
				case payments.EventOutage:
					outages++
				case payments.EventFaults:
					faults.DroppedAfterRun += e.Faults.DroppedAfterRun
					faults.FailedBeforeSend += e.Faults.FailedBeforeSend
				}
			}
			rep, err := sc.Run(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			mu.Lock()
			defer mu.Unlock()
			if calls != 230 || outages != 1 || failed != rep.Failed+rep.OutageCalls {
				t.Errorf("%d call events (want 230), %d outages, %d failed (report: %d + %d in the outage)", calls, outages, failed, rep.Failed, rep.OutageCalls)
			}
			if faults.DroppedAfterRun != rep.Faults.DroppedAfterRun || faults.FailedBeforeSend < rep.Faults.FailedBeforeSend || faults.DroppedAfterRun == 0 {
				t.Errorf("fault events %+v, report %+v", faults, rep.Faults)
			}
			if transport == payments.TransportGRPC && (resolved == 0 || int64(resolved) > rep.Resolved) {
				t.Errorf("%d resolved answers (the client counted %d resolves answered)", resolved, rep.Resolved)
			}
		})
	}
}
