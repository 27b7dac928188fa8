package dialectkit

import (
	"context"
	"database/sql"
)

// TxChecker is implemented by dialects whose database can run a
// transaction in a mode in which the ledger's claim is not safe: TiDB's
// optimistic transactions (and pessimistic ones with lazy unique checks)
// check the unique key only at COMMIT, so a claim on a key that another
// transaction holds or has committed would "acquire" it.
//
// The ledger calls CheckTx in Claim before its insert and, in Sweep, in
// each batch's transaction before the delete: for such a dialect Sweep
// runs each batch in an explicit transaction, never as an autocommit
// statement (which TiDB runs optimistically). It is optional: check for it
// with a type assertion. Implementations are stateless and safe for
// concurrent use.
type TxChecker interface {
	// CheckTx returns nil when tx can hold a claim, an error matching
	// [dialects.ErrUnsuitableTx] whose message names the fix when it cannot, or
	// the database's error when it could not tell.
	CheckTx(ctx context.Context, tx *sql.Tx) error
}
