// Package units converts lock-wait bounds to the units databases take.
package units

import "time"

// Millis returns d in whole milliseconds, rounded up, at least 1: the
// resolution of PostgreSQL's lock_timeout and SQLite's busy_timeout.
func Millis(d time.Duration) int64 {
	ms := int64((d + time.Millisecond - 1) / time.Millisecond)
	if ms < 1 {
		ms = 1
	}
	return ms
}
