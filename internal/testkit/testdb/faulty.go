package testdb

import (
	"context"
	"database/sql"

	"github.com/opledger/opledger/ledger"
)

// FaultyLedger wraps the real Store and makes Claim or Complete fail with
// a chosen error, so that every ledger outcome can be produced through a
// real server.
type FaultyLedger struct {
	*ledger.Store
	ClaimErr, CompleteErr error
}

// Claim returns ClaimErr when it is set, else the Store's claim.
func (l FaultyLedger) Claim(ctx context.Context, tx *sql.Tx, req ledger.ClaimRequest) (*ledger.Claim, error) {
	if l.ClaimErr != nil {
		return nil, l.ClaimErr
	}
	return l.Store.Claim(ctx, tx, req)
}

// Complete returns CompleteErr when it is set, else the Store's.
func (l FaultyLedger) Complete(ctx context.Context, tx *sql.Tx, c *ledger.Claim, r ledger.Result) error {
	if l.CompleteErr != nil {
		return l.CompleteErr
	}
	return l.Store.Complete(ctx, tx, c, r)
}
