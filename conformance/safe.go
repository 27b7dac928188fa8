package conformance

import (
	"context"
	"database/sql"
	"errors"
	"fmt"

	"github.com/opledger/opledger/dialects"
	"github.com/opledger/opledger/ledger"
)

// safeLedger wraps the ledger under test so that a panic in it, on any
// goroutine, becomes an error the case reports instead of a crash.
type safeLedger struct{ l ledger.Ledger }

func recovered(op string, err *error) {
	if p := recover(); p != nil {
		*err = fmt.Errorf("%s panicked: %v", op, p)
	}
}

func (s safeLedger) Claim(ctx context.Context, tx *sql.Tx, req ledger.ClaimRequest) (c *ledger.Claim, err error) {
	defer recovered("Claim", &err)
	return s.l.Claim(ctx, tx, req)
}

func (s safeLedger) Complete(ctx context.Context, tx *sql.Tx, c *ledger.Claim, r ledger.Result) (err error) {
	defer recovered("Complete", &err)
	return s.l.Complete(ctx, tx, c, r)
}

// errNoRecorder is what a claim-at-commit case gets from a ledger
// without Record.
var errNoRecorder = errors.New("the ledger does not implement ledger.Recorder (Record), which a claim-at-commit target needs")

func (s safeLedger) Record(ctx context.Context, tx *sql.Tx, req ledger.ClaimRequest, r ledger.Result) (c *ledger.Claim, err error) {
	defer recovered("Record", &err)
	rec, ok := s.l.(ledger.Recorder)
	if !ok {
		return nil, errNoRecorder
	}
	c, err = rec.Record(ctx, tx, req, r)
	if err == nil && c == nil {
		err = errors.New("Record returned neither a claim nor an error")
	}
	return c, err
}

func (s safeLedger) Lookup(ctx context.Context, q ledger.Querier, id ledger.Identity) (en *ledger.Entry, err error) {
	defer recovered("Lookup", &err)
	en, err = s.l.Lookup(ctx, q, id)
	if err == nil && en == nil {
		err = fmt.Errorf("Lookup returned neither an entry nor an error")
	}
	return en, err
}

// Dialect returns the wrapped ledger's dialect, or nil if it panics.
func (s safeLedger) Dialect() (d dialects.Dialect) {
	defer func() {
		if recover() != nil {
			d = nil
		}
	}()
	return s.l.Dialect()
}

// sweeper returns the wrapped ledger's Sweep, if it has one.
func (s safeLedger) sweeper() (Sweeper, bool) {
	sw, ok := s.l.(Sweeper)
	if !ok {
		return nil, false
	}
	return safeSweeper{sw}, true
}

type safeSweeper struct{ s Sweeper }

func (s safeSweeper) Sweep(ctx context.Context, db ledger.Execer, batch int) (n int64, err error) {
	defer recovered("Sweep", &err)
	return s.s.Sweep(ctx, db, batch)
}
