package conformance

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/opledger/opledger/dialects"
	"github.com/opledger/opledger/ledger"
)

// safeLedger wraps the ledger under test so that a panic in it, on any
// goroutine, becomes an error the case reports instead of a crash.
type safeLedger struct{ l suiteLedger }

func recovered(op string, err *error) {
	if p := recover(); p != nil {
		*err = fmt.Errorf("%s panicked: %v", op, p)
	}
}

func (s safeLedger) Claim(ctx context.Context, tx unitTx, req ledger.ClaimRequest) (c *ledger.Claim, err error) {
	defer recovered("Claim", &err)
	return s.l.Claim(ctx, tx, req)
}

func (s safeLedger) Complete(ctx context.Context, tx unitTx, c *ledger.Claim, r ledger.Result) (err error) {
	defer recovered("Complete", &err)
	return s.l.Complete(ctx, tx, c, r)
}

func (s safeLedger) Record(ctx context.Context, tx unitTx, req ledger.ClaimRequest, r ledger.Result) (c *ledger.Claim, err error) {
	defer recovered("Record", &err)
	c, err = s.l.Record(ctx, tx, req, r)
	if err == nil && c == nil {
		err = errors.New("Record returned neither a claim nor an error")
	}
	return c, err
}

// Lookup reads committed state for id.
func (s safeLedger) Lookup(ctx context.Context, id ledger.Identity) (en *ledger.Entry, err error) {
	defer recovered("Lookup", &err)
	en, err = s.l.Lookup(ctx, id)
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

// recorder reports whether the wrapped ledger records (claim at commit).
func (s safeLedger) recorder() bool { return s.l.Recorder() }

// boundsLockWait reports whether the wrapped ledger honours
// ClaimRequest.LockWait.
func (s safeLedger) boundsLockWait() bool { return s.l.BoundsLockWait() }

// window returns the wrapped ledger's retention and clock skew, and
// whether it states them.
func (s safeLedger) window() (retention, skew time.Duration, ok bool) {
	defer func() {
		if recover() != nil {
			retention, skew, ok = 0, 0, false
		}
	}()
	return s.l.Window()
}

// sweeper returns the wrapped ledger's Sweep, if it has one.
func (s safeLedger) sweeper() (func(ctx context.Context, batch int) (int64, error), bool) {
	sw := s.l.Sweeper()
	if sw == nil {
		return nil, false
	}
	return func(ctx context.Context, batch int) (n int64, err error) {
		defer recovered("Sweep", &err)
		return sw(ctx, batch)
	}, true
}

// pipeline returns the wrapped ledger's pipelined forms, if it has them.
func (s safeLedger) pipeline() (safePipeline, bool) {
	p := s.l.Pipeline()
	return safePipeline{p}, p != nil
}

// safePipeline is a ledger's pipelined forms, panics turned into errors.
type safePipeline struct{ p suitePipeline }

func (s safePipeline) BeginClaim(ctx context.Context, level sql.IsolationLevel, req ledger.ClaimRequest) (tx unitTx, c *ledger.Claim, err error) {
	defer recovered("BeginClaim", &err)
	tx, c, err = s.p.BeginClaim(ctx, level, req)
	if err == nil && c == nil {
		err = errNoClaim
	}
	return tx, c, err
}

func (s safePipeline) BeginAt(ctx context.Context, level sql.IsolationLevel) (tx unitTx, err error) {
	defer recovered("BeginAt", &err)
	return s.p.BeginAt(ctx, level)
}

func (s safePipeline) CompleteCommit(ctx context.Context, tx unitTx, c *ledger.Claim, r ledger.Result) (err error) {
	defer recovered("CompleteCommit", &err)
	return s.p.CompleteCommit(ctx, tx, c, r)
}

func (s safePipeline) RecordCommit(ctx context.Context, tx unitTx, req ledger.ClaimRequest, r ledger.Result) (c *ledger.Claim, err error) {
	defer recovered("RecordCommit", &err)
	c, err = s.p.RecordCommit(ctx, tx, req, r)
	if err == nil && c == nil {
		err = errors.New("RecordCommit returned neither a claim nor an error")
	}
	return c, err
}
