// Package ledgerkit holds what package ledger shares with the kit's other
// packages without exporting it to users: the seams of a transaction API
// ([Row], [Driver], [Pipeline], [SQLDriver]), the limits the ledger
// enforces on an identity and a result, and the hook ([Ledger]) through
// which package ledger hands its store, generic over the transaction API,
// to internal/txledger. It imports nothing of the kit, so that package
// ledger can import it.
package ledgerkit

import (
	"context"
	"database/sql"
)

// Limits on the parts of an identity and of a result.
const (
	// MaxCallerLen is the longest caller fingerprint accepted, in bytes.
	MaxCallerLen = 512
	// MaxMethodLen is the longest method (a full gRPC method name or an
	// HTTP route) accepted, in bytes.
	MaxMethodLen = 512
	// MaxKeyLen is the longest idempotency key accepted, in bytes.
	MaxKeyLen = 255
	// MaxNameLen is the longest step or message name accepted by
	// ledger.Identity's DerivedKey and Derive, in bytes.
	MaxNameLen = 512
	// MaxTypeNameLen is the longest Result.TypeName accepted, in bytes.
	MaxTypeNameLen = 512
	// MaxCode is the largest Result.Code accepted: every dialect stores
	// the code in a signed 32-bit column. gRPC codes are 0 to 16.
	MaxCode = 1<<31 - 1
	// DefaultMaxResultSize is the longest Result.Response a ledger.Store
	// accepts by default (ledger.WithMaxResultSize), in bytes.
	DefaultMaxResultSize = 1 << 20
	// DerivedKeyPrefix starts every key ledger.Identity's DerivedKey
	// returns, so that an operator can tell a derived key from a caller's.
	DerivedKeyPrefix = "dk1-"
)

// Row is one row a statement returned, read with Scan: *sql.Row and
// pgx.Row both are. Scan returns an error matching sql.ErrNoRows when the
// statement returned no row (pgx.ErrNoRows matches it).
type Row interface {
	Scan(dest ...any) error
}

// Driver runs the ledger's statements in a transaction of type TX. It is
// the seam that lets one ledger serve more than one transaction API:
// [SQLDriver] for database/sql's *sql.Tx, package pgxledger's for pgx.Tx.
// It takes the transaction as an argument, so that a statement costs no
// allocation of its own, and it never begins, commits or rolls back: the
// caller's transaction is the one the ledger writes in. Implementations
// are stateless and safe for concurrent use.
type Driver[TX any] interface {
	// Exec runs query with args in tx and returns how many rows it
	// affected.
	Exec(ctx context.Context, tx TX, query string, args ...any) (int64, error)
	// QueryRow runs query with args in tx and returns its first row.
	QueryRow(ctx context.Context, tx TX, query string, args ...any) Row
}

// SQLDriver is the [Driver] of database/sql: the statements run with
// (*sql.Tx).ExecContext and QueryRowContext.
type SQLDriver struct{}

var _ Driver[*sql.Tx] = SQLDriver{}

// Exec runs query in tx and returns the rows it affected.
func (SQLDriver) Exec(ctx context.Context, tx *sql.Tx, query string, args ...any) (int64, error) {
	res, err := tx.ExecContext(ctx, query, args...)
	if err != nil {
		return 0, err
	}
	return res.RowsAffected()
}

// QueryRow runs query in tx.
func (SQLDriver) QueryRow(ctx context.Context, tx *sql.Tx, query string, args ...any) Row {
	return tx.QueryRowContext(ctx, query, args...)
}

// Pipeline is how a transaction API sends the ledger's statements in one
// round trip with the BEGIN before them, or the COMMIT or ROLLBACK after
// them: what the pipelined forms of internal/txledger's Store (BeginClaim,
// CompleteCommit, RecordCommit) run on (package pgxledger's, on pgx
// batches). A Pipeline value is bound to what it begins transactions on (a
// pool, with the transaction's options). Its methods are not called
// concurrently for one transaction.
type Pipeline[TX any] interface {
	// Begin begins a transaction.
	Begin(ctx context.Context) (TX, error)
	// BeginExec begins a transaction and runs query in it, in one round
	// trip, and returns the transaction and the rows query affected. When
	// BEGIN or query fails, nothing is left open: the transaction (if it
	// began) has been rolled back.
	BeginExec(ctx context.Context, query string, args ...any) (TX, int64, error)
	// ExecCommit runs query in tx and then COMMIT, in one round trip.
	// execErr is query's failure: nothing was committed and tx is still
	// open, for [Pipeline.Rollback] or [Pipeline.RollbackQuery]. Otherwise
	// tx has ended, and commitErr is COMMIT's failure as the API reports it
	// (it says whether the outcome is known: the ledger passes it on,
	// through the dialect's explanation, which keeps what it matches).
	ExecCommit(ctx context.Context, tx TX, query string, args ...any) (execErr, commitErr error)
	// QueryRollback runs query in tx and then ROLLBACK, in one round trip,
	// and returns query's row; tx has ended.
	QueryRollback(ctx context.Context, tx TX, query string, args ...any) Row
	// RollbackQuery rolls tx back and then runs query outside any
	// transaction, in one round trip, and returns query's row; tx has
	// ended.
	RollbackQuery(ctx context.Context, tx TX, query string, args ...any) Row
	// Owns reports whether tx is a transaction that ExecCommit,
	// QueryRollback and RollbackQuery can end (one Begin or BeginExec
	// returned). For any other, the ledger runs its statement, then
	// Commit or Rollback.
	Owns(tx TX) bool
	// Commit commits tx, reporting a failure as ExecCommit does.
	Commit(ctx context.Context, tx TX) error
	// Rollback rolls tx back.
	Rollback(ctx context.Context, tx TX) error
	// Exec runs query outside any transaction and returns the rows it
	// affected.
	Exec(ctx context.Context, query string, args ...any) (int64, error)
}

// Ledger is set by package ledger when it is initialised: the value whose
// methods internal/txledger calls to build a store over any transaction
// API and the claims of one (see txledger's hooks). It is untyped because
// this package cannot name package ledger's types.
var Ledger any
