package keyedcore

import (
	"sync/atomic"

	"github.com/opledger/opledger/keyed"
)

// ClientCounters are a keyed client's counters (grpcint's, connectint's).
type ClientCounters struct {
	Calls, Attempts, Retries, Resolves, Resolved, Replayed, Refusals, Ambiguous atomic.Int64
}

// Stats returns a snapshot of the counters.
func (c *ClientCounters) Stats() keyed.ClientStats {
	return keyed.ClientStats{
		Calls: c.Calls.Load(), Attempts: c.Attempts.Load(), Retries: c.Retries.Load(),
		Resolves: c.Resolves.Load(), Resolved: c.Resolved.Load(), Replayed: c.Replayed.Load(),
		BudgetRefusals: c.Refusals.Load(), Ambiguous: c.Ambiguous.Load(),
	}
}
