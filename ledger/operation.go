package ledger

import (
	"context"
	"crypto/sha256"
	"encoding/base32"
	"encoding/binary"
	"errors"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/opledger/opledger/internal/keybirth"
	"github.com/opledger/opledger/internal/ledgerkit"
)

// ErrNoOperation means a context carries no operation: the code asking
// for a derived key or an outbox message id does not run inside a keyed
// call's work (see [ContextWithOperation]).
var ErrNoOperation = errors.New("ledger: the context carries no operation; call from inside a keyed call's work")

type operationKey struct{}

// ContextWithOperation returns a copy of ctx that carries id as the
// operation whose work runs under it. txmiddleware's Runner does this for
// the work it runs (so every keyed gRPC handler has it); call it yourself
// after a Claim you wrote by hand acquired id. Downstream keys
// (keyed.DownstreamKey) and outbox message ids are derived from it. The
// context holds the identity, which holds the key's hash, never the key.
func ContextWithOperation(ctx context.Context, id Identity) context.Context {
	return context.WithValue(ctx, operationKey{}, id)
}

// OperationFromContext returns the operation ctx carries (see
// [ContextWithOperation]).
func OperationFromContext(ctx context.Context) (Identity, bool) {
	id, ok := ctx.Value(operationKey{}).(Identity)
	return id, ok && !id.IsZero()
}

// Derive returns a 32-byte value derived from the identity, a purpose and
// a name: SHA-256 over a domain tag, the identity's ID and the
// length-prefixed purpose and name. It is the same for the same three
// inputs on every run and every machine, differs when any of them differs
// (so across callers, methods, keys, purposes and names), and reveals
// nothing of the idempotency key beyond what the identity's ID does.
// purpose separates uses (the kit uses "downstream-key" and
// "outbox-message"); name must be 1 to 512 bytes of valid UTF-8
// without control characters. Errors wrap [ErrInvalid].
func (i Identity) Derive(purpose, name string) ([32]byte, error) {
	if i.IsZero() {
		return [32]byte{}, invalid("caller", "identity is zero; build it with NewIdentity")
	}
	if err := checkName(name); err != nil {
		return [32]byte{}, err
	}
	h := sha256.New()
	var n [8]byte
	h.Write([]byte("opledger/derive/v1\x00"))
	h.Write(i.id[:])
	for _, s := range []string{purpose, name} {
		binary.BigEndian.PutUint64(n[:], uint64(len(s)))
		h.Write(n[:])
		h.Write([]byte(s))
	}
	var out [32]byte
	h.Sum(out[:0])
	return out, nil
}

var keyEncoding = base32.NewEncoding("abcdefghijklmnopqrstuvwxyz234567").WithPadding(base32.NoPadding)

// DerivedKey returns the idempotency key of a downstream call that the
// operation i makes as step (a name its handler chooses, such as
// "charge"), derived from i.Derive("downstream-key", step). Every run and
// every retry of the operation gets the same key for the same step, so a
// keyed downstream replays instead of running twice; two steps, callers,
// methods or keys never share one.
//
// When i's key carries its birth ([Identity.Birth]), so does the derived
// key: a UUIDv7 born when i's key was, so that a downstream ledger refuses
// a late retry of the operation as i's ledger does, instead of running the
// downstream call again. Otherwise it is "dk1-" followed by 52 base32
// characters. Either is a valid key for [NewIdentity] and for any system
// that accepts printable ASCII keys of 36 or 56 characters.
func (i Identity) DerivedKey(step string) (string, error) {
	d, err := i.Derive("downstream-key", step)
	if err != nil {
		return "", err
	}
	if b, ok := i.Birth(); ok {
		return keybirth.Derived(b, d), nil
	}
	return ledgerkit.DerivedKeyPrefix + keyEncoding.EncodeToString(d[:]), nil
}

func checkName(name string) error {
	switch {
	case name == "":
		return invalid("name", "must not be empty")
	case len(name) > ledgerkit.MaxNameLen:
		return invalid("name", "longer than 512 bytes")
	case !utf8.ValidString(name):
		return invalid("name", "not valid UTF-8")
	case strings.IndexFunc(name, unicode.IsControl) >= 0:
		return invalid("name", "contains a control character")
	}
	return nil
}
