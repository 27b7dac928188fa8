// Package postgres is the ledger dialect for PostgreSQL, and for the
// databases that speak its SQL (CockroachDB, YugabyteDB). Create one with
// [New] and pass it to ledger.New, migrations.New or outbox.New.
//
// It works with any database/sql driver whose errors expose
// SQLState() string: lib/pq (v1.10.6 and later) and pgx's stdlib driver.
// It imports no driver.
//
// The claim is INSERT … ON CONFLICT DO NOTHING; after a conflict
// only, the ledger reads the existing entry with a plain SELECT, which
// under READ COMMITTED sees a concurrent claimant's row once it has
// committed (the insert waits for it). Under REPEATABLE READ and
// SERIALIZABLE PostgreSQL raises 40001 instead, classified as a
// serialization failure (retry the transaction). ON CONFLICT never raises
// 23505 for the claim, so the caller's transaction is never poisoned. The
// replay path takes no row lock and writes nothing. The dialect's queries
// also have the one-statement form (Queries.Claim, for a ledger built with
// ledger.WithOneStatementClaim): the insert in a data-modifying CTE whose
// outer query reads the existing entry from the statement's snapshot, so
// that a replay of an entry committed before the statement began costs
// that one statement (at a cost to every acquisition: see
// docs/benchmarks.md).
//
// For a driver that pipelines (pgx: package pgxledger), the dialect
// has the forms sent with COMMIT: a completion and a record that fail,
// aborting the transaction, where the plain forms would match nothing.
//
// A bounded claim (ClaimRequest.LockWait) sets lock_timeout inside the
// claim statement itself, with set_config('lock_timeout', …, true) in a
// CTE evaluated before the insert: transaction-scoped like SET LOCAL, and
// no statement of its own.
//
// Behind a connection pooler in transaction mode (PgBouncer
// pool_mode=transaction) the ledger works as long as the driver does not
// keep prepared statements between transactions: pgx needs
// default_query_exec_mode=exec in its DSN, lib/pq binary_parameters=yes.
// [CheckPooling] probes for it, the errors a misconfigured driver
// gets match [ErrStatementPooling], and the migrations' session lock
// refuses the pooler with [ErrTransactionPooling]: run them over a direct
// connection. The repository's docs/poolers.md has the details.
package postgres
