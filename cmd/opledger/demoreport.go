package main

import (
	"fmt"
	"os"
	"sync"
	"time"

	"github.com/opledger/opledger/cmd/opledger/internal/timeline"
	"github.com/opledger/opledger/examples/payments"
)

// demoRecorder collects a demo run's events (payments.Scenario.OnEvent)
// for its picture (demo --report).
type demoRecorder struct {
	mu     sync.Mutex
	t0     time.Time
	events []payments.Event
}

func newDemoRecorder() *demoRecorder { return &demoRecorder{t0: time.Now()} }

func (r *demoRecorder) add(e payments.Event) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.events = append(r.events, e)
}

// chart returns the picture of the run that rep reports.
func (r *demoRecorder) chart(title, subtitle string, rep payments.Report) timeline.Chart {
	r.mu.Lock()
	defer r.mu.Unlock()
	c := timeline.Chart{Title: title, Subtitle: subtitle}
	t0 := r.t0
	for _, e := range r.events {
		if e.Kind == payments.EventCall && e.At.Before(t0) {
			t0 = e.At
		}
	}
	for _, e := range r.events {
		at := e.At.Sub(t0)
		switch e.Kind {
		case payments.EventCall:
			o := timeline.OK
			switch {
			case e.Err != nil && e.Definite:
				o = timeline.Definite
			case e.Err != nil:
				o = timeline.Ambiguous
			case e.Resolved:
				o = timeline.Resolved
			case e.Replayed:
				o = timeline.Replayed
			}
			c.Calls = append(c.Calls, timeline.Call{Start: at, End: at + e.Took, Outcome: o})
		case payments.EventFaults:
			if n := e.Faults.DroppedAfterRun; n > 0 {
				c.Faults = append(c.Faults, timeline.Fault{Kind: timeline.FaultAnswerLost, At: at, Until: at + e.Took, N: int(n),
					Label: fmt.Sprintf("%d answers lost after the commit", n)})
			}
			if n := e.Faults.FailedBeforeSend; n > 0 {
				c.Faults = append(c.Faults, timeline.Fault{Kind: timeline.FaultSendFailed, At: at, Until: at + e.Took, N: int(n),
					Label: fmt.Sprintf("%d attempts failed before they were sent", n)})
			}
		case payments.EventOutage:
			c.Faults = append(c.Faults, timeline.Fault{Kind: timeline.FaultOutage, At: at, Until: at + e.Took,
				Label: "total outage: the server refuses every call"})
		}
	}
	p50, p99, p999 := timeline.Percentiles(c.Calls)
	c.Totals = demoTotals(rep)
	c.Totals = append(c.Totals, timeline.Total{Label: "latency p50 / p99 / p99.9",
		Text: fmt.Sprintf("%.0f / %.0f / %.0f ms", ms(p50), ms(p99), ms(p999))})
	return c
}

// write draws the run to path.
func (r *demoRecorder) write(path, title, subtitle string, rep payments.Report) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	err = r.chart(title, subtitle, rep).WriteSVG(f)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}

// demoTotals are the picture's totals, named as the rows of the demo's
// table (payments.Report.Print) that count the same calls: the faulty
// phase's, the outage's, both phases', the resends'.
func demoTotals(rep payments.Report) []timeline.Total {
	both := "faulty phase: "
	if rep.OutageCalls > 0 {
		both = "both phases: "
	}
	t := []timeline.Total{
		{Label: "faulty phase: logical calls", N: int64(rep.Calls)},
		{Label: "faulty phase: attempts", N: rep.Attempts},
		{Label: "faulty phase: succeeded", N: int64(rep.Succeeded)},
		{Label: "faulty phase: resolved by the client", N: rep.Resolved},
	}
	if rep.OutageCalls > 0 {
		t = append(t, timeline.Total{Label: "outage: logical calls / attempts (amplification)",
			Text: fmt.Sprintf("%d / %d (%.2f×)", rep.OutageCalls, rep.OutageAttempts, rep.Amplification())})
	}
	return append(t,
		timeline.Total{Label: both + "executed / replayed by the server", Text: timeline.Thousands(rep.Executed) + " / " + timeline.Thousands(rep.Replayed)},
		timeline.Total{Label: both + "returned a definite failure", N: int64(rep.Definite)},
		timeline.Total{Label: both + "returned ambiguous", N: int64(rep.Ambiguous), MustBeZero: true},
		timeline.Total{Label: "duplicate effects", N: int64(rep.Duplicates), MustBeZero: true},
		timeline.Total{Label: "lost effects", N: int64(rep.Lost), MustBeZero: true},
		timeline.Total{Label: "wrong responses", N: int64(rep.WrongResponses), MustBeZero: true},
		timeline.Total{Label: "wrong failure reasons", N: int64(rep.WrongOutcomes), MustBeZero: true},
		timeline.Total{Label: "resends: answered calls sent again / replayed", Text: fmt.Sprintf("%d / %d", rep.Resent, rep.ResendReplayed)},
		timeline.Total{Label: "resends: not answered by a replay", N: int64(rep.ResendFailures), MustBeZero: true},
		timeline.Total{Label: "faults: answers lost after commit", N: rep.Faults.DroppedAfterRun},
		timeline.Total{Label: "faults: failed before send", N: rep.Faults.FailedBeforeSend},
	)
}

// ms is d in milliseconds.
func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
