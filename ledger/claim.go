package ledger

import (
	"bytes"
	"context"
	"database/sql"
	"errors"
	"fmt"

	"github.com/opledger/opledger/dialects"
	"github.com/opledger/opledger/internal/ledgerkit"
)

// Claim claims req.Identity inside tx.
//
// It inserts first; only on conflict does it read the existing entry
// (never read-then-insert). It never opens a transaction or connection of
// its own, so the claim commits or rolls back with the caller's mutation.
// The result is:
//   - a Claim with Outcome Acquired: this transaction owns the identity;
//   - a Claim with Outcome Replay and the stored Result;
//   - ErrKeyReused: the identity exists with another fingerprint;
//   - ErrInProgress: another open transaction held the identity past the
//     transaction's lock timeout (or SQLite's busy timeout);
//   - ErrIncomplete: the entry was committed without a result;
//   - ErrKeyExpired, before any statement, when the key was born before
//     the ledger's window (see WithRetention), or when its entry is past
//     its retention and its key's birth is known (the entry outlived a
//     shorter retention of before: it is not taken over);
//   - an error matching ErrRetryable (serialization failure, deadlock):
//     roll back and retry the whole transaction;
//   - an error matching dialects.ErrUnsuitableTx, before any insert, when
//     the dialect implements dialectkit.TxChecker and tx runs in a mode in
//     which a claim is not safe (TiDB's optimistic transactions): its
//     message names the setting to change;
//   - ErrInvalid (a key born more than the clock skew ahead of the
//     ledger's clock: field "key"), a context error, sql.ErrTxDone, or
//     another *DBError.
//
// The entry of a key without a known birth that is past its retention is
// taken over atomically: of many concurrent claimants exactly one
// acquires it.
func (s *Store) Claim(ctx context.Context, tx *sql.Tx, req ClaimRequest) (*Claim, error) {
	return s.core.Claim(ctx, tx, req)
}

// Claim claims req.Identity inside tx. It behaves as [Store.Claim].
func (s *txStore[TX]) Claim(ctx context.Context, tx TX, req ClaimRequest) (*Claim, error) {
	ctx, op := s.obs.begin(ctx, "opledger.claim", req.Identity)
	c, err := s.claim(ctx, tx, req)
	s.obs.claimed(ctx, op, req.Identity, c, err)
	return c, err
}

func (s *txStore[TX]) claim(ctx context.Context, tx TX, req ClaimRequest) (*Claim, error) {
	if err := checkRequest(isNil(tx), req); err != nil {
		return nil, err
	}
	q, err := s.queries(req.LockWait)
	if err != nil {
		return nil, err
	}
	if err := s.checkTx(ctx, "claim", tx); err != nil {
		return nil, err
	}
	id, fp := req.Identity.id[:], req.Fingerprint[:]
	p := insertFirst[TX]{
		op:     "claim",
		insert: q.Insert,
		args: func(created, expires, born int64) []any {
			return []any{id, req.Identity.caller, req.Identity.method, fp, created, expires, born}
		},
		takeOver: func(created, expires int64) (string, []any) {
			return s.byHour(q.TakeOver, req.Identity.birth), []any{fp, created, expires, id, created}
		},
		won: func(tookOver bool) *Claim {
			c := s.acquired(req.Identity, tx)
			c.tookOver = tookOver
			return c
		},
	}
	if s.oneStatement {
		p.one = s.claimByHour(q.Claim, req.Identity.birth)
	}
	return s.insertFirst(ctx, tx, req, q.Select, p)
}

// checkRequest refuses, before any statement, a Claim or Record without a
// transaction (nilTx), an identity or a fingerprint.
func checkRequest(nilTx bool, req ClaimRequest) error {
	switch {
	case nilTx:
		return invalid("tx", "transaction must not be nil")
	case req.Identity.IsZero():
		return invalid("caller", "identity is zero; build it with NewIdentity")
	case req.Fingerprint == Fingerprint{}:
		return invalid("fingerprint", "must not be all zero")
	}
	return nil
}

// maxClaimLoops bounds the insert/read loop: a row can be deleted (swept)
// between the conflict and the read, or taken over by another claimant.
const maxClaimLoops = 4

// insertFirst is what Claim and Record differ in; (*txStore).insertFirst
// runs the loop they share: insert first, read only on conflict, take over
// an expired entry, replay a completed one.
type insertFirst[TX any] struct {
	op string // "claim" or "record", for errors
	// one, when not empty, is the one-statement form (Queries.Claim): it
	// inserts and returns the entry its snapshot shows. insert is the
	// plain insert, used otherwise.
	one, insert string
	// args returns the insert's arguments for an attempt at created.
	args func(created, expires, born int64) []any
	// takeOver is the statement that takes over an expired entry, and its
	// arguments.
	takeOver func(created, expires int64) (string, []any)
	// won returns the outcome when this transaction inserted the entry
	// (tookOver: by taking over an expired one).
	won func(tookOver bool) *Claim
}

// insertFirst runs p for req in tx: read back with sel after a conflict.
func (s *txStore[TX]) insertFirst(ctx context.Context, tx TX, req ClaimRequest, sel string, p insertFirst[TX]) (*Claim, error) {
	for range maxClaimLoops {
		now := s.now()
		if err := s.window(p.op, req.Identity, micros(now)); err != nil {
			return nil, err
		}
		created, expires, born := s.times(req.Identity, now)
		var (
			e     row
			found bool
		)
		if p.one != "" {
			inserted, got, ok, err := scanClaim(s.drv.QueryRow(ctx, tx, p.one, p.args(created, expires, born)...))
			if err != nil {
				return nil, s.fail(ctx, p.op, err)
			}
			if inserted {
				return s.wonInWindow(p, req)
			}
			e, found = got, ok
		} else {
			n, err := s.drv.Exec(ctx, tx, p.insert, p.args(created, expires, born)...)
			switch {
			case err != nil && s.d.Classify(err) != dialects.ClassUniqueViolation:
				return nil, s.fail(ctx, p.op, err)
			case err == nil && n == 1:
				return s.wonInWindow(p, req)
			}
		}

		if !found {
			// Conflict, and the entry is not known yet: read it.
			if s.afterConflict != nil {
				s.afterConflict()
			}
			var err error
			e, err = scanRow(s.drv.QueryRow(ctx, tx, s.byHour(sel, req.Identity.birth), s.readArgs(req.Identity)...))
			if errors.Is(err, sql.ErrNoRows) {
				continue // deleted between the conflict and the read: insert again
			}
			if err != nil {
				return nil, s.fail(ctx, p.op, err)
			}
		}
		if e.expiresAt <= created {
			c, err := s.takeOver(ctx, tx, req, p, created, expires)
			if c == nil && err == nil {
				continue // another transaction took it over first: read again
			}
			return c, err
		}
		return existing(req, e)
	}
	return nil, fmt.Errorf("ledger: %s: entry changed under the %s %d times: %w", p.op, p.op, maxClaimLoops, ErrRetryable)
}

// wonInWindow is p's acquisition by an insert, unless the key's window
// ended while the insert ran (see stillInWindow).
func (s *txStore[TX]) wonInWindow(p insertFirst[TX], req ClaimRequest) (*Claim, error) {
	if err := s.stillInWindow(p.op, req.Identity); err != nil {
		return nil, err
	}
	return p.won(false), nil
}

// takeOver takes over the expired entry of req's identity for p: the
// outcome when this transaction took it over, nil and nil when another
// took it first (read it again), ErrKeyExpired for a key with a known
// birth (never taken over), or the statement's failure.
func (s *txStore[TX]) takeOver(ctx context.Context, tx TX, req ClaimRequest, p insertFirst[TX], created, expires int64) (*Claim, error) {
	if req.Identity.birth != 0 {
		return nil, expiredEntry(p.op)
	}
	q, args := p.takeOver(created, expires)
	n, err := s.drv.Exec(ctx, tx, q, args...)
	switch {
	case err != nil:
		return nil, s.fail(ctx, p.op, err)
	case n == 1:
		return p.won(true), nil
	}
	return nil, nil
}

// expiredEntry is the error of a claim or a record that found the entry
// of a key with a known birth past its retention, though the key is inside
// the window: the entry outlived a shorter retention of before (its
// expires_at was set by it). It is not taken over: the ledger would run a
// key again that a ledger with that retention may have forgotten.
func expiredEntry(op string) error {
	return fmt.Errorf("ledger: %s: the key's entry is past the retention it was claimed with: %w", op, ErrKeyExpired)
}

// existing is the answer for a live entry e found where req wanted to
// insert: a replay of its result, ErrKeyReused or ErrIncomplete.
func existing(req ClaimRequest, e row) (*Claim, error) {
	if !bytes.Equal(e.fp, req.Fingerprint[:]) {
		return nil, ErrKeyReused
	}
	if e.completedAt == nil {
		return nil, ErrIncomplete
	}
	return NewReplay(req.Identity, e.result, fromMicros(*e.completedAt)), nil
}

// acquired returns this store's acquisition of id in tx.
func (s *txStore[TX]) acquired(id Identity, tx TX) *Claim {
	return &Claim{Outcome: Acquired, Identity: id, tx: tx, owner: s}
}

type row struct {
	fp          []byte
	result      Result
	createdAt   int64
	completedAt *int64
	expiresAt   int64
}

// scanRow reads an entry (the columns of Queries.Select and Lookup).
func scanRow(r ledgerkit.Row) (row, error) {
	var (
		e        row
		code     sql.NullInt64
		typeName sql.NullString
		done     sql.NullInt64
	)
	if err := r.Scan(&e.fp, &code, &e.result.Response, &typeName, &e.createdAt, &done, &e.expiresAt); err != nil {
		return row{}, err
	}
	e.completed(done, code, typeName)
	return e, nil
}

// completed fills in e's completion from the nullable columns read.
func (e *row) completed(done, code sql.NullInt64, typeName sql.NullString) {
	if !done.Valid {
		return
	}
	e.completedAt = &done.Int64
	e.result.Code = uint32(code.Int64)
	e.result.TypeName = typeName.String
	if e.result.Response == nil {
		e.result.Response = []byte{}
	}
}

// scanClaim reads the row of a one-statement Claim: whether it inserted,
// and the existing entry when the statement saw one.
func scanClaim(r ledgerkit.Row) (inserted bool, e row, found bool, err error) {
	var (
		ins                          sql.NullBool
		code, created, done, expires sql.NullInt64
		typeName                     sql.NullString
		fp, resp                     []byte
	)
	if err := r.Scan(&ins, &fp, &code, &resp, &typeName, &created, &done, &expires); err != nil {
		return false, row{}, false, err
	}
	if ins.Valid && ins.Bool {
		return true, row{}, false, nil
	}
	if fp == nil || !created.Valid || !expires.Valid {
		return false, row{}, false, nil
	}
	e = row{fp: fp, createdAt: created.Int64, expiresAt: expires.Int64}
	e.result.Response = resp
	e.completed(done, code, typeName)
	return false, e, true, nil
}
