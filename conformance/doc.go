// Package conformance is the ledger's concurrency conformance suite: an
// importable, non-test package that runs every claim pattern with many
// goroutines on real connections against a real database, and proves (or
// disproves) that a [ledger.Ledger] makes a keyed mutation take effect
// once.
//
// A [Target] names the *sql.DB, its dialect, a constructor for the ledger
// under test and its capabilities (isolation levels offered, whether
// connections can be killed, how to bound a lock wait). Each case creates
// its own uniquely named scratch table from the kit's migrations (or the
// target's Setup hook) and drops it afterwards, so the suite never touches
// user data.
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
// are listed by [Cases] and described in docs/conformance.md. The suite's
// own tests run a deliberately naive read-then-insert ledger and a ledger
// that claims in a transaction of its own through it and assert which
// cases catch each.
package conformance
