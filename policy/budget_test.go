package policy

import (
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

func TestBudgetWindow(t *testing.T) {
	clk := newFakeClock()
	b, err := NewBudget(BudgetSettings{TTL: 10 * time.Second, Percent: 0.1, MinRetriesPerSecond: 1, Now: clk.Now})
	if err != nil {
		t.Fatal(err)
	}
	// The floor alone: 1/s × 10s = 10 retries.
	if got := b.Available(); got != 10 {
		t.Fatalf("Available = %d, want 10", got)
	}
	for i := 0; i < 10; i++ {
		if !b.TryWithdraw() {
			t.Fatalf("withdraw %d refused", i)
		}
	}
	if b.TryWithdraw() {
		t.Fatal("11th withdraw allowed with an empty budget")
	}
	// 100 requests fund 10 retries.
	for i := 0; i < 100; i++ {
		b.Deposit()
	}
	for i := 0; i < 10; i++ {
		if !b.TryWithdraw() {
			t.Fatalf("funded withdraw %d refused", i)
		}
	}
	if b.TryWithdraw() {
		t.Fatal("withdraw beyond the deposits allowed")
	}
	// After the window has passed, the withdrawals (and deposits) expire and
	// the floor is back.
	clk.Advance(10 * time.Second)
	if got := b.Available(); got != 10 {
		t.Fatalf("after the window: Available = %d, want 10", got)
	}
}

func TestBudgetSlicesExpireOneByOne(t *testing.T) {
	clk := newFakeClock()
	b, err := NewBudget(BudgetSettings{TTL: 10 * time.Second, Percent: 1, NoMinRetries: true, Now: clk.Now})
	if err != nil {
		t.Fatal(err)
	}
	if b.TryWithdraw() {
		t.Fatal("withdraw without deposit or floor")
	}
	for s := 0; s < 10; s++ { // one deposit per second
		b.Deposit()
		clk.Advance(time.Second)
	}
	// At t=10s the first deposit (t=0) has expired: 9 remain.
	if got := b.Available(); got != 9 {
		t.Fatalf("Available = %d, want 9", got)
	}
	clk.Advance(4 * time.Second)
	if got := b.Available(); got != 5 {
		t.Fatalf("Available = %d, want 5", got)
	}
	clk.Advance(time.Hour)
	if got := b.Available(); got != 0 {
		t.Fatalf("Available = %d, want 0", got)
	}
	// A clock that goes backwards does not break the window.
	b.Deposit()
	clk.Advance(-time.Hour)
	b.Deposit()
	if got := b.Available(); got != 2 {
		t.Fatalf("after the clock went back: Available = %d, want 2", got)
	}
}

func TestBudgetTotalFailureBound(t *testing.T) {
	// 1000 requests per second for a minute, every attempt fails, up to two
	// retries per request: retries stay within Percent plus the floor.
	clk := newFakeClock()
	b, err := NewBudget(BudgetSettings{Now: clk.Now}) // defaults: 10s, 10%, 5/s
	if err != nil {
		t.Fatal(err)
	}
	requests, attempts := 0, 0
	for ms := 0; ms < 60_000; ms++ {
		b.Deposit()
		requests++
		attempts++
		for r := 0; r < 2 && b.TryWithdraw(); r++ {
			attempts++
		}
		clk.Advance(time.Millisecond)
	}
	amp := float64(attempts) / float64(requests)
	if amp > 1.11 {
		t.Errorf("amplification %.4f > 1.11", amp)
	}
	if amp < 1.09 {
		t.Errorf("amplification %.4f: budget too tight", amp)
	}
}

func TestBudgetSettings(t *testing.T) {
	for _, s := range []BudgetSettings{
		{TTL: time.Millisecond}, {TTL: 2 * time.Minute}, {Percent: -1}, {Percent: 11}, {MinRetriesPerSecond: -1},
	} {
		if _, err := NewBudget(s); !errors.Is(err, ErrInvalidConfig) {
			t.Errorf("%+v: %v", s, err)
		}
	}
	clk := newFakeClock()
	b, err := NewBudget(BudgetSettings{NoPercent: true, NoMinRetries: true, Now: clk.Now})
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 100; i++ {
		b.Deposit()
	}
	if b.TryWithdraw() {
		t.Error("a zero budget allowed a retry")
	}
}

func TestBudgetConcurrent(t *testing.T) {
	clk := newFakeClock()
	b, err := NewBudget(BudgetSettings{TTL: 10 * time.Second, Percent: 0.25, NoMinRetries: true, Now: clk.Now})
	if err != nil {
		t.Fatal(err)
	}
	const G, N = 64, 2000
	var granted atomic.Int64
	var wg sync.WaitGroup
	for g := 0; g < G; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < N; i++ {
				b.Deposit()
				if b.TryWithdraw() {
					granted.Add(1)
				}
				if i%500 == 0 {
					b.Available()
				}
			}
		}()
	}
	wg.Wait()
	// The clock never moved: exactly a quarter of the deposits, whatever the
	// interleaving.
	if got, want := granted.Load(), int64(G*N/4); got != want {
		t.Errorf("granted %d retries, want %d", got, want)
	}
}

func TestBudgetNoAllocs(t *testing.T) {
	b, err := NewBudget(BudgetSettings{})
	if err != nil {
		t.Fatal(err)
	}
	if n := testing.AllocsPerRun(1000, func() { b.Deposit(); b.TryWithdraw() }); n != 0 {
		t.Errorf("%v allocations per call", n)
	}
}
