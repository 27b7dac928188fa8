// Package wait holds the context-aware sleep shared by the retrying
// client and the example scenarios. It is internal: it is not part of the
// kit's API.
package wait

import (
	"context"
	"math/rand/v2"
	"time"
)

// Sleep waits for d or until ctx is done, whichever comes first, and
// returns the context's error in the second case. A d of zero or less
// does not wait and returns ctx.Err().
func Sleep(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return ctx.Err()
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Backoff returns the wait after n failures in a row: base, doubled for
// each failure after the first up to max, jittered to between half and
// all of it. The outbox relay waits so after failed batches, and opledger
// relay as long between its attempts to reach a broker that is down at
// start (with outboxkit.DefaultBackoffBase and DefaultBackoffMax).
func Backoff(base, max time.Duration, n int) time.Duration {
	d := base
	for i := 1; i < n && d < max; i++ {
		d *= 2
	}
	d = min(d, max)
	half := d / 2
	return half + time.Duration(rand.Float64()*float64(d-half))
}
