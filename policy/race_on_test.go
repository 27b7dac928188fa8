//go:build race

package policy

// raceEnabled reports that the race detector is on; the slow three-layer
// simulation is skipped then (it exercises no concurrency).
const raceEnabled = true
