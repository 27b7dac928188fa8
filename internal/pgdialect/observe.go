package pgdialect

import (
	"errors"

	"github.com/opledger/opledger/internal/dialectkit"
)

var _ dialectkit.Observed = Dialect{}

// SystemName returns "postgresql".
func (Dialect) SystemName() string { return "postgresql" }

// StatusCode returns err's SQLSTATE, or "".
func (Dialect) StatusCode(err error) string {
	var s sqlStater
	if errors.As(err, &s) {
		return s.SQLState()
	}
	return ""
}
