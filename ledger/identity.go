package ledger

import (
	"crypto/sha256"
	"encoding/hex"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/opledger/opledger/internal/keybirth"
	"github.com/opledger/opledger/internal/ledgerkit"
	"github.com/opledger/opledger/internal/methodname"
)

// Identity names one logical operation: who asked (the caller
// fingerprint), what was asked (the full gRPC method, or for HTTP the
// method and route pattern) and which attempt
// family (the SHA-256 of the caller's idempotency key). All three parts
// are load-bearing: without the caller one tenant's key suppresses
// another's write; without the method a key reused across operations
// replays the wrong answer.
//
// An identity also knows when its key was born, where that can be read
// (see [Identity.Birth]): the ledger refuses a key born before its window
// instead of running it again (see [ErrKeyExpired]).
//
// The zero Identity is invalid; build one with [NewIdentity]. An Identity
// holds no trace of the raw key besides its hash.
type Identity struct {
	caller  string
	method  string
	keyHash [32]byte
	id      [32]byte
	birth   int64 // Unix microseconds; 0 when unknown
}

// NewIdentity validates the three parts and returns the identity.
//
// caller must be non-empty, at most 512 bytes of valid UTF-8 without
// control characters. method must be a full gRPC method name,
// "/package.Service/Method", or an HTTP route, "POST /orders/{id}": a
// leading slash, a service name of dotted identifiers, a slash and a
// method identifier (what grpcint stores), or an HTTP method in capitals
// (A-Z, then A-Z, 0-9, "-" or "_", at most 32 bytes), one space, and a
// route pattern that starts with "/" and holds only visible ASCII (what
// httpint stores), at most 512 bytes in all. key must be 1 to 255 bytes
// of printable ASCII.
// Errors wrap [ErrInvalid]; they never contain the key.
func NewIdentity(caller, method, key string) (Identity, error) {
	if err := checkCaller(caller); err != nil {
		return Identity{}, err
	}
	if err := checkMethod(method); err != nil {
		return Identity{}, err
	}
	if err := checkKey(key); err != nil {
		return Identity{}, err
	}
	id := newIdentity(caller, method, sha256.Sum256([]byte(key)))
	if b, ok := keybirth.Birth(key); ok {
		id.birth = b.UnixMicro()
	}
	return id, nil
}

// WithFirstSent returns the identity of a key that carries no birth of its
// own, sent with the time its caller first sent it (a first-sent field or
// header): t becomes the identity's birth, and part of the identity, so
// that (key, first-sent) is one value. An attempt that sends the same key
// with another first-sent time is another operation, as one with another
// key is: every attempt of a call must send the first attempt's time. The
// ledger could not refuse such an attempt instead: a ledger partitioned by
// birth would place the two attempts' entries in two partitions, where
// neither sees the other.
//
// When the key carries its own birth (a UUIDv7), t is ignored and i is
// returned as it is: the key's birth cannot differ between attempts. t
// must be after the Unix epoch; errors wrap [ErrInvalid] (field "first
// sent").
func (i Identity) WithFirstSent(t time.Time) (Identity, error) {
	switch {
	case i.IsZero():
		return Identity{}, invalid("caller", "identity is zero; build it with NewIdentity")
	case t.UnixMicro() <= 0:
		return Identity{}, invalid("first sent", "must be after the Unix epoch")
	case i.birth != 0:
		return i, nil
	}
	out := i
	out.birth = t.UnixMicro()
	out.id = digestFirstSent(i.caller, i.method, i.keyHash, out.birth)
	return out, nil
}

// Birth returns when the identity's key was born, and whether that is
// known: from the key itself (a UUIDv7) or from [Identity.WithFirstSent].
// A key without a readable birth (a random string) has none: the ledger
// then remembers it for its retention from its claim, and a late retry
// past that runs again.
func (i Identity) Birth() (time.Time, bool) {
	if i.birth == 0 {
		return time.Time{}, false
	}
	return time.UnixMicro(i.birth).UTC(), true
}

func newIdentity(caller, method string, keyHash [32]byte) Identity {
	return Identity{caller: caller, method: method, keyHash: keyHash, id: digest(caller, method, keyHash)}
}

// digest is the compact primary key: SHA-256 over the length-prefixed
// triple, so two different triples never produce the same input.
func digest(caller, method string, keyHash [32]byte) [32]byte {
	return ledgerkit.Digest(caller, method, keyHash)
}

// digestFirstSent is the primary key of an identity whose birth is a
// first-sent time: the triple's encoding followed by the length-prefixed
// birth, so that it never equals a triple's digest.
func digestFirstSent(caller, method string, keyHash [32]byte, birth int64) [32]byte {
	return ledgerkit.DigestFirstSent(caller, method, keyHash, birth)
}

// Caller returns the caller fingerprint.
func (i Identity) Caller() string { return i.caller }

// Method returns the method: a full gRPC method name or an HTTP route.
func (i Identity) Method() string { return i.method }

// ID returns the entry's primary key: the SHA-256 of the length-prefixed
// (caller, method, key hash) triple.
func (i Identity) ID() [32]byte { return i.id }

// IsZero reports whether i is the zero (invalid) Identity.
func (i Identity) IsZero() bool { return i.caller == "" }

// String returns a form safe to log: caller, method and a short prefix of
// the entry id. It never contains the key.
func (i Identity) String() string {
	if i.IsZero() {
		return "ledger.Identity(zero)"
	}
	return i.caller + " " + i.method + " " + hex.EncodeToString(i.id[:6])
}

func checkCaller(caller string) error {
	switch {
	case caller == "":
		return invalid("caller", "must not be empty")
	case len(caller) > ledgerkit.MaxCallerLen:
		return invalid("caller", "longer than 512 bytes")
	case !utf8.ValidString(caller):
		return invalid("caller", "not valid UTF-8")
	case strings.IndexFunc(caller, unicode.IsControl) >= 0:
		return invalid("caller", "contains a control character")
	}
	return nil
}

// checkMethod reports whether method is one of the two forms of an
// identity's method, at most ledgerkit.MaxMethodLen bytes in all:
//
//   - a full gRPC method name, "/package.Service/Method": a leading slash,
//     a service name of dotted identifiers, a slash and a method
//     identifier (what grpcint stores);
//   - an HTTP route, "POST /orders/{id}": an HTTP method in capitals
//     (A-Z, then A-Z, 0-9, "-" or "_", at most 32 bytes), one space, and
//     a route pattern that starts with "/" and holds only visible ASCII
//     (what httpint stores).
//
// A name that starts with "/" is checked as the first form, any other as
// the second, so the two never overlap. Errors wrap [ErrInvalid].
func checkMethod(method string) error {
	if err := methodname.CheckOperation(method); err != nil {
		return invalid("method", err.Error())
	}
	return nil
}

func checkKey(key string) error {
	if len(key) == 0 || len(key) > ledgerkit.MaxKeyLen {
		return invalid("key", "must be 1 to 255 bytes")
	}
	for i := 0; i < len(key); i++ {
		if key[i] < 0x20 || key[i] > 0x7e {
			return invalid("key", "must be printable ASCII")
		}
	}
	return nil
}

// Fingerprint is the digest of a canonical encoding of the request (in
// grpcint, SHA-256 of the deterministic protobuf marshalling). The ledger
// stores it with the claim to tell a retry from a reused key.
type Fingerprint [32]byte

// FingerprintOf returns the SHA-256 of b.
func FingerprintOf(b []byte) Fingerprint { return sha256.Sum256(b) }
