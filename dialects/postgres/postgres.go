// Package postgres is the ledger dialect for PostgreSQL, and for the
// databases that speak its SQL (CockroachDB, YugabyteDB).
//
// It works with any database/sql driver whose errors expose
// SQLState() string: lib/pq (v1.10.6 and later) and pgx's stdlib driver.
// It imports no driver.
//
// The claim is INSERT … ON CONFLICT (id) DO NOTHING followed, on conflict,
// by a plain SELECT. The insert waits on an uncommitted duplicate; under
// READ COMMITTED the following SELECT sees the winner's committed row,
// while under REPEATABLE READ and SERIALIZABLE PostgreSQL raises 40001,
// which is classified as a serialization failure (retry the transaction).
// A single statement (a CTE) is deliberately not used: it runs on one
// snapshot and returns no row when it had to wait. ON CONFLICT never
// raises 23505 for the claim, so the caller's transaction is never
// poisoned. The replay path takes no row lock and writes nothing.
//
// Behind a connection pooler in transaction mode (PgBouncer
// pool_mode=transaction) the ledger works as long as the driver does not
// keep prepared statements between transactions: pgx needs
// default_query_exec_mode=exec in its DSN, lib/pq binary_parameters=yes.
// [Dialect.CheckPooling] probes for it, the errors a misconfigured driver
// gets match [ErrStatementPooling], and the migrations' session lock
// refuses the pooler with [ErrTransactionPooling]: run them over a direct
// connection. The repository's docs/poolers.md has the details.
package postgres

import (
	"errors"
	"strconv"
	"strings"

	"github.com/opledger/opledger/dialects"
)

// Dialect is the PostgreSQL dialect. The zero value is ready to use.
type Dialect struct{}

var _ dialects.Dialect = Dialect{}

// New returns the PostgreSQL dialect.
func New() Dialect { return Dialect{} }

// Name returns "postgres".
func (Dialect) Name() string { return "postgres" }

// Placeholder returns "$n".
func (Dialect) Placeholder(n int) string { return "$" + strconv.Itoa(n) }

// QuoteIdent quotes name with double quotes.
func (Dialect) QuoteIdent(name string) string {
	return `"` + strings.ReplaceAll(name, `"`, `""`) + `"`
}

const columns = `request_fp, code, response, response_type, created_at, completed_at, expires_at`

// Queries returns the ledger's SQL for table.
func (d Dialect) Queries(table string) dialects.Queries {
	t := d.QuoteIdent(table)
	return dialects.Queries{
		Insert: `INSERT INTO ` + t + ` (id, caller, method, request_fp, created_at, expires_at) ` +
			`VALUES ($1, $2, $3, $4, $5, $6) ON CONFLICT (id) DO NOTHING`,
		Select: `SELECT ` + columns + ` FROM ` + t + ` WHERE id = $1`,
		Reacquire: `UPDATE ` + t + ` SET request_fp = $1, created_at = $2, expires_at = $3, ` +
			`code = NULL, response = NULL, response_type = NULL, completed_at = NULL ` +
			`WHERE id = $4 AND expires_at <= $5`,
		Complete: `UPDATE ` + t + ` SET code = $1, response = $2, response_type = $3, completed_at = $4 ` +
			`WHERE id = $5 AND completed_at IS NULL`,
		Lookup: `SELECT ` + columns + ` FROM ` + t + ` WHERE id = $1`,
		// SKIP LOCKED: never wait on (or delete) a row another transaction
		// is re-acquiring; it is picked up by a later sweep if still expired.
		Sweep: `DELETE FROM ` + t + ` WHERE id IN (SELECT id FROM ` + t +
			` WHERE expires_at <= $1 LIMIT $2 FOR UPDATE SKIP LOCKED)`,
	}
}

type sqlStater interface{ SQLState() string }

// Classify maps SQLSTATE codes: 23505 unique violation; 40001
// serialization failure; 40P01 deadlock; 55P03 lock timeout and 57014
// statement timeout or cancel; class 08 and 57P01–57P03 connection
// failures, as well as broken connections reported by the drivers
// (driver.ErrBadConn from lib/pq, "conn closed" from pgx, network errors).
func (Dialect) Classify(err error) dialects.Class {
	if err == nil {
		return dialects.ClassOther
	}
	var s sqlStater
	if errors.As(err, &s) {
		return classifyState(s.SQLState())
	}
	if c := dialects.ClassifyConnection(err); c != dialects.ClassOther {
		return c
	}
	// pgx reports a statement on a connection that broke under it (for
	// example during COMMIT) as an unexported error reading "conn closed".
	if strings.Contains(err.Error(), "conn closed") {
		return dialects.ClassConnection
	}
	return dialects.ClassOther
}

func classifyState(code string) dialects.Class {
	switch {
	case code == "23505":
		return dialects.ClassUniqueViolation
	case code == "40001":
		return dialects.ClassSerialization
	case code == "40P01":
		return dialects.ClassDeadlock
	case code == "55P03" || code == "57014":
		return dialects.ClassLockTimeout
	case strings.HasPrefix(code, "08") || code == "57P01" || code == "57P02" || code == "57P03":
		return dialects.ClassConnection
	}
	return dialects.ClassOther
}
