package sqlitedialect

import (
	"strconv"

	"github.com/opledger/opledger/internal/dialectkit"
)

var _ dialectkit.Observed = Dialect{}

// SystemName returns "sqlite".
func (Dialect) SystemName() string { return "sqlite" }

// StatusCode returns err's (extended, where the driver gives it) SQLite
// result code in decimal, or "".
func (Dialect) StatusCode(err error) string {
	if code, ok := resultCode(err); ok {
		return strconv.Itoa(code)
	}
	return ""
}
