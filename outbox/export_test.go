package outbox

import "context"

// The tests of package outbox_test reach these through the names below.

// WithClock is withClock.
var WithClock = withClock

// DeadError is Drain's error type.
type DeadError = deadError

// UndeliverableError is Enqueue's error type for a refused message.
type UndeliverableError = undeliverableError

// RunOnce is runOnce.
func (r *Relay) RunOnce(ctx context.Context) (int, error) { return r.runOnce(ctx) }

// Table is tableName.
func (o *Outbox) Table() string { return o.tableName() }
