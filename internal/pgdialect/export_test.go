package pgdialect

import "github.com/opledger/opledger/dialects"

// NewLockWithSQL returns the migrations' session lock taking the lock
// with lockSQL ($1 the lock's id) instead of pg_advisory_lock, for tests
// that make a grant race a lock timeout.
func NewLockWithSQL(lockSQL string) dialects.SessionLocker {
	return &advisoryLock{lockSQL: lockSQL}
}
