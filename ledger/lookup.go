package ledger

import (
	"context"
	"database/sql"
	"errors"

	"github.com/opledger/opledger/internal/ledgerkit"
)

// Lookup reads the committed entry for id without claiming or locking it.
// It returns ErrKeyExpired, before any statement, for a key born before
// the ledger's window (see WithRetention), and for a key with a known
// birth whose entry is past its retention; ErrNotFound when there is none
// or it has expired; an entry
// committed without a result comes back with State Pending. An attempt
// still in flight in another transaction is invisible to it.
func (s *Store) Lookup(ctx context.Context, q Querier, id Identity) (*Entry, error) {
	if q == nil {
		return nil, invalid("tx", "querier must not be nil")
	}
	return s.core.LookupWith(ctx, func(ctx context.Context, query string, args ...any) ledgerkit.Row {
		return q.QueryRowContext(ctx, query, args...)
	}, id)
}

// LookupWith reads the committed entry for id with queryRow, a function
// that runs a query outside the caller's transactions (on a pool, a
// connection or a read-only transaction of the store's API), without
// claiming or locking it: what [Store.Lookup] does through its Querier.
// Package pgxledger's Lookup is built on it.
func (s *txStore[TX]) LookupWith(ctx context.Context, queryRow func(ctx context.Context, query string, args ...any) ledgerkit.Row, id Identity) (*Entry, error) {
	if queryRow == nil {
		return nil, invalid("tx", "querier must not be nil")
	}
	if id.IsZero() {
		return nil, invalid("caller", "identity is zero; build it with NewIdentity")
	}
	if err := s.window("lookup", id, micros(s.now())); err != nil {
		return nil, err
	}
	e, err := scanRow(queryRow(ctx, s.byHour(s.q.Lookup, id.birth), s.readArgs(id)...))
	if errors.Is(err, sql.ErrNoRows) {
		return nil, ErrNotFound
	}
	if err != nil {
		return nil, s.fail(ctx, "lookup", err)
	}
	if e.expiresAt <= micros(s.now()) {
		if id.birth != 0 {
			return nil, expiredEntry("lookup")
		}
		return nil, ErrNotFound
	}
	out := &Entry{
		Identity:  id,
		State:     Pending,
		CreatedAt: fromMicros(e.createdAt),
		ExpiresAt: fromMicros(e.expiresAt),
	}
	copy(out.Fingerprint[:], e.fp)
	if e.completedAt != nil {
		out.State = Completed
		out.Result = e.result
		out.CompletedAt = fromMicros(*e.completedAt)
	}
	return out, nil
}
