package policy

import (
	"fmt"
	"math"
	"sync"
	"time"
)

// budgetSlices is the number of slices the budget window is divided into.
const budgetSlices = 10

// budgetScale is the fixed-point unit of one deposit.
const budgetScale = 1000

// BudgetSettings configure a Budget. A zero field takes its default.
type BudgetSettings struct {
	// TTL is how long a deposit stays in the window: 1s to 60s; default 10s.
	// The window moves in steps of TTL/10.
	TTL time.Duration
	// Percent is the number of retries each deposit pays for: 0.1 (the
	// default) lets retries add 10% to the traffic that funds them. 0 to 10.
	// Set NoPercent to fund retries by the floor alone.
	Percent float64
	// NoPercent makes Percent zero instead of its default.
	NoPercent bool
	// MinRetriesPerSecond is a floor of retries allowed regardless of
	// deposits, so that a client with little traffic can still retry: 0 to
	// 1e6; default 5. Set NoMinRetries for no floor.
	MinRetriesPerSecond float64
	// NoMinRetries makes MinRetriesPerSecond zero instead of its default.
	NoMinRetries bool
	// Now is the clock; default time.Now. Tests inject a fake clock.
	Now func() time.Time
}

// Budget bounds retries to a fraction of traffic over a sliding window, with
// a small floor (the algorithm of Finagle's RetryBudget and tower's
// TpsBudget). Call Deposit for every original request and TryWithdraw before
// every retry. Under total failure the retries fall to Percent of the
// traffic plus the floor, so a failing dependency gets a chance to recover.
//
// Funded by requests, a budget with Percent 0.1 allows about 1.1 attempts per
// call when everything fails. Calling Deposit on each success instead (a
// success-funded budget, as Linkerd does) shrinks the retries to the floor
// under total failure while leaving room for every retry when failures are
// rare; use a larger Percent, such as 0.5, in that mode.
//
// A Budget is safe for concurrent use; Deposit and TryWithdraw do not
// allocate. Scope one budget to one target (server name).
type Budget struct {
	mu       sync.Mutex
	now      func() time.Time
	base     time.Time
	slice    int64 // slice length, ns
	deposit  int64
	withdraw int64
	reserve  int64
	buckets  [budgetSlices]int64
	cur      int
	curStart int64 // start of the current slice, ns since base
	sum      int64
}

// NewBudget returns a budget with the given settings. Out-of-range settings
// are an error wrapping ErrInvalidConfig.
func NewBudget(s BudgetSettings) (*Budget, error) {
	if s.TTL == 0 {
		s.TTL = 10 * time.Second
	}
	if s.Percent == 0 && !s.NoPercent {
		s.Percent = 0.1
	}
	if s.MinRetriesPerSecond == 0 && !s.NoMinRetries {
		s.MinRetriesPerSecond = 5
	}
	if s.Now == nil {
		s.Now = time.Now
	}
	switch {
	case s.TTL < time.Second || s.TTL > time.Minute:
		return nil, fmt.Errorf("%w: budget TTL %s outside [1s, 60s]", ErrInvalidConfig, s.TTL)
	case !(s.Percent >= 0 && s.Percent <= 10):
		return nil, fmt.Errorf("%w: budget Percent %v outside [0, 10]", ErrInvalidConfig, s.Percent)
	case !(s.MinRetriesPerSecond >= 0 && s.MinRetriesPerSecond <= 1e6):
		return nil, fmt.Errorf("%w: budget MinRetriesPerSecond %v outside [0, 1e6]", ErrInvalidConfig, s.MinRetriesPerSecond)
	}
	b := &Budget{now: s.Now, base: s.Now(), slice: int64(s.TTL) / budgetSlices}
	if s.Percent == 0 {
		b.deposit, b.withdraw = 0, budgetScale
	} else {
		b.deposit = budgetScale
		b.withdraw = int64(math.Round(budgetScale / s.Percent))
		if b.withdraw < 1 {
			b.withdraw = 1
		}
	}
	b.reserve = int64(math.Round(s.MinRetriesPerSecond * s.TTL.Seconds() * float64(b.withdraw)))
	return b, nil
}

// advance moves the window to time t (ns since base), expiring the slices
// that fell out of it. Time that goes backwards is ignored.
func (b *Budget) advance(t int64) {
	if t < b.curStart+b.slice {
		return
	}
	n := (t - b.curStart) / b.slice
	if n >= budgetSlices {
		b.buckets = [budgetSlices]int64{}
		b.sum = 0
	} else {
		for i := int64(0); i < n; i++ {
			b.cur++
			if b.cur == budgetSlices {
				b.cur = 0
			}
			b.sum -= b.buckets[b.cur]
			b.buckets[b.cur] = 0
		}
	}
	b.curStart += n * b.slice
}

func (b *Budget) clock() int64 { return int64(b.now().Sub(b.base)) }

// Deposit records one original request, funding Percent of a retry.
func (b *Budget) Deposit() {
	t := b.clock()
	b.mu.Lock()
	b.advance(t)
	b.buckets[b.cur] += b.deposit
	b.sum += b.deposit
	b.mu.Unlock()
}

// TryWithdraw spends one retry from the budget and reports whether it could.
// A false result means: do not retry.
func (b *Budget) TryWithdraw() bool {
	t := b.clock()
	b.mu.Lock()
	b.advance(t)
	ok := b.sum+b.reserve >= b.withdraw
	if ok {
		b.buckets[b.cur] -= b.withdraw
		b.sum -= b.withdraw
	}
	b.mu.Unlock()
	return ok
}

// Available returns the number of retries the budget would allow now.
func (b *Budget) Available() int {
	t := b.clock()
	b.mu.Lock()
	b.advance(t)
	n := (b.sum + b.reserve) / b.withdraw
	b.mu.Unlock()
	if n < 0 {
		return 0
	}
	return int(n)
}
