package chaos

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/opledger/opledger/cmd/opledger/internal/timeline"
	"github.com/opledger/opledger/internal/harness/faultproxy"
)

// faultLog records the faults of a run with their times, for the
// picture (WriteReports).
type faultLog struct {
	mu     sync.Mutex
	faults []loggedFault
}

type loggedFault struct {
	kind      string
	at, until time.Time
	n         int
	label     string
}

// add records a fault of kind from at until until (the zero time for an
// instant).
func (l *faultLog) add(kind string, at, until time.Time, n int, label string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.faults = append(l.faults, loggedFault{kind, at, until, n, label})
}

// list returns the faults, their times measured from t0.
func (l *faultLog) list(t0 time.Time) []timeline.Fault {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := make([]timeline.Fault, len(l.faults))
	for i, f := range l.faults {
		out[i] = timeline.Fault{Kind: f.kind, At: f.at.Sub(t0), N: f.n, Label: f.label}
		if !f.until.IsZero() {
			out[i].Until = f.until.Sub(t0)
		}
	}
	return out
}

// observeProxy returns a faultproxy.Schedule.Observe that records p's
// faults, named by where.
func (l *faultLog) observeProxy(p *faultproxy.Proxy, where string, latencyFor, blackholeFor time.Duration) func(faultproxy.Fault) {
	var mu sync.Mutex
	var cuts int64
	return func(f faultproxy.Fault) {
		now := time.Now()
		switch f {
		case faultproxy.FaultCut:
			mu.Lock()
			total := p.Stats().Cuts
			n := int(total - cuts)
			cuts = total
			mu.Unlock()
			l.add(timeline.FaultCut, now, time.Time{}, n, fmt.Sprintf("%s: %d connections cut", where, n))
		case faultproxy.FaultBlackhole:
			l.add(timeline.FaultBlackhole, now, now.Add(blackholeFor), 0, where+": blackhole")
		case faultproxy.FaultLatency:
			l.add(timeline.FaultLatency, now, now.Add(latencyFor), 0, where+": latency")
		}
	}
}

// outcome returns c's outcome for the picture.
func (c call) outcome() timeline.Outcome {
	switch {
	case c.ackLost:
		return timeline.AckLost
	case c.err == nil && c.resolved:
		return timeline.Resolved
	case c.err == nil && c.replayed:
		return timeline.Replayed
	case c.err == nil:
		return timeline.OK
	case c.definite:
		return timeline.Definite
	}
	return timeline.Ambiguous
}

// chart returns the picture of rep's run.
func (rep Report) chart() timeline.Chart {
	sub := []string{fmt.Sprintf("%s logical calls", timeline.Thousands(int64(rep.Calls))), fmt.Sprintf("%d replicas", rep.Replicas),
		"retry owner " + rep.Owner, rep.Order, fmt.Sprintf("seed %d", rep.Seed)}
	switch {
	case rep.Failovers == 1:
		sub = append(sub, "1 failover")
	case rep.Failovers > 1:
		sub = append(sub, fmt.Sprintf("%d failovers", rep.Failovers))
	}
	sub = append(sub, "opledger chaos")
	c := timeline.Chart{Title: rep.Database, Subtitle: strings.Join(sub, " · "), Calls: rep.timeline, Faults: rep.faults}
	c.Totals = []timeline.Total{
		{Label: "logical calls", N: int64(rep.Calls)},
		{Label: "attempts", N: rep.Attempts, Text: fmt.Sprintf("%s (%.2f×)", timeline.Thousands(rep.Attempts), rep.Amplification)},
		{Label: "returned OK", N: int64(rep.ReturnedOK)},
		{Label: "resolved / replayed", Text: fmt.Sprintf("%d / %d", rep.Resolved, rep.Replayed)},
		{Label: "definite failures", N: int64(rep.Definite)},
		{Label: "ambiguous, deadline left", N: int64(rep.AmbiguousEarly), MustBeZero: true},
		{Label: "duplicate effects", N: int64(rep.Duplicates), MustBeZero: true},
		{Label: lostLabel(rep), N: int64(rep.Lost - rep.replicationLoss()), MustBeZero: true},
		{Label: "wrong answers", N: int64(rep.WrongAnswers), MustBeZero: true},
		{Label: "unresolved", N: int64(rep.Unresolved), MustBeZero: true},
		{Label: "rows without ledger entry", N: int64(rep.RowsNoLedger), MustBeZero: true},
		{Label: "ledger entries without row", N: int64(rep.LedgerNoRow), MustBeZero: true},
	}
	strict := rep.synchronousOrNone()
	note := ""
	if !strict {
		note = "async: counted"
	}
	for _, t := range []struct {
		label string
		n     int
	}{{"acknowledged and lost", rep.AckLost}, {"committed and lost", rep.CommittedLost}, {"executed twice", rep.ExecutedTwice}} {
		c.Totals = append(c.Totals, timeline.Total{Label: t.label, N: int64(t.n), MustBeZero: strict, Counted: !strict, Note: note})
	}
	if rep.Failovers > 0 {
		c.Totals = append(c.Totals, timeline.Total{Label: "ambiguous", N: int64(rep.Ambiguous), MustBeZero: strict},
			timeline.Total{Label: "window: kill → first commit", Text: msList(rep.FailoverWindowsMS)})
	}
	p50, p99, p999 := timeline.Percentiles(rep.timeline)
	c.Totals = append(c.Totals,
		timeline.Total{Label: "latency p50 / p99 / p99.9", Text: fmt.Sprintf("%.0f / %.0f / %.0f ms", ms(p50), ms(p99), ms(p999))},
		timeline.Total{Label: "replica kills (after COMMIT)", Text: fmt.Sprintf("%d (%d)", rep.Killed, rep.KilledAfterCommit)},
		timeline.Total{Label: "db restarts / failovers", Text: fmt.Sprintf("%d / %d", rep.DBRestarts, rep.Failovers)},
		timeline.Total{Label: "connections cut", N: rep.Cuts})
	return c
}

// lostLabel names the lost-effects figure: after an asynchronous
// failover, the losses beside the standby's.
func lostLabel(rep Report) string {
	if rep.synchronousOrNone() {
		return "lost effects"
	}
	return "other lost effects"
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

// WriteReports writes the picture of each run as an SVG file (the
// command's --report), each to SVGPath(path, its database, len(reps)),
// and returns the files written.
func WriteReports(path string, reps []Report) ([]string, error) {
	var written []string
	for _, r := range reps {
		p := SVGPath(path, r.Database, len(reps))
		f, err := os.Create(p)
		if err != nil {
			return written, err
		}
		err = r.chart().WriteSVG(f)
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			return written, fmt.Errorf("%s: %w", p, err)
		}
		written = append(written, p)
	}
	return written, nil
}

// SVGPath is the file of the picture of database's run among runs: path
// for one run, else path with the database's name before its extension.
func SVGPath(path, database string, runs int) string {
	if runs <= 1 {
		return path
	}
	ext := filepath.Ext(path)
	return strings.TrimSuffix(path, ext) + "-" + slug(database) + ext
}

// slug turns a database's label into a file name part.
func slug(s string) string {
	var b strings.Builder
	dash := false
	for _, r := range strings.ToLower(s) {
		if r >= 'a' && r <= 'z' || r >= '0' && r <= '9' {
			b.WriteRune(r)
			dash = false
		} else if !dash && b.Len() > 0 {
			b.WriteByte('-')
			dash = true
		}
	}
	return strings.TrimSuffix(b.String(), "-")
}
