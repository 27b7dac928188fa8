package policy

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"strconv"
	"time"
)

// PushbackHeader is the trailer key a server uses to push back on retries
// (gRFC A6): a non-negative integer of milliseconds to wait before the next
// attempt, or a negative value to stop retrying.
const PushbackHeader = "grpc-retry-pushback-ms"

// Backoff computes the delay before a retry with the gRFC A6 formula: the
// n-th retry since the last reset waits
//
//	min(Initial × Multiplier^(n−1), Max) × U(1−Jitter, 1+Jitter)
//
// A zero field takes its default. The zero Backoff is ready to use and safe
// for concurrent use if Random is (the default is).
type Backoff struct {
	// Initial is the base delay of the first retry; default 100ms.
	Initial time.Duration
	// Max caps the delay before jitter; default 1s (at least Initial).
	Max time.Duration
	// Multiplier grows the delay per retry; default 2.
	Multiplier float64
	// Jitter is the relative spread, in [0, 1]; default 0.2 (±20%, as in A6).
	// Set NoJitter for none.
	Jitter float64
	// NoJitter makes Jitter zero instead of its default.
	NoJitter bool
	// Random returns a uniform value in [0, 1). Default: the math/rand/v2
	// top-level generator, which needs no seeding and is safe for concurrent
	// use; tests inject a seeded source.
	Random func() float64
	// Now is the clock used for deadline checks; default time.Now.
	Now func() time.Time
}

func (b Backoff) norm() Backoff {
	if !(b.Initial > 0) {
		b.Initial = 100 * time.Millisecond
	}
	if !(b.Max > 0) {
		b.Max = time.Second
	}
	if b.Max < b.Initial {
		b.Max = b.Initial
	}
	if !(b.Multiplier > 0) || math.IsInf(b.Multiplier, 0) {
		b.Multiplier = 2
	}
	switch {
	case b.NoJitter:
		b.Jitter = 0
	case b.Jitter == 0:
		b.Jitter = 0.2
	case !(b.Jitter >= 0 && b.Jitter <= 1):
		b.Jitter = 0.2
	}
	if b.Random == nil {
		b.Random = rand.Float64
	}
	if b.Now == nil {
		b.Now = time.Now
	}
	return b
}

// Validate reports settings that Delay would replace by defaults: a negative
// duration, a multiplier that is not positive, a jitter outside [0, 1].
// The error wraps ErrInvalidConfig.
func (b Backoff) Validate() error {
	switch {
	case b.Initial < 0 || b.Max < 0:
		return fmt.Errorf("%w: negative backoff", ErrInvalidConfig)
	case b.Max != 0 && b.Max < b.Initial:
		return fmt.Errorf("%w: backoff Max %s below Initial %s", ErrInvalidConfig, b.Max, b.Initial)
	case b.Multiplier < 0 || math.IsNaN(b.Multiplier) || math.IsInf(b.Multiplier, 0):
		return fmt.Errorf("%w: backoff Multiplier %v", ErrInvalidConfig, b.Multiplier)
	case !(b.Jitter >= 0 && b.Jitter <= 1):
		return fmt.Errorf("%w: backoff Jitter %v outside [0, 1]", ErrInvalidConfig, b.Jitter)
	}
	return nil
}

// Delay returns the wait before the n-th retry since the last reset (n ≥ 1;
// smaller n counts as 1). The result is never negative and never more than
// Max × (1 + Jitter).
func (b Backoff) Delay(n int) time.Duration {
	b = b.norm()
	if n < 1 {
		n = 1
	}
	base := float64(b.Initial) * math.Pow(b.Multiplier, float64(n-1))
	if !(base < float64(b.Max)) { // also catches +Inf and NaN
		base = float64(b.Max)
	}
	u := b.Random()
	if !(u >= 0 && u < 1) {
		u = 0.5
	}
	d := base * (1 - b.Jitter + 2*b.Jitter*u)
	if d >= math.MaxInt64 {
		return time.Duration(math.MaxInt64)
	}
	if d < 0 {
		return 0
	}
	return time.Duration(d)
}

// parsePushback reads the values of the grpc-retry-pushback-ms trailer (as
// returned by metadata.MD.Get). No value means no pushback: ok is false and
// the caller uses its backoff. A single non-negative 32-bit integer is the
// exact delay. A negative, unparseable or repeated value means "do not
// retry": the error wraps ErrPushbackStop, and the attempt counts as a
// failure for throttling.
func parsePushback(values []string) (delay time.Duration, ok bool, err error) {
	switch len(values) {
	case 0:
		return 0, false, nil
	case 1:
	default:
		return 0, false, fmt.Errorf("%w: %d %s values", ErrPushbackStop, len(values), PushbackHeader)
	}
	ms, perr := strconv.ParseInt(values[0], 10, 32)
	if perr != nil {
		return 0, false, fmt.Errorf("%w: %s %q is not an integer", ErrPushbackStop, PushbackHeader, truncate(values[0]))
	}
	if ms < 0 {
		return 0, false, fmt.Errorf("%w: %s is %d", ErrPushbackStop, PushbackHeader, ms)
	}
	return time.Duration(ms) * time.Millisecond, true, nil
}

// Next decides the wait before the next retry of a call. n is the backoff
// step (1 for the first retry, or after pushback reset it); pushback holds
// the grpc-retry-pushback-ms values of the failed attempt. It returns the
// wait and the step to pass next time: server pushback is the exact wait and
// resets the step to 1, otherwise the wait is Delay(n) and the step is n+1.
//
// It returns an error instead of a wait when the context is done (the
// context's error), when pushback says to stop (ErrPushbackStop), or when
// the wait would reach the context's deadline (an error saying so): the
// deadline spans all attempts, and a retry that cannot start before it is
// only extra load.
func (b Backoff) Next(ctx context.Context, n int, pushback []string) (wait time.Duration, next int, err error) {
	if err := ctx.Err(); err != nil {
		return 0, n, err
	}
	b = b.norm()
	d, ok, err := parsePushback(pushback)
	if err != nil {
		return 0, n, err
	}
	if ok {
		wait, next = d, 1
	} else {
		if n < 1 {
			n = 1
		}
		wait, next = b.Delay(n), n+1
	}
	if dl, has := ctx.Deadline(); has {
		if left := dl.Sub(b.Now()); wait >= left {
			return 0, n, fmt.Errorf("%w: wait %s, %s left", errDeadlineTooClose, wait, max(left, 0))
		}
	}
	return wait, next, nil
}
