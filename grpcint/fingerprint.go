package grpcint

import (
	"fmt"

	"github.com/opledger/opledger/internal/keyedcore/keyedproto"
	"github.com/opledger/opledger/ledger"
)

// RequestFingerprint returns the SHA-256 of the deterministic protobuf
// encoding of req: the value the ledger stores to tell a retry of the
// same request from a key reused for another one. Deterministic
// marshalling is stable for one build of the message type; a change to
// the message's schema between a call and its retry can change it (the
// retry then gets FAILED_PRECONDITION, never a wrong replay).
func RequestFingerprint(req any) (ledger.Fingerprint, error) {
	fp, err := keyedproto.Fingerprint(req)
	if err != nil {
		return ledger.Fingerprint{}, fmt.Errorf("grpcint: %w", err)
	}
	return fp, nil
}
