package dialects

import (
	"context"
	"database/sql"
)

// PoolingChecker is implemented by a dialect that can tell whether the
// driver behind a pool is configured for the connection pooler in front
// of its database: PostgreSQL's drivers prepare statements on a server
// connection, which a pooler in transaction mode (PgBouncer
// pool_mode=transaction) hands to another client between transactions.
//
// It is optional: check for it with a type assertion. The conformance
// suite runs it before its cases, so that a misconfigured driver fails
// with one clear message instead of random errors in the cases.
type PoolingChecker interface {
	// CheckPooling runs a short probe on db (concurrent statements, in
	// and outside transactions, on at most a few connections) and returns
	// nil when the driver works over whatever lies between it and the
	// database, or an error that explains the setting it lacks.
	CheckPooling(ctx context.Context, db *sql.DB) error
}
