package txmiddleware

import "github.com/opledger/opledger/ledger"

// ErrorCodec decides which errors of the work are final, that is a
// definite answer to the request that is recorded, committed and replayed
// to every retry instead of rolled back, and turns them into a stored
// result and back. Package grpcint supplies the codec for gRPC handlers
// (google.rpc.Status); an HTTP or other transport supplies its own.
// Implementations must be safe for concurrent use.
type ErrorCodec interface {
	// Encode returns the result to record for err, with a non-zero Code,
	// and true when err is final; false means err is not final (or cannot
	// be recorded): the work's writes roll back and a retry runs it again.
	Encode(err error) (ledger.Result, bool)
	// Decode returns the error that a recorded result with a non-zero Code
	// stands for: the same error, as far as the transport can tell, as the
	// one Encode recorded.
	Decode(r ledger.Result) error
}
