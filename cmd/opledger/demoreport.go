package main

import (
	"fmt"
	"os"
	"sync"
	"time"

	"github.com/opledger/opledger/examples/payments"
	"github.com/opledger/opledger/internal/harness/timeline"
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
	c.Totals = []timeline.Total{
		{Label: "logical calls (faulty phase)", N: int64(rep.Calls)},
		{Label: "attempts", Text: fmt.Sprintf("%s (%.2f×)", timeline.Thousands(rep.Attempts), rep.Amplification())},
		{Label: "answered", N: int64(rep.Succeeded)},
		{Label: "executed / replayed", Text: timeline.Thousands(rep.Executed) + " / " + timeline.Thousands(rep.Replayed)},
		{Label: "resolved", N: rep.Resolved},
		{Label: "definite failures", N: int64(rep.Definite)},
		{Label: "ambiguous", N: int64(rep.Ambiguous), MustBeZero: true},
		{Label: "duplicate effects", N: int64(rep.Duplicates), MustBeZero: true},
		{Label: "lost effects", N: int64(rep.Lost), MustBeZero: true},
		{Label: "wrong responses", N: int64(rep.WrongResponses), MustBeZero: true},
		{Label: "wrong failure reasons", N: int64(rep.WrongOutcomes), MustBeZero: true},
		{Label: "resends not replayed", N: int64(rep.ResendFailures), MustBeZero: true},
		{Label: "answers lost after commit", N: rep.Faults.DroppedAfterRun},
		{Label: "failed before send", N: rep.Faults.FailedBeforeSend},
		{Label: "latency p50 / p99 / p99.9", Text: fmt.Sprintf("%.0f / %.0f / %.0f ms", ms(p50), ms(p99), ms(p999))},
	}
	if rep.OutageCalls > 0 {
		c.Totals = append(c.Totals, timeline.Total{Label: "outage calls / attempts", Text: fmt.Sprintf("%d / %d", rep.OutageCalls, rep.OutageAttempts)})
	}
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
