package grpcint

import (
	"fmt"

	"google.golang.org/protobuf/proto"

	"github.com/opledger/opledger/ledger"
)

// RequestFingerprint returns the SHA-256 of the deterministic protobuf
// encoding of req: the value the ledger stores to tell a retry of the
// same request from a key reused for another one. Deterministic
// marshalling is stable for one build of the message type; a change to
// the message's schema between a call and its retry can change it (the
// retry then gets FAILED_PRECONDITION, never a wrong replay).
func RequestFingerprint(req any) (ledger.Fingerprint, error) {
	m, ok := req.(proto.Message)
	if !ok {
		return ledger.Fingerprint{}, fmt.Errorf("grpcint: request of type %T is not a protobuf message", req)
	}
	b, err := proto.MarshalOptions{Deterministic: true}.Marshal(m)
	if err != nil {
		return ledger.Fingerprint{}, fmt.Errorf("grpcint: marshal request: %w", err)
	}
	return ledger.FingerprintOf(b), nil
}
