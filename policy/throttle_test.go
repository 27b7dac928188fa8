package policy

// The gRPC retry-throttling token bucket of gRFC A6, as grpc-go implements
// it for a channel whose service config has retryThrottling. The package
// does not use it: it is the reference the retry budget is measured
// against, in the amplification simulation (simulation_test.go) and the
// benchmarks.

import (
	"errors"
	"fmt"
	"math"
	"sync"
	"sync/atomic"
	"testing"
)

// throttleScale is the fixed-point unit of a token: A6 ignores decimals past
// the third.
const throttleScale = 1000

// Throttle is the gRPC retry-throttling token bucket of gRFC A6, with exact
// fixed-point arithmetic. It starts full at maxTokens; each failed attempt
// takes one token (never below zero), each successful call adds tokenRatio
// (never above maxTokens), and retries are allowed only while the tokens are
// above half of maxTokens. It is safe for concurrent use and does not
// allocate.
type Throttle struct {
	tokens atomic.Int64 // thousandths of a token
	max    int64
	ratio  int64
}

// NewThrottle returns a full token bucket. maxTokens must be in (0, 1000]
// and tokenRatio positive, as in the service config's retryThrottling;
// decimals past the third are ignored. Anything else is an error wrapping
// ErrInvalidConfig.
func NewThrottle(maxTokens, tokenRatio float64) (*Throttle, error) {
	m, r := fixed3(maxTokens), fixed3(tokenRatio)
	if !(maxTokens > 0 && maxTokens <= 1000) || m <= 0 {
		return nil, fmt.Errorf("%w: throttle maxTokens %v outside (0, 1000]", ErrInvalidConfig, maxTokens)
	}
	if !(tokenRatio > 0 && tokenRatio <= 1000) || r <= 0 {
		return nil, fmt.Errorf("%w: throttle tokenRatio %v must be in [0.001, 1000]", ErrInvalidConfig, tokenRatio)
	}
	t := &Throttle{max: m, ratio: r}
	t.tokens.Store(m)
	return t, nil
}

// fixed3 converts x to thousandths, dropping further decimals.
func fixed3(x float64) int64 {
	if !(x > 0) || x > 1e6 {
		return 0
	}
	return int64(math.Floor(x*throttleScale + 1e-6))
}

// RecordFailure records a failed attempt (a retryable code, or pushback that
// says not to retry) and reports whether a retry may follow, as grpc-go's
// throttle does: it takes a token and allows a retry only if more than half
// of maxTokens remain.
func (t *Throttle) RecordFailure() (retryAllowed bool) {
	for {
		cur := t.tokens.Load()
		next := cur - throttleScale
		if next < 0 {
			next = 0
		}
		if t.tokens.CompareAndSwap(cur, next) {
			return 2*next > t.max
		}
	}
}

// RecordSuccess records a successful call, adding tokenRatio tokens.
func (t *Throttle) RecordSuccess() {
	for {
		cur := t.tokens.Load()
		next := cur + t.ratio
		if next > t.max {
			next = t.max
		}
		if next == cur || t.tokens.CompareAndSwap(cur, next) {
			return
		}
	}
}

// Allowed reports whether retries are currently allowed: more than half of
// maxTokens remain.
func (t *Throttle) Allowed() bool { return 2*t.tokens.Load() > t.max }

// Tokens returns the current number of tokens.
func (t *Throttle) Tokens() float64 { return float64(t.tokens.Load()) / throttleScale }

func TestThrottleNoAllocs(t *testing.T) {
	th, err := NewThrottle(10, 0.1)
	if err != nil {
		t.Fatal(err)
	}
	if n := testing.AllocsPerRun(1000, func() { th.RecordSuccess(); th.RecordFailure(); th.Allowed() }); n != 0 {
		t.Errorf("throttle: %v allocations per call", n)
	}
}

func TestThrottleArithmetic(t *testing.T) {
	th, err := NewThrottle(10, 0.1)
	if err != nil {
		t.Fatal(err)
	}
	if th.Tokens() != 10 || !th.Allowed() {
		t.Fatalf("start: %v tokens", th.Tokens())
	}
	// 10 → 9 → … → 6: still above half; 5 is not.
	for want := 9; want >= 6; want-- {
		if !th.RecordFailure() || th.Tokens() != float64(want) {
			t.Fatalf("at %d tokens: retries stopped", want)
		}
	}
	if th.RecordFailure() || th.Tokens() != 5 || th.Allowed() {
		t.Fatalf("at exactly half (5) retries must stop: tokens %v", th.Tokens())
	}
	for i := 0; i < 20; i++ {
		th.RecordFailure()
	}
	if th.Tokens() != 0 {
		t.Fatalf("tokens %v below zero or not drained", th.Tokens())
	}
	// From 0, 51 successes give 5.1 tokens: retries resume (exact: 50 give
	// exactly 5.0, which is not above half).
	for i := 0; i < 50; i++ {
		th.RecordSuccess()
	}
	if th.Tokens() != 5 || th.Allowed() {
		t.Fatalf("after 50 successes: %v tokens, allowed %v", th.Tokens(), th.Allowed())
	}
	th.RecordSuccess()
	if th.Tokens() != 5.1 || !th.Allowed() {
		t.Fatalf("after 51 successes: %v tokens", th.Tokens())
	}
	for i := 0; i < 1000; i++ {
		th.RecordSuccess()
	}
	if th.Tokens() != 10 {
		t.Fatalf("tokens %v above max", th.Tokens())
	}
	// Decimals past the third are ignored.
	th2, _ := NewThrottle(3, 1.0019)
	th2.RecordFailure()
	th2.RecordFailure()
	th2.RecordSuccess()
	if th2.Tokens() != 2.001 {
		t.Errorf("tokens %v, want 2.001", th2.Tokens())
	}
	for _, bad := range [][2]float64{{0, 1}, {1001, 1}, {10, 0}, {10, -1}, {10, 0.0001}} {
		if _, err := NewThrottle(bad[0], bad[1]); !errors.Is(err, ErrInvalidConfig) {
			t.Errorf("NewThrottle(%v): %v", bad, err)
		}
	}
}

func TestThrottleConcurrent(t *testing.T) {
	th, _ := NewThrottle(1000, 1)
	var wg sync.WaitGroup
	for g := 0; g < 50; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 10; i++ {
				th.RecordFailure()
			}
		}()
	}
	wg.Wait()
	if th.Tokens() != 500 {
		t.Fatalf("tokens %v after 500 failures from 1000, want 500", th.Tokens())
	}
	for g := 0; g < 50; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 10; i++ {
				th.RecordSuccess()
			}
		}()
	}
	wg.Wait()
	if th.Tokens() != 1000 {
		t.Fatalf("tokens %v, want 1000", th.Tokens())
	}
}

func BenchmarkThrottle(b *testing.B) {
	th, err := NewThrottle(10, 0.1)
	if err != nil {
		b.Fatal(err)
	}
	b.Run("RecordFailure+RecordSuccess", func(b *testing.B) {
		b.ReportAllocs()
		for i := 0; i < b.N; i++ {
			th.RecordFailure()
			th.RecordSuccess()
		}
	})
	b.Run("RecordFailure+RecordSuccess/parallel", func(b *testing.B) {
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				th.RecordFailure()
				th.RecordSuccess()
			}
		})
	})
}
