package grpcint

import (
	"google.golang.org/grpc/codes"

	"github.com/opledger/opledger/keyed"
)

// TableCells renders an outcome as docs/grpc.md's table prints it.
var TableCells = tableCells

// ErrorMap is the kit's error map, one row per reason (docs/grpc.md).
var ErrorMap = errorMap

// Mapping is one row of ErrorMap.
type Mapping = mapping

// Rendering is how gRPC renders an outcome.
func Rendering(o keyed.Outcome) (codes.Code, string, string, bool) {
	c, reason, own, pushback := dialect.Rendering(o)
	return codes.Code(c), reason, own, pushback
}
