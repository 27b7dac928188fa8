package dialectkit

import (
	"context"
	"database/sql"

	"github.com/opledger/opledger/dialects"
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

// ErrorExplainer is implemented by a dialect that can say what a driver's
// error means for the user's setup: the ledger and txmiddleware pass every
// database error through it before wrapping it in a ledger.DBError, so
// that, for example, PostgreSQL's "prepared statement … does not exist"
// behind a transaction pooler reads as the driver setting it lacks.
//
// It is optional: check for it with a type assertion. ExplainError returns
// err itself, or an error that wraps it (errors.Is and errors.As still
// reach the driver's error), never nil for a non-nil err.
type ErrorExplainer interface {
	ExplainError(err error) error
}

// Explain returns d's explanation of err (ErrorExplainer), or err itself
// when d has none.
func Explain(d dialects.Dialect, err error) error {
	if ex, ok := d.(ErrorExplainer); ok && err != nil {
		if e := ex.ExplainError(err); e != nil {
			return e
		}
	}
	return err
}
