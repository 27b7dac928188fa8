package ledger

// SetAfterConflict installs a hook that runs between a conflicting insert
// and the read-back, so tests can delete the row in that window.
func SetAfterConflict(s *Store, f func()) { s.core.afterConflict = f }

// ClaimOutcome names what a Claim returned, as the ledger's metrics do.
var ClaimOutcome = claimOutcome
