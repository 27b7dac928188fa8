package ledger

import (
	"errors"

	"github.com/opledger/opledger/dialects"
	"github.com/opledger/opledger/internal/dialectkit"
)

// Sentinel errors. Every error the ledger returns can be matched with
// errors.Is against one of these (or against context errors and
// sql.ErrTxDone, which it wraps unchanged).
var (
	// ErrInvalid marks bad input: an identity part, a result over the size
	// limit, a nil transaction, a bad table name. Nothing was written.
	ErrInvalid = errors.New("ledger: invalid input")

	// ErrInvalidConfig marks a bad option or constructor argument (New,
	// pgxledger.New, a sweep's batch): the configuration error every package
	// of the kit names ErrInvalidConfig. Such an error matches ErrInvalid
	// too.
	ErrInvalidConfig = errors.New("ledger: invalid configuration")

	// ErrKeyReused means the identity exists with a different request
	// fingerprint: the caller reused a key for another request. It is a
	// caller error (gRPC FAILED_PRECONDITION), never a replay.
	ErrKeyReused = errors.New("ledger: idempotency key reused with a different request")

	// ErrInProgress means another open transaction holds the identity and
	// the wait bound (the transaction's lock timeout, the SQLite busy
	// timeout) passed. Try again later (gRPC ABORTED).
	ErrInProgress = errors.New("ledger: operation in progress in another transaction")

	// ErrIncomplete means an entry was committed without Complete: the
	// operation's outcome is unknown. It stays so until it expires.
	ErrIncomplete = errors.New("ledger: operation was committed without a result")

	// ErrKeyExpired means the key was born before the ledger's window (its
	// retention minus the allowed clock skew: see WithRetention and
	// WithClockSkew): the ledger no longer remembers it, so whether an
	// operation with it ran is not known here. Claim and Record refuse it
	// before writing anything (or, when the window ended while their
	// insert ran, right after it: roll the transaction back), and Lookup
	// answers it instead of ErrNotFound, which would tell the caller that
	// running the call again is safe. Do not run the call again with this
	// key. Only a key whose birth is known (Identity.Birth) can be refused
	// so; a key without one is remembered for the retention from its
	// claim.
	ErrKeyExpired = errors.New("ledger: idempotency key expired: born before the ledger's window")

	// ErrRetryable means the database aborted the transaction for a reason
	// that a retry of the whole transaction may resolve: a serialization
	// failure, a deadlock, or an entry that changed under the claim
	// repeatedly. Roll back and run the unit again.
	ErrRetryable = errors.New("ledger: transaction must be retried")

	// ErrNotAcquired means Complete was called with a claim that is not an
	// acquisition by this transaction, or that was already completed.
	ErrNotAcquired = errors.New("ledger: claim was not acquired by this transaction")

	// ErrNotFound means Lookup found no live entry for the identity:
	// nothing was committed, or the entry expired.
	ErrNotFound = errors.New("ledger: no entry for this identity")
)

// inputError describes bad input. It matches [ErrInvalid], and with Field
// "option" also [ErrInvalidConfig]; internal/txledger's InputError reads
// its field and reason for the kit's transports.
type inputError struct {
	// Field names the offending input: "caller", "method", "key",
	// "first sent", "fingerprint", "result", "tx", "table", "option",
	// "name", "lock wait".
	Field string
	// Reason says what is wrong, never echoing a key.
	Reason string
	// Err is the underlying error, if any (dialectkit.ErrBadTableName).
	Err error
}

// Error names the field and the reason.
func (e *inputError) Error() string { return "ledger: invalid " + e.Field + ": " + e.Reason }

// Unwrap returns [ErrInvalid], [ErrInvalidConfig] for Field "option", and
// the underlying error, if any.
func (e *inputError) Unwrap() []error {
	errs := []error{ErrInvalid}
	if e.Field == "option" {
		errs = append(errs, ErrInvalidConfig)
	}
	if e.Err != nil {
		errs = append(errs, e.Err)
	}
	return errs
}

func invalid(field, reason string) error { return &inputError{Field: field, Reason: reason} }

// DBError is a database failure during a ledger operation. It keeps the
// driver's error (reachable with errors.As) and its classification, and
// matches [ErrRetryable] for serialization failures and deadlocks and
// [ErrInProgress] for lock and busy timeouts.
type DBError struct {
	// Op is the ledger operation: "claim", "complete", "record", "lookup",
	// "sweep", "commit".
	Op string
	// Class is the dialect's classification of Err.
	Class dialects.Class
	// Err is the driver's error, wrapped in the dialect's explanation when
	// it has one (dialectkit.ErrorExplainer: PostgreSQL's
	// postgres.ErrStatementPooling for a driver misconfigured behind a
	// transaction pooler); errors.As reaches the driver's error either way.
	Err error
}

// newDBError is the *DBError of op's failure err on a database of
// dialect d: err classified by d and wrapped in d's explanation, when it
// has one (dialectkit.Explain). Every DBError of the kit is made by it (the
// ledger's statements, txmiddleware's and package pgxledger's COMMIT,
// through internal/txledger's NewDBError), so none misses the
// explanation. A nil d classifies nothing (ClassOther) and explains
// nothing.
func newDBError(d dialects.Dialect, op string, err error) *DBError {
	if d == nil {
		return &DBError{Op: op, Class: dialects.ClassOther, Err: err}
	}
	return &DBError{Op: op, Class: d.Classify(err), Err: dialectkit.Explain(d, err)}
}

// Error names the operation, the class and the driver's message.
func (e *DBError) Error() string {
	if e.Class == dialects.ClassOther {
		return "ledger: " + e.Op + ": " + e.Err.Error()
	}
	return "ledger: " + e.Op + ": " + e.Class.String() + ": " + e.Err.Error()
}

// Unwrap returns the driver's error.
func (e *DBError) Unwrap() error { return e.Err }

// Is reports whether the failure matches ErrRetryable or ErrInProgress.
func (e *DBError) Is(target error) bool {
	switch target {
	case ErrRetryable:
		return e.Class.Retryable()
	case ErrInProgress:
		return e.Class == dialects.ClassLockTimeout
	}
	return false
}
