// Package timeline draws the picture of a chaos or demo run: a
// self-contained SVG (no script, no font or image to fetch) with the calls
// per time bucket by outcome, their latency percentiles, the faults
// injected on the same time axis, and the run's totals with the counts
// that must be zero highlighted. It is internal: opledger chaos --report
// and opledger demo --report use it.
//
// Every fault is one SVG group of class "fault" with the attributes
// data-kind (a Fault* constant) and data-at-ms, so that a test (or a
// reader's script) finds each one with an XML parser.
package timeline

import (
	"errors"
	"slices"
	"time"
)

// Outcome is what a logical call returned.
type Outcome int

// The outcomes, in the order the chart stacks them.
const (
	// OK: an answer the handler produced for this call (on its first
	// attempt or a retry).
	OK Outcome = iota
	// Replayed: an answer the ledger replayed (an earlier attempt had
	// committed).
	Replayed
	// Resolved: an answer a resolve request learned (the attempt's answer
	// was lost; the client asked for the stored outcome).
	Resolved
	// Definite: an error whose outcome is known (nothing committed, or a
	// recorded final error).
	Definite
	// Ambiguous: an error whose outcome the client could not learn
	// (CALL_OUTCOME_UNKNOWN).
	Ambiguous
	// AckLost: an answer whose effect is not in the database after the
	// run (a failover to a standby that had not received it).
	AckLost
	numOutcomes
)

// String returns the outcome's legend label.
func (o Outcome) String() string {
	switch o {
	case OK:
		return "OK"
	case Replayed:
		return "replayed"
	case Resolved:
		return "resolved"
	case Definite:
		return "definite failure"
	case Ambiguous:
		return "ambiguous"
	case AckLost:
		return "acknowledged, then lost"
	}
	return "?"
}

// Call is one logical call: when it started and ended, measured from the
// start of the run, and its outcome.
type Call struct {
	Start, End time.Duration
	Outcome    Outcome
}

// The kinds of fault a chart knows, and the lane each is drawn in.
const (
	FaultReplicaKill = "replica-kill" // a replica SIGKILLed by the run (service)
	FaultCommitKill  = "commit-kill"  // a replica that SIGKILLed itself after a COMMIT, before the answer (service)
	FaultOutage      = "outage"       // every call refused: every replica down, or the server refusing all (service)
	FaultDBCrash     = "db-crash"     // the database server SIGKILLed and started again (database)
	FaultDBRestart   = "db-restart"   // the database server stopped cleanly and started again (database)
	FaultFailover    = "failover"     // the primary SIGKILLed until the standby was promoted (database)
	FaultRejoin      = "rejoin"       // the old primary rewound and started as the new standby (database)
	FaultCut         = "cut"          // every connection through a proxy closed at once (network)
	FaultBlackhole   = "blackhole"    // nothing forwarded for a while (network)
	FaultLatency     = "latency"      // latency added for a while (network)
	FaultAnswerLost  = "answer-lost"  // answers dropped after the commit, per bucket (injected)
	FaultSendFailed  = "send-failed"  // attempts failed before they were sent, per bucket (injected)
)

// Fault is one injected fault: At (and Until, for one that lasts; Until
// equal to At or zero for an instant), measured from the start of the run.
// N is a count it carries (connections cut, answers lost in the
// bucket), 0 when none; Label is its tooltip.
type Fault struct {
	Kind      string
	At, Until time.Duration
	N         int
	Label     string
}

// Total is one figure of the run's totals. A MustBeZero figure is drawn
// green when N is 0 and red otherwise; a Counted one (a loss the run
// expects and counts, not a failure) amber when N is not 0. Text, when
// not empty, is shown instead of N; Note, in small print beside it.
type Total struct {
	Label      string
	N          int64
	Text       string
	Note       string
	MustBeZero bool
	Counted    bool
}

// Chart is the picture of one run.
type Chart struct {
	// Title and Subtitle head the picture (the run's database and its
	// settings).
	Title, Subtitle string
	// Bucket is the width of one bar of the calls chart; 0 means 100ms.
	Bucket time.Duration
	// Calls are the run's logical calls.
	Calls []Call
	// Faults are the faults injected.
	Faults []Fault
	// Totals are the figures of the run's report.
	Totals []Total
}

// ErrEmpty is returned by WriteSVG for a chart without calls.
var ErrEmpty = errors.New("timeline: no calls to draw")

// bucket returns c's bucket width.
func (c Chart) bucket() time.Duration {
	if c.Bucket <= 0 {
		return 100 * time.Millisecond
	}
	return c.Bucket
}

// span returns the end of the time axis: the last call's end or fault's
// end, whichever is later.
func (c Chart) span() time.Duration {
	var end time.Duration
	for _, k := range c.Calls {
		end = max(end, k.End)
	}
	for _, f := range c.Faults {
		end = max(end, f.At, f.Until)
	}
	return end
}

// series are the per-bucket figures the chart draws.
type series struct {
	counts   [][numOutcomes]int // calls that ended in each bucket, by outcome
	latency  time.Duration      // the latency percentiles' bucket: a multiple of the calls', for at most maxLatencySteps
	p50, p99 []time.Duration    // latency percentiles of the calls that ended in each latency bucket (0: none)
}

// maxLatencySteps bounds the latency lines' steps: a long run's 100ms
// percentiles, a few calls each, draw noise.
const maxLatencySteps = 150

func (c Chart) series() series {
	b := c.bucket()
	n := int(c.span()/b) + 1
	k := (n + maxLatencySteps - 1) / maxLatencySteps
	s := series{counts: make([][numOutcomes]int, n), latency: b * time.Duration(k)}
	m := (n + k - 1) / k
	s.p50, s.p99 = make([]time.Duration, m), make([]time.Duration, m)
	lat := make([][]time.Duration, m)
	for _, call := range c.Calls {
		i := min(int(max(call.End, 0)/b), n-1)
		if call.Outcome >= 0 && call.Outcome < numOutcomes {
			s.counts[i][call.Outcome]++
		}
		lat[i/k] = append(lat[i/k], call.End-call.Start)
	}
	for i, l := range lat {
		if len(l) == 0 {
			continue
		}
		slices.Sort(l)
		s.p50[i] = l[len(l)/2]
		s.p99[i] = l[min(len(l)-1, len(l)*99/100)]
	}
	return s
}

// Percentiles returns the p50, p99 and p99.9 latency of calls.
func Percentiles(calls []Call) (p50, p99, p999 time.Duration) {
	if len(calls) == 0 {
		return 0, 0, 0
	}
	l := make([]time.Duration, len(calls))
	for i, k := range calls {
		l[i] = k.End - k.Start
	}
	slices.Sort(l)
	n := len(l)
	return l[n/2], l[min(n-1, n*99/100)], l[min(n-1, n*999/1000)]
}
