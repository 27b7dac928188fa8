package keyed

import (
	"context"
	"crypto/rand"
	"fmt"

	"github.com/opledger/opledger/ledger"
)

// NewKey returns a fresh random idempotency key: 128 bits as 26 base32
// characters.
func NewKey() string { return rand.Text() }

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
