package postgres

import (
	"context"
	"database/sql"

	"github.com/opledger/opledger/dialects"
	"github.com/opledger/opledger/internal/pgdialect"
)

// New returns the PostgreSQL dialect. It is a stateless value, safe for
// concurrent use.
func New() dialects.Dialect { return pgdialect.New() }

// CheckPooling runs concurrent parameterised statements on db, half of
// them with a text shared by every worker and half with a text of each
// worker's own, each checked for its own answer, outside transactions and
// inside them. A driver that prepares statements (pgx's default statement
// cache, lib/pq's Parse/Describe round trip before the Bind) behind a
// pooler in transaction mode fails this within a few statements, with an
// error or with another statement's answer; it returns an error matching
// [ErrStatementPooling] then, wrapping the first error seen. It is a
// probe, not a proof: a db limited to one connection (SetMaxOpenConns(1))
// cannot show two clients colliding, and passes it.
func CheckPooling(ctx context.Context, db *sql.DB) error {
	return pgdialect.New().CheckPooling(ctx, db)
}

// ExplainPooling returns err wrapped with [ErrStatementPooling] when it is
// an error a transaction pooler gives a driver that prepares statements
// (SQLSTATE 26000, "prepared statement … does not exist"; 42P05,
// "prepared statement … already exists"; 08P01, a Bind that reached a
// statement of another parameter count), and err itself otherwise. The
// kit's own statements are explained this way already; call it for an
// error of your own code.
func ExplainPooling(err error) error { return pgdialect.ExplainPooling(err) }

var (
	// ErrStatementPooling is matched (errors.Is) by the error of
	// [CheckPooling], of [ExplainPooling], and of every statement of the
	// kit, when the driver's prepared statements do not survive between
	// transactions: a pooler in transaction mode (PgBouncer
	// pool_mode=transaction, before 1.21 or without
	// max_prepared_statements) sits between the driver and PostgreSQL.
	// The fix is a driver setting in the DSN: pgx
	// default_query_exec_mode=exec (or simple_protocol), lib/pq
	// binary_parameters=yes. See docs/poolers.md.
	ErrStatementPooling = pgdialect.ErrStatementPooling

	// ErrTransactionPooling is matched (errors.Is) by the error of the
	// migrations' lock when the session that took it is not the one the
	// next statement runs on: a pooler in transaction mode hands the
	// server connection to another client after each transaction, so a
	// session-level advisory lock protects nothing. Run migrations over a
	// direct connection to PostgreSQL (or a session-mode pool).
	ErrTransactionPooling = pgdialect.ErrTransactionPooling
)
