package txrun

import (
	"testing"
	"time"
)

// TestClaimBound: what the wait for a connection left of the bound,
// rounded up to an eighth of it, never more than the bound.
func TestClaimBound(t *testing.T) {
	const b = 800 * time.Millisecond // eighths of 100ms
	for _, c := range []struct{ left, want time.Duration }{
		{b, b},
		{b + time.Second, b},
		{b - time.Millisecond, b},
		{701 * time.Millisecond, b},
		{700 * time.Millisecond, 700 * time.Millisecond},
		{401 * time.Millisecond, 500 * time.Millisecond},
		{time.Millisecond, 100 * time.Millisecond},
	} {
		if got := claimBound(b, c.left); got != c.want {
			t.Errorf("claimBound(%v, %v) = %v, want %v", b, c.left, got, c.want)
		}
	}
	if got := claimBound(5, 1); got != 5 {
		t.Errorf("a bound too small for eighths: %v, want the bound", got)
	}
}
