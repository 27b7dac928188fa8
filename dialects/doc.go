// Package dialects is the seam between the ledger and a database family.
//
// A [Dialect] owns every SQL statement the ledger runs (see [Queries]),
// its placeholder syntax and identifier quoting, and classifies driver
// errors into the few [Class] values the ledger and txmiddleware act on.
// Nothing outside this package and its sub-packages looks at a dialect's
// name to decide anything. Implementations for PostgreSQL, SQLite and
// MySQL/MariaDB (and TiDB) live in the sub-packages postgres, sqlite and
// mysql; none imports a cgo driver.
//
// # Optional interfaces
//
// What only some databases can do is an optional interface, found with a
// type assertion. Each entry says who calls it and what a dialect without
// it gets.
//
// Claims and records (package ledger):
//   - [RecordQuerier]: the SQL of the ledger's Record (claim at commit) in
//     one statement. Called by ledger.Store.Record and TxStore.Record.
//     Without it Record claims and completes: two statements.
//   - [StatementBounder]: the ledger's SQL with lock waits bounded inside
//     its own statements. Called by the ledger for ClaimRequest.LockWait;
//     the ledger reports it as ledger.LockWaitBounder, and txmiddleware then
//     prefers it to [LockWaiter]. Without it a positive LockWait is
//     refused (ErrInvalid) and runners bound the transaction instead.
//   - [Pipeliner]: forms of Complete and Record that are safe to send with
//     COMMIT in one round trip. Called by ledger.TxStore's CompleteCommit
//     and RecordCommit (package pgxledger). Without it those steps run as
//     a statement, then COMMIT.
//   - [TxChecker]: refuses a transaction mode in which a claim is unsafe
//     (TiDB's optimistic transactions). Called by ledger.Store before a
//     claim or a record. Without it every transaction is accepted.
//
// Lock waits of a whole transaction (txmiddleware, the sweep):
//   - [LockWaiter]: begins a database/sql transaction whose lock waits end
//     after a bound ([BeginOnConn] builds one from a session setting).
//     Called by txmiddleware.WithLockWait (also behind grpcint and
//     httpint), ledger.WithSweepLockWait and the conformance suite.
//     Without it WithSweepLockWait is refused at construction, and so is
//     WithLockWait unless the ledger bounds its statements
//     ([StatementBounder]).
//
// Schema and outbox:
//   - [Schema]: the ledger's table as goose migrations, with a
//     [SessionLocker]. Called by package migrations and opledger migrate.
//     Without it migrations.New fails with migrations.ErrNoMigrations; the
//     user creates the table.
//   - [Outboxer]: the SQL of the transactional outbox. Called by
//     outbox.New. Without it outbox.New fails with outbox.ErrNoOutbox.
//
// Errors and telemetry:
//   - [Observed]: db.system.name and db.response.status_code for metrics
//     and spans. Called through [SystemNameOf] and [StatusCodeOf] by the
//     ledger and txmiddleware. Without it: "other_sql" and no status code.
//   - [ErrorExplainer]: says what a driver's error means for the user's
//     setup. Called through [Explain] by the ledger before wrapping a
//     ledger.DBError. Without it the driver's error stands alone.
//
// Testing and operations:
//   - [PoolingChecker]: probes whether the driver works through the pooler
//     in front of the database. Called by the conformance suite before its
//     cases. Without it the probe is skipped.
//   - [Sessions]: the database's own view of sessions and lock waits (who
//     blocks whom; kill a session). Called by the conformance suite to wait
//     on a lock wait instead of watching for a while, and for its kill
//     fault. Without it the suite watches the waiters for a fixed time
//     and skips the kill fault.
//   - [Described]: how the database behaves under concurrency ([Traits]:
//     isolation levels, serial writers). Called through [TraitsOf] by
//     conformance.DefaultCapabilities and the suite's cases. Without it the
//     suite runs at the default isolation level only.
//   - [Sizer]: how many bytes a table takes. Called by opledger stats.
//     Without it the size is reported unavailable.
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
// [LockWaiter] (or runners cannot bound a lock wait); the rest are
// improvements. Wrapping an existing dialect (embedding postgres.Dialect
// and overriding what differs) is enough for a database that speaks the
// same SQL: the embedded value's optional interfaces are promoted with it.
// A new dialect is ready when the conformance suite passes on it;
// docs/dialect-guide.md walks through one. The kit adds no methods to
// Dialect within a major version; new abilities come as new optional
// interfaces.
package dialects
