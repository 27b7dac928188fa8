// Package mysql is the ledger dialect for MySQL and MariaDB (InnoDB) and
// for TiDB, and the starting point for Vitess. Create one with [New],
// [NewTiDB], [SchemeDialect] or [Detect]; open the database with [DSN] or
// [Config].
//
// It reads errors through go-sql-driver/mysql's *MySQLError, which is pure
// Go: importing this package never needs cgo.
//
// InnoDB behaves differently from PostgreSQL under concurrent duplicate
// inserts, and the SQL here is chosen for the measured facts:
//
//   - The claim is a plain INSERT. On a duplicate it waits for the holder;
//     if the holder commits, it fails with 1062, which rolls back only the
//     statement, not the transaction (no savepoint is needed). INSERT
//     IGNORE is not used because it also turns NOT NULL, truncation and
//     foreign-key errors into warnings. ON DUPLICATE KEY UPDATE is not used
//     because its affected-rows count cannot tell "inserted" from "existed"
//     when the DSN has clientFoundRows=true.
//   - The read after a conflict is a locking read (LOCK IN SHARE MODE,
//     which MariaDB and MySQL 8 both accept). Under REPEATABLE READ a
//     transaction that has read anything before the claim reads from its
//     first snapshot, and a plain SELECT would find the committed winner's
//     row absent. A locking read reads the latest committed version. The
//     1062 has already left a shared lock on that row, so the read adds no
//     new lock conflict.
//   - When the holder rolls back while two or more others wait on the same
//     key, InnoDB answers one of them with deadlock 1213 and rolls back
//     that whole transaction: it is classified [dialects.ClassDeadlock],
//     which the ledger reports as retryable. Lock wait timeout 1205 rolls
//     back only the statement (innodb_rollback_on_timeout=OFF, the default)
//     and is classified [dialects.ClassLockTimeout] (ledger.ErrInProgress).
//   - TakeOver and Complete are UPDATEs that always change the row
//     (TakeOver moves expires_at forward, Complete sets completed_at from
//     NULL), so one matched row is one affected row with and without
//     clientFoundRows: the ledger may decide by RowsAffected.
//
// TiDB speaks the same protocol and SQL but is another server underneath,
// and [NewTiDB] returns the dialect's TiDB variant (see its doc): a Dialect
// value holds no connection, so which server it is for is chosen when it is
// built, by the caller ([New] or [NewTiDB]), from a tidb:// URL, or by
// [Detect], which asks the server. [New] against a TiDB server fails the
// first claim that needs its read-back with an error matching
// [ErrTiDBServer], which names the fix.
//
// Times are stored as BIGINT Unix microseconds; open the database with a
// DSN from [DSN] (or set parseTime=true yourself), which goose's version
// table needs for its TIMESTAMP column.
package mysql
