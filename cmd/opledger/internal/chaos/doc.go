// Package chaos is the harness behind `opledger chaos`: it runs replicas
// of the example payments service as processes on a database, kills
// them (also between COMMIT and the answer), restarts or fails over the
// database, cuts the connections around them, and checks every logical
// call against the business table, the ledger and the replicas' own
// commit log: duplicate and lost effects, wrong answers, ambiguous
// returns. docs/reliability.md reads its figures.
//
// The package owns the run (Run, Settings, Target), the replicas
// (ReplicaSettings, ServeReplica), the check and the report (Report, its
// JSON names, PrintTable, WriteJSON, WriteReports). The command owns the
// rest: its flags and their checks, its help, exit codes and messages,
// and the databases' DSNs, which it parses and opens for the harness
// (Opener); the harness parses no DSN and prints none but the names the
// command gives it.
//
// A replica is the run's own binary started again (Settings.Exe) with
// the hidden command ReplicaCommand and ReplicaEnv=1 in its environment.
// The binary's command line hands ReplicaCommand's flags
// (ReplicaSettings.SetFlags) to ServeReplica. A test binary that runs
// the harness stands in for that binary: its TestMain, seeing ReplicaEnv,
// serves as the replica instead of running the tests (cmd/opledger's and
// this package's own tests do).
//
// Like every package under internal/harness it is not a library: no
// library package imports it (checked in .ci/run).
package chaos
