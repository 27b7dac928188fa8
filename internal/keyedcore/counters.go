package keyedcore

import (
	"sync/atomic"

	"github.com/opledger/opledger/internal/keyedcore/retry"
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

// Event counts what a client's retry loop did.
func (c *ClientCounters) Event(e retry.Event) {
	switch e {
	case retry.Retried:
		c.Retries.Add(1)
	case retry.Resolved:
		c.Resolved.Add(1)
	case retry.BudgetRefused:
		c.Refusals.Add(1)
	}
}
