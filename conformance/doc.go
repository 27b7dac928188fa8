// Package conformance is the ledger's concurrency conformance suite: an
// importable, non-test package that runs every claim pattern with many
// goroutines on real connections against a real database, and proves (or
// disproves) that a [ledger.Ledger] makes a keyed mutation take effect
// once.
//
// A [Target] names the *sql.DB, its dialect, a constructor for the ledger
// under test and, optionally, its capabilities (isolation levels offered,
// whether connections can be killed, how to bound a lock wait). Each case
// creates its own uniquely named scratch table from the dialect's
// migrations ([dialects.Schema]) or the target's Setup hook, and drops it
// afterwards, so the suite never touches user data.
//
// # Capabilities from the dialect
//
// The suite never looks at a dialect's name. A Target whose Capabilities
// is nil gets [DefaultCapabilities] of its dialect, found through the
// dialect's optional interfaces: the isolation levels of the kit's own
// dialects (the default level only for others), KillConnections for the
// kit's own dialects that can kill a session, and the bounded lock wait of
// the in-progress case from [dialects.LockWaiter]. A dialect written
// outside the kit, for example one that wraps postgres.New() under another
// name, gets the in-progress case and names its database's isolation
// levels in Capabilities.Levels; a dialect with none of the optional
// interfaces runs the cases it can and skips the others with the reason.
//
// # Waiting on the database
//
// Several cases hold a claim open and need the other claimants blocked
// behind it before they commit, roll back or kill the holder. Where the
// dialect shows its sessions (the kit's PostgreSQL and MySQL dialects; not
// SQLite, whose writers are serial), the suite asks the database who waits
// for the holder's session (PostgreSQL pg_blocking_pids, MariaDB
// INNODB_LOCK_WAITS, MySQL 8 performance_schema.data_lock_waits) and goes
// on as soon as every claimant is shown waiting; a claimant that has not
// returned within two seconds is taken to be waiting all the same. Without
// that view (SQLite waits for its write lock at BEGIN, in a busy handler no
// view shows) the suite gives the claimants 300 ms to return early. Either
// way a claimant that returns while the holder is open fails the case.
//
// From a Go test, each case is a subtest:
//
//	func TestLedgerConformance(t *testing.T) {
//		db := openMyDatabase(t)
//		conformance.Run(t, conformance.StoreTarget("postgres", db, postgres.New()))
//	}
//
// From a tool, [Check] returns a [Report] with a verdict, duration and
// figures per case instead of failing a test; `opledger conformance` is
// built on it.
//
// The cases, what each proves and which broken implementation it catches
// are listed by [Cases] and described in the repository's
// docs/conformance.md. The suite's own tests run a deliberately naive
// read-then-insert ledger and a ledger that claims in a transaction of its
// own through it and assert which cases catch each.
package conformance
