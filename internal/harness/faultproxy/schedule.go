package faultproxy

import (
	"context"
	"math/rand/v2"
	"time"
)

// Fault names a kind of fault a Schedule injects.
type Fault int

// The faults of a Schedule.
const (
	// FaultCut closes every open connection (Proxy.Cut).
	FaultCut Fault = iota + 1
	// FaultLatency adds Schedule.Latency for Schedule.LatencyFor.
	FaultLatency
	// FaultBlackhole holds all traffic for Schedule.BlackholeFor.
	FaultBlackhole
)

// String returns "cut", "latency" or "blackhole".
func (f Fault) String() string {
	switch f {
	case FaultCut:
		return "cut"
	case FaultLatency:
		return "latency"
	case FaultBlackhole:
		return "blackhole"
	}
	return "fault(?)"
}

// Schedule is a seeded sequence of faults: after a random gap (uniform in
// [Every/2, 3·Every/2]) it picks one fault by weight, applies it, and
// waits for the next gap. The same seed gives the same sequence of gaps
// and faults.
type Schedule struct {
	// Seed seeds the sequence.
	Seed uint64
	// Every is the mean gap between faults (default 500ms).
	Every time.Duration
	// Weights of each fault (negative counts as 0; all zero: 1, 1, 1).
	Cut, Latency, Blackhole float64
	// LatencyBy is the latency a FaultLatency adds (default 20ms).
	LatencyBy time.Duration
	// LatencyFor is how long a FaultLatency lasts (default 300ms).
	LatencyFor time.Duration
	// BlackholeFor is how long a FaultBlackhole lasts (default 300ms).
	BlackholeFor time.Duration
	// Observe, when not nil, is called with each fault as it is applied.
	Observe func(Fault)
	// FirstCut makes the first fault a cut, whatever the weights draw, so
	// that a run longer than 3·Every/2 always has one (a chaos run judged
	// on its faults must not pass or fail on whether its seed drew a cut
	// before its calls ended).
	FirstCut bool
}

func (s Schedule) withDefaults() Schedule {
	if s.Every <= 0 {
		s.Every = 500 * time.Millisecond
	}
	s.Cut, s.Latency, s.Blackhole = max(s.Cut, 0), max(s.Latency, 0), max(s.Blackhole, 0)
	if s.Cut+s.Latency+s.Blackhole == 0 {
		s.Cut, s.Latency, s.Blackhole = 1, 1, 1
	}
	if s.LatencyBy <= 0 {
		s.LatencyBy = 20 * time.Millisecond
	}
	if s.LatencyFor <= 0 {
		s.LatencyFor = 300 * time.Millisecond
	}
	if s.BlackholeFor <= 0 {
		s.BlackholeFor = 300 * time.Millisecond
	}
	return s
}

// Sequence returns the first n gaps and faults of the sequence, as Run
// applies them (for tests and reports).
func (s Schedule) Sequence(n int) ([]time.Duration, []Fault) {
	s = s.withDefaults()
	r := rand.New(rand.NewPCG(s.Seed, s.Seed^0x9e3779b97f4a7c15))
	gaps, faults := make([]time.Duration, n), make([]Fault, n)
	for i := range n {
		gaps[i], faults[i] = s.next(r)
		if i == 0 && s.FirstCut {
			faults[i] = FaultCut
		}
	}
	return gaps, faults
}

func (s Schedule) next(r *rand.Rand) (time.Duration, Fault) {
	gap := s.Every/2 + time.Duration(r.Int64N(int64(s.Every)+1))
	x := r.Float64() * (s.Cut + s.Latency + s.Blackhole)
	switch {
	case x < s.Cut:
		return gap, FaultCut
	case x < s.Cut+s.Latency:
		return gap, FaultLatency
	}
	return gap, FaultBlackhole
}

func (s Schedule) run(ctx context.Context, p *Proxy) error {
	s = s.withDefaults()
	r := rand.New(rand.NewPCG(s.Seed, s.Seed^0x9e3779b97f4a7c15))
	var end *time.Timer
	defer func() {
		if end != nil {
			end.Stop()
		}
	}()
	for first := true; ; first = false {
		gap, f := s.next(r)
		if first && s.FirstCut {
			f = FaultCut
		}
		t := time.NewTimer(gap)
		select {
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		case <-t.C:
		}
		switch f {
		case FaultCut:
			p.Cut()
		case FaultLatency:
			if end != nil {
				end.Stop()
			}
			p.SetLatency(s.LatencyBy)
			p.spells.Add(1)
			end = time.AfterFunc(s.LatencyFor, func() { p.SetLatency(0) })
		case FaultBlackhole:
			p.Blackhole(s.BlackholeFor)
		}
		if s.Observe != nil {
			s.Observe(f)
		}
	}
}
