// Package wait holds the context-aware sleep shared by the retrying
// client and the example scenarios. It is internal: it is not part of the
// kit's API.
package wait

import (
	"context"
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
