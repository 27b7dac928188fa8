// Package dialects is the seam between the ledger and a database family.
//
// API is not stable. DO NOT USE it to build on the kit: applications pick
// a dialect with a constructor of a sub-package (postgres.New,
// mysql.New, mysql.NewTiDB, sqlite.New) and pass it on, and never need
// more of this package than the [Dialect] type. The package is exported
// for one reader only, the author of a dialect for another database, and
// may change in any release, minor ones included, as River's riverdriver
// does (docs/adr/0005-dialect-seam.md says why).
//
// A [Dialect] owns every SQL statement the ledger runs (see [Queries]),
// its placeholder syntax and identifier quoting, and classifies driver
// errors into the few [Class] values the ledger and txmiddleware act on.
// Nothing in the kit looks at a dialect's name to decide anything. The
// kit's own dialects (PostgreSQL, SQLite, MySQL/MariaDB and TiDB) live in
// the sub-packages postgres, sqlite and mysql; none imports a cgo driver.
//
// # Optional interfaces
//
// What only some databases can do is an optional interface, found with a
// type assertion. Two are part of this seam:
//   - [Schema]: the ledger's table as goose migrations, with a
//     [SessionLocker]. Called by package migrations and opledger migrate.
//     Without it migrations.New fails with migrations.ErrNoMigrations; the
//     user creates the table (docs/ledger.md has the columns).
//   - [LockWaiter]: begins a database/sql transaction whose lock waits end
//     after a bound. Called by txmiddleware.WithLockWait (also behind
//     grpcint and httpint), ledger.WithSweepLockWait and the conformance
//     suite's in-progress case. Without it WithSweepLockWait is refused at
//     construction, and so is WithLockWait.
//
// The kit's own dialects implement further interfaces (claim at commit
// in one statement, lock waits bounded inside the ledger's statements,
// pgx pipelines, the outbox's SQL, telemetry names, the session view the
// conformance suite kills connections with, …). Those are internal to the
// kit: a dialect of another module works without them, and the ledger
// then takes the general path (two statements for a Record, a bounded
// transaction instead of bounded statements, no outbox).
//
// # Writing a dialect
//
// Anyone may implement Dialect, in any module: the ledger, migrations,
// txmiddleware and the conformance suite use only this package's
// interfaces. A new dialect must implement Dialect: Queries with every
// statement its field documents (Insert, Select, TakeOver, Complete,
// Lookup and Sweep at least), and Classify for unique violations, lock
// timeouts, serialization failures, deadlocks and broken connections. It
// should implement [Schema] (or its users create the table) and
// [LockWaiter] (or runners cannot bound a lock wait). Wrapping one of the
// kit's dialects (embedding the [Dialect] that postgres.New returns,
// overriding what differs and forwarding [Schema] and [LockWaiter]) is
// enough for a database that speaks the same SQL. A new dialect is ready
// when the conformance suite passes on it; docs/dialect-guide.md walks
// through one. [ErrUnsuitableTx] is the error of a dialect that refuses a
// transaction mode in which a claim is unsafe (the TiDB dialect's
// optimistic transactions).
package dialects
