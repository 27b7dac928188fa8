package dialects

import (
	"fmt"
)

// Dialect is implemented by each database family the ledger supports.
// Implementations are stateless values and safe for concurrent use.
type Dialect interface {
	// Name is the dialect's short name ("postgres", "sqlite", "mysql"),
	// for reports and error messages only.
	Name() string
	// QuoteIdent quotes a validated identifier (a letter or underscore,
	// then letters, digits or underscores, at most 48 bytes).
	QuoteIdent(name string) string
	// Placeholder returns the SQL text of the n-th bind parameter of a
	// statement, counting from 1: "$1" for PostgreSQL, "?" for MySQL and
	// SQLite.
	Placeholder(n int) string
	// Queries returns the ledger's SQL for the given (already validated,
	// unquoted) table name.
	Queries(table string) Queries
	// Classify reports what kind of failure err is. It looks through
	// wrapped errors and returns [ClassOther] for anything it does not know,
	// including nil.
	Classify(err error) Class
}

// Queries holds the SQL text of every statement the ledger runs. The
// ledger passes arguments in the order documented on each field; the
// dialect chooses placeholder syntax and any locking clauses.
type Queries struct {
	// Insert claims an identity. Args: id, caller, method, request_fp,
	// created_at, expires_at, born_at (the key's birth in Unix
	// microseconds, 0 when unknown: a column of its own, which a
	// partitioned table is partitioned by). A conflict on id must either affect zero rows
	// (ON CONFLICT DO NOTHING) or fail with an error classified as
	// [ClassUniqueViolation] that leaves the transaction usable.
	Insert string
	// Claim, when not empty, is what a ledger built with
	// ledger.WithOneStatementClaim claims with instead of Insert (a
	// ledger claims with Insert otherwise): one statement that claims
	// the identity like Insert and, on a conflict, also returns the
	// existing entry when the statement's snapshot shows it, so that a
	// replay costs one statement. Args as for Insert. It returns exactly
	// one row: whether it inserted (a boolean, or an integer 0 or 1), then
	// Select's columns, all NULL when it inserted or when it did not see
	// the existing entry (it waited for a concurrent claimant that then
	// committed, or the entry was not visible to its snapshot): the
	// ledger then reads the entry with Select, as after Insert. A conflict
	// must not fail the statement.
	Claim string
	// Select reads one entry back after a conflict, inside the claiming
	// transaction. Arg: id. Columns: request_fp, code, response,
	// response_type, created_at, completed_at, expires_at. It must see the
	// row that the conflicting transaction committed (a locking read where
	// the database's snapshot would otherwise hide it).
	Select string
	// TakeOver takes over an expired entry atomically: the claimant
	// acquires it as if new. Args: request_fp, created_at, expires_at, id,
	// now. It must only match when the stored expires_at <= now, and must
	// clear any stored result.
	TakeOver string
	// Complete stores the result of an acquired entry. Args: code,
	// response, response_type, completed_at, id. It must only match a row
	// whose completed_at IS NULL.
	Complete string
	// Lookup reads committed state without locking. Arg: id. Columns as
	// for Select.
	Lookup string
	// Sweep deletes at most a batch of expired entries. Args: now, batch.
	Sweep string
	// CountExpired, optional, counts the expired entries. Arg: now. The
	// ledger's Sweep runs it after sweeping to report the entries it
	// left because other transactions held them (ledger.HeldError).
	CountExpired string
	// SweepScan and SweepOne, optional (both or neither), let a sweep
	// whose Sweep statement timed out on a lock go on entry by entry,
	// skipping the ones other transactions hold: SweepScan lists expired
	// ids without locking, oldest first (Args: now, limit), SweepOne
	// deletes one of them if it is still expired (Args: id, now). A dialect
	// whose Sweep never waits on a row (PostgreSQL's SKIP LOCKED), or
	// whose locks are not per row (SQLite), has no need of them.
	SweepScan string
	SweepOne  string
}

// Class is the kind of a database failure, as far as the ledger cares.
type Class int

// The classes of failure a dialect distinguishes.
const (
	// ClassOther is any error the dialect does not recognise.
	ClassOther Class = iota
	// ClassUniqueViolation is a duplicate key on a unique constraint or
	// primary key (PostgreSQL 23505, MySQL 1062, SQLite 2067 and 1555).
	ClassUniqueViolation
	// ClassSerialization means the transaction's snapshot cannot see a
	// conflicting commit (PostgreSQL 40001, SQLite BUSY_SNAPSHOT 517).
	// Retry the whole transaction.
	ClassSerialization
	// ClassDeadlock is a detected deadlock (PostgreSQL 40P01, MySQL 1213).
	// Retry the whole transaction.
	ClassDeadlock
	// ClassLockTimeout means a wait bound passed while another transaction
	// held a lock (PostgreSQL 55P03 and 57014, MySQL 1205, SQLite BUSY 5).
	ClassLockTimeout
	// ClassConnection means the connection broke or the server went away
	// (PostgreSQL class 08 and 57P01–57P03, driver.ErrBadConn, network
	// errors). Whether a COMMIT took effect is then unknown.
	ClassConnection
)

var classNames = [...]string{"other", "unique violation", "serialization failure", "deadlock", "lock timeout", "connection failure"}

// String returns a short lower-case description of c.
func (c Class) String() string {
	if c < 0 || int(c) >= len(classNames) {
		return fmt.Sprintf("class(%d)", int(c))
	}
	return classNames[c]
}

// Retryable reports whether a transaction that failed with this class
// should be retried as a whole: serialization failures and deadlocks.
func (c Class) Retryable() bool {
	return c == ClassSerialization || c == ClassDeadlock
}
