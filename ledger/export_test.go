package ledger

// SetAfterConflict installs a hook that runs between a conflicting insert
// and the read-back, so tests can delete the row in that window.
func SetAfterConflict(s *Store, f func()) { s.core.afterConflict = f }

// SplitClaim makes s claim with an insert and a separate read even where
// the dialect has a one-statement claim, so tests reach the read-back.
func SplitClaim(s *Store) { s.core.oneStatement = false }
