package connectint

import (
	"connectrpc.com/connect"

	"github.com/opledger/opledger/keyed"
)

// TableCells renders an outcome as docs/connect.md prints it.
var TableCells = tableCells

// Rendering is how connect renders an outcome.
func Rendering(o keyed.Outcome) (connect.Code, string, string, bool) {
	c, reason, own, pushback := dialect.Rendering(o)
	return connect.Code(c), reason, own, pushback
}
