// Package outcomes holds the kit's one vocabulary of outcome names: the
// value of the opledger.outcome attribute of every metric and span, and
// of the outcome field of every log event, whichever package records it
// (ledger, txmiddleware, keyed and the transports). One outcome has one
// name everywhere; package keyed's table (keyed.Outcomes) names its rows
// with these constants.
package outcomes

// The outcomes of a keyed run, shared by the runner (txmiddleware) and
// the keyed call's classification (keyed).
const (
	Executed      = "executed"                // the work ran and its result, or its final error, committed
	Replayed      = "replayed"                // an earlier call's result was replayed
	KeyReused     = "idempotency-key-reused"  // ledger.ErrKeyReused
	InProgress    = "operation-in-progress"   // ledger.ErrInProgress
	Incomplete    = "operation-incomplete"    // ledger.ErrIncomplete
	KeyExpired    = "idempotency-key-expired" // ledger.ErrKeyExpired
	Busy          = "storage-busy"            // txmiddleware.ErrBusy
	CommitUnknown = "commit-outcome-unknown"  // txmiddleware.ErrCommitUnknown
	TxAborted     = "transaction-aborted"     // transient failures outlasted the attempts
	RequestEnded  = "request-ended"           // the context ended before COMMIT was sent
	// Failed is any other error, for the ledger and the runner, which
	// cannot tell them apart (error.type says which).
	Failed = "failed"
)

// The ledger's own outcomes: what a claim or a record found, beside
// Replayed, KeyReused, InProgress, Incomplete and Failed.
const (
	Acquired  = "acquired"           // the claim acquired a new entry
	TakenOver = "taken-over-expired" // the claim took over an entry past its retention
	Recorded  = "recorded"           // Record inserted the completed entry
	Retryable = "retryable"          // an error matching ledger.ErrRetryable
)

// ErrorTypeFinal is the error.type of a run whose work's final error was
// recorded: outcome Executed, its answer the error.
const ErrorTypeFinal = "final_error"
