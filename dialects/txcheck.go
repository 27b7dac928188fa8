package dialects

import "errors"

// ErrUnsuitableTx is matched by the error of a dialect that checks transactions (the TiDB
// dialect) for a transaction in
// which a claim would not be safe. It is a configuration error, not a
// failure of the database: retrying the same transaction gets it again.
// The error's message names the setting to change.
var ErrUnsuitableTx = errors.New("transaction unsuitable for the ledger")
