package keyed

import (
	"context"
	"fmt"
	"time"

	"github.com/opledger/opledger/internal/keybirth"
	"github.com/opledger/opledger/ledger"
)

// NewKey returns a fresh idempotency key that carries its birth: a UUID of
// version 7 (RFC 9562) in its 36-character form, 48 bits of the current
// Unix time in milliseconds and 74 random bits. A ledger reads the birth
// back (ledger.Identity's Birth) and refuses a retry of the key once it is
// older than the ledger's window, instead of running the call again.
func NewKey() string { return keybirth.New(time.Now()) }

// DownstreamKey returns the idempotency key for a downstream call that a
// keyed handler makes as step, a name the handler chooses ("charge",
// "fraud-check"): derived from the current operation's identity (caller,
// method and key of the upstream call) and step, with
// ledger.Identity.DerivedKey. It is the same on every retry of the
// upstream call and every run of its handler, and differs across callers,
// methods, keys and steps; it reveals nothing of the upstream key. Send it
// to a downstream keyed method (grpcint.WithKey, connectint.WithKey, an
// Idempotency-Key header) so that the downstream replays instead of
// running twice when the upstream call is retried, or to a system outside
// the kit as its own idempotency key (a payment provider's). Give each
// downstream call of one operation its own step.
//
// ctx must be the handler's context (or derived from it): outside a keyed
// call the error matches ledger.ErrNoOperation; a bad step matches
// ledger.ErrInvalid.
func DownstreamKey(ctx context.Context, step string) (string, error) {
	id, ok := ledger.OperationFromContext(ctx)
	if !ok {
		return "", fmt.Errorf("downstream key: %w", ledger.ErrNoOperation)
	}
	k, err := id.DerivedKey(step)
	if err != nil {
		return "", fmt.Errorf("downstream key: %w", err)
	}
	return k, nil
}
