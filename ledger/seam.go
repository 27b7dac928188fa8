package ledger

import (
	"errors"
	"time"

	"github.com/opledger/opledger/dialects"
	"github.com/opledger/opledger/internal/ledgerkit"
)

// The ledger hands what the kit's other transaction APIs need, and no user
// calls, to internal/txledger through ledgerkit.Ledger: that package
// cannot be imported here (it imports this one), and names these methods
// in an interface of its own.
func init() { ledgerkit.Ledger = seam{} }

// seam is the value of ledgerkit.Ledger.
type seam struct{}

// NewStore returns the ledger's store over transactions of any type, whose
// statements run through drv: a *txStore[any].
func (seam) NewStore(d dialects.Dialect, drv ledgerkit.Driver[any], opts []Option) (any, error) {
	s, err := newTxStore[any](d, drv, opts...)
	if err != nil {
		return nil, err
	}
	return s, nil
}

// Acquired is newAcquiredIn.
func (seam) Acquired(id Identity, tx any) *Claim { return newAcquiredIn(id, tx) }

// Recorded is newRecordedIn.
func (seam) Recorded(id Identity, tx any) *Claim { return newRecordedIn(id, tx) }

// ClaimTx returns the transaction that acquired or recorded c, nil for
// none.
func (seam) ClaimTx(c *Claim) any {
	if c == nil {
		return nil
	}
	return c.tx
}

// DBError is newDBError.
func (seam) DBError(d dialects.Dialect, op string, err error) *DBError {
	return newDBError(d, op, err)
}

// CheckMethod is checkMethod.
func (seam) CheckMethod(method string) error { return checkMethod(method) }

// TookOver reports whether c acquired an entry past its retention.
func (seam) TookOver(c *Claim) bool { return c != nil && c.tookOver }

// KeyHash returns the SHA-256 of id's key.
func (seam) KeyHash(id Identity) [32]byte { return id.keyHash }

// InputError returns the field and the reason of err's invalid input,
// when err is one.
func (seam) InputError(err error) (field, reason string, ok bool) {
	var ie *inputError
	if !errors.As(err, &ie) {
		return "", "", false
	}
	return ie.Field, ie.Reason, true
}

// BoundsLockWait is s.boundsLockWait.
func (seam) BoundsLockWait(s *Store) bool { return s.boundsLockWait() }

// Window is s's retention and clock skew.
func (seam) Window(s *Store) (retention, skew time.Duration) { return s.core.retention, s.core.skew }

// MaxResultSize is s.maxResultSize.
func (seam) MaxResultSize(s *Store) int { return s.maxResultSize() }
