package policy

import (
	"context"
	"errors"
	"math/rand/v2"
	"testing"
	"time"
)

func fixedRandom(u float64) func() float64 { return func() float64 { return u } }

func TestBackoffFormula(t *testing.T) {
	b := Backoff{Initial: 100 * time.Millisecond, Max: time.Second, Multiplier: 2, Random: fixedRandom(0.5)}
	want := []time.Duration{100, 200, 400, 800, 1000, 1000, 1000}
	for i, w := range want {
		if got := b.Delay(i + 1); got != w*time.Millisecond {
			t.Errorf("Delay(%d) = %v, want %v", i+1, got, w*time.Millisecond)
		}
	}
	if b.Delay(0) != 100*time.Millisecond || b.Delay(-5) != 100*time.Millisecond {
		t.Error("n < 1 must count as 1")
	}
	if got := b.Delay(1 << 30); got != time.Second {
		t.Errorf("huge n: %v", got)
	}
	// Jitter bounds: U(0.8, 1.2) around the capped base.
	lo := Backoff{Initial: 100 * time.Millisecond, Max: time.Second, Multiplier: 2, Random: fixedRandom(0)}
	hi := Backoff{Initial: 100 * time.Millisecond, Max: time.Second, Multiplier: 2, Random: fixedRandom(0.999999999)}
	if got := lo.Delay(1); got != 80*time.Millisecond {
		t.Errorf("low jitter: %v", got)
	}
	if got := hi.Delay(10); got < 1199*time.Millisecond || got > 1200*time.Millisecond {
		t.Errorf("high jitter at the cap: %v", got)
	}
	// A seeded source gives a reproducible spread within ±20%.
	r := rand.New(rand.NewPCG(1, 2))
	seeded := Backoff{Initial: time.Second, Max: time.Second, Random: r.Float64}
	var minD, maxD time.Duration = time.Hour, 0
	for i := 0; i < 10000; i++ {
		d := seeded.Delay(1)
		minD, maxD = min(minD, d), max(maxD, d)
	}
	if minD < 800*time.Millisecond || maxD > 1200*time.Millisecond || minD > 805*time.Millisecond || maxD < 1195*time.Millisecond {
		t.Errorf("spread [%v, %v], want about [0.8s, 1.2s]", minD, maxD)
	}
	// No jitter.
	if got := (Backoff{Initial: time.Second, NoJitter: true, Random: fixedRandom(0)}).Delay(1); got != time.Second {
		t.Errorf("NoJitter: %v", got)
	}
	// Defaults and nonsense never panic and stay bounded.
	var zero Backoff
	if d := zero.Delay(3); d < 320*time.Millisecond || d > 480*time.Millisecond {
		t.Errorf("zero Backoff Delay(3) = %v", d)
	}
	bad := Backoff{Initial: -1, Max: -1, Multiplier: -3, Jitter: 7, Random: fixedRandom(42)}
	if d := bad.Delay(2); d != 200*time.Millisecond {
		t.Errorf("nonsense settings: %v", d)
	}
	if err := bad.Validate(); !errors.Is(err, ErrInvalidConfig) {
		t.Errorf("Validate: %v", err)
	}
	if err := (Backoff{}).Validate(); err != nil {
		t.Errorf("zero Validate: %v", err)
	}
	huge := Backoff{Initial: time.Duration(1 << 62), Max: time.Duration(1<<63 - 1), Multiplier: 1e300, Random: fixedRandom(0.999)}
	if d := huge.Delay(50); d <= 0 {
		t.Errorf("overflow: %v", d)
	}
}

func TestParsePushback(t *testing.T) {
	cases := []struct {
		in   []string
		d    time.Duration
		ok   bool
		stop bool
	}{
		{nil, 0, false, false},
		{[]string{"0"}, 0, true, false},
		{[]string{"200"}, 200 * time.Millisecond, true, false},
		{[]string{"2147483647"}, 2147483647 * time.Millisecond, true, false},
		{[]string{"-1"}, 0, false, true},
		{[]string{"2147483648"}, 0, false, true},
		{[]string{"abc"}, 0, false, true},
		{[]string{""}, 0, false, true},
		{[]string{" 5"}, 0, false, true},
		{[]string{"1.5"}, 0, false, true},
		{[]string{"100", "200"}, 0, false, true},
	}
	for _, c := range cases {
		d, ok, err := parsePushback(c.in)
		if d != c.d || ok != c.ok || errors.Is(err, ErrPushbackStop) != c.stop || (err != nil) != c.stop {
			t.Errorf("parsePushback(%q) = %v, %v, %v", c.in, d, ok, err)
		}
	}
}

func TestBackoffNext(t *testing.T) {
	// The context package measures deadlines by the real clock, so the fake
	// clock starts at the real time.
	clk := &fakeClock{t: time.Now()}
	b := Backoff{Initial: 100 * time.Millisecond, Max: time.Second, Multiplier: 2, Random: fixedRandom(0.5), Now: clk.Now}
	ctx := context.Background()

	w, n, err := b.Next(ctx, 1, nil)
	if err != nil || w != 100*time.Millisecond || n != 2 {
		t.Fatalf("first retry: %v %d %v", w, n, err)
	}
	w, n, err = b.Next(ctx, n, nil)
	if err != nil || w != 200*time.Millisecond || n != 3 {
		t.Fatalf("second retry: %v %d %v", w, n, err)
	}
	// Pushback is the exact wait and resets the backoff.
	w, n, err = b.Next(ctx, n, []string{"750"})
	if err != nil || w != 750*time.Millisecond || n != 1 {
		t.Fatalf("pushback: %v %d %v", w, n, err)
	}
	w, n, err = b.Next(ctx, n, nil)
	if err != nil || w != 100*time.Millisecond || n != 2 {
		t.Fatalf("after pushback: %v %d %v", w, n, err)
	}
	// Negative pushback stops.
	if _, _, err := b.Next(ctx, n, []string{"-1"}); !errors.Is(err, ErrPushbackStop) {
		t.Fatalf("negative pushback: %v", err)
	}
	// A wait that would reach the deadline is refused.
	dctx, cancel := context.WithDeadline(ctx, clk.Now().Add(150*time.Millisecond))
	defer cancel()
	if w, _, err := b.Next(dctx, 1, nil); err != nil || w != 100*time.Millisecond {
		t.Fatalf("within deadline: %v %v", w, err)
	}
	if _, _, err := b.Next(dctx, 2, nil); !errors.Is(err, errDeadlineTooClose) {
		t.Fatalf("past deadline: %v", err)
	}
	if _, _, err := b.Next(dctx, 1, []string{"150"}); !errors.Is(err, errDeadlineTooClose) {
		t.Fatalf("pushback exactly to the deadline: %v", err)
	}
	clk.Advance(time.Second) // the deadline (by the injected clock) has passed
	if _, _, err := b.Next(dctx, 1, []string{"0"}); !errors.Is(err, errDeadlineTooClose) {
		t.Fatalf("deadline passed: %v", err)
	}
	// A done context is reported as such.
	cctx, ccancel := context.WithCancel(ctx)
	ccancel()
	if _, _, err := b.Next(cctx, 1, nil); !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled: %v", err)
	}
}
