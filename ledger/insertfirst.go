package ledger

import (
	"bytes"
	"context"
	"database/sql"
	"errors"
	"fmt"

	"github.com/opledger/opledger/dialects"
)

// insertFirst is what Claim and Record differ in; (*Store).insertFirst
// runs the loop they share: insert first, read only on conflict, take over
// an expired entry, replay a completed one.
type insertFirst struct {
	op string // "claim" or "record", for errors
	// one, when not empty, is the one-statement form (Queries.Claim): it
	// inserts and returns the entry its snapshot shows. insert is the
	// plain insert, used otherwise.
	one, insert string
	// args returns the insert's arguments for an attempt at created.
	args func(created, expires int64) []any
	// takeOver is the statement that takes over an expired entry, and its
	// arguments.
	takeOver func(created, expires int64) (string, []any)
	// won returns the outcome when this transaction inserted the entry
	// (tookOver: by taking over an expired one).
	won func(tookOver bool) *Claim
}

// checkRequest refuses, before any statement, a Claim or Record without a
// transaction, an identity or a fingerprint.
func checkRequest(tx *sql.Tx, req ClaimRequest) error {
	switch {
	case tx == nil:
		return invalid("tx", "transaction must not be nil")
	case req.Identity.IsZero():
		return invalid("caller", "identity is zero; build it with NewIdentity")
	case req.Fingerprint.IsZero():
		return invalid("fingerprint", "must not be all zero")
	}
	return nil
}

// insertFirst runs p for req in tx: read back with sel after a conflict.
func (s *Store) insertFirst(ctx context.Context, tx *sql.Tx, req ClaimRequest, sel string, p insertFirst) (*Claim, error) {
	id := req.Identity.id[:]
	fp := req.Fingerprint[:]
	for range maxClaimLoops {
		now := s.now()
		created, expires := micros(now), micros(now.Add(s.retention))
		var (
			e     row
			found bool
		)
		if p.one != "" {
			inserted, got, ok, err := s.scanClaim(tx.QueryRowContext(ctx, p.one, p.args(created, expires)...))
			if err != nil {
				return nil, s.fail(ctx, p.op, err)
			}
			if inserted {
				return p.won(false), nil
			}
			e, found = got, ok
		} else {
			res, err := tx.ExecContext(ctx, p.insert, p.args(created, expires)...)
			if err != nil {
				if s.d.Classify(err) != dialects.ClassUniqueViolation {
					return nil, s.fail(ctx, p.op, err)
				}
			} else if n, err := res.RowsAffected(); err != nil {
				return nil, s.fail(ctx, p.op, err)
			} else if n == 1 {
				return p.won(false), nil
			}
		}

		if !found {
			// Conflict, and the entry is not known yet: read it.
			if s.afterConflict != nil {
				s.afterConflict()
			}
			var err error
			e, err = s.scan(tx.QueryRowContext(ctx, sel, id))
			if errors.Is(err, sql.ErrNoRows) {
				continue // deleted between the conflict and the read: insert again
			}
			if err != nil {
				return nil, s.fail(ctx, p.op, err)
			}
		}
		if e.expiresAt <= created {
			q, args := p.takeOver(created, expires)
			res, err := tx.ExecContext(ctx, q, args...)
			if err != nil {
				return nil, s.fail(ctx, p.op, err)
			}
			n, err := res.RowsAffected()
			if err != nil {
				return nil, s.fail(ctx, p.op, err)
			}
			if n == 1 {
				return p.won(true), nil
			}
			continue // another transaction took it over first: read again
		}
		if !bytes.Equal(e.fp, fp) {
			return nil, ErrKeyReused
		}
		if e.completedAt == nil {
			return nil, ErrIncomplete
		}
		return NewReplay(req.Identity, e.result, fromMicros(*e.completedAt)), nil
	}
	return nil, fmt.Errorf("ledger: %s: entry changed under the %s %d times: %w", p.op, p.op, maxClaimLoops, ErrRetryable)
}
