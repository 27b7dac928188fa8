// Package harness is a room, not a library: its sub-packages run the kit
// against real faults for the chaos and demo commands (and the demo's
// scenario in examples/payments) and for the tests (chaos: the chaos
// run itself, which `opledger chaos` calls; throwaway: database servers a
// run may kill and restart; faultproxy: a loopback TCP proxy that cuts
// connections; timeline, answers, otelread: what a run reports). No
// library package imports them (checked in .ci/run).
package harness
