//go:build !race

package policy

// raceEnabled reports that the race detector is on.
const raceEnabled = false
