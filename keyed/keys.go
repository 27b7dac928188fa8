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

// DownstreamKey returns the idempotency key of a keyed call that the
// operation running in ctx makes as step (see ledger.Identity.DerivedKey):
// the same on every run and every retry of the operation, so that a chain
// of keyed services behaves as one, and revealing nothing of the
// operation's own key. ctx must be (or derive from) a keyed handler's
// context; otherwise the error wraps ledger.ErrNoOperation.
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
