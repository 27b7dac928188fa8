package ledger

import (
	"fmt"

	"github.com/opledger/opledger/internal/outcomes"
)

// SetAfterConflict installs a hook that runs between a conflicting insert
// and the read-back, so tests can delete the row in that window.
func SetAfterConflict(s *Store, f func()) { s.core.afterConflict = f }

// DefaultBucketWidth is the sweep's bucket width for a retention, without
// WithBucketWidth.
var DefaultBucketWidth = defaultBucketWidth

// OutcomeOf names what a Claim returned, as the ledger's metrics do.
var OutcomeOf = claimOutcome

// OutcomeName returns the name the ledger's metrics give o.
func OutcomeName(o ClaimOutcome) string {
	switch o {
	case Acquired:
		return outcomes.Acquired
	case Replay:
		return outcomes.Replayed
	case Recorded:
		return outcomes.Recorded
	}
	return fmt.Sprintf("Outcome(%d)", int(o))
}
