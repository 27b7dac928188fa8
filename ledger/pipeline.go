package ledger

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/opledger/opledger/dialects"
	"github.com/opledger/opledger/internal/dialectkit"
	"github.com/opledger/opledger/internal/ledgerkit"
)

// Pipelines reports whether BeginClaim, CompleteCommit and RecordCommit
// send their statements with BEGIN and COMMIT (the store's dialect
// implements dialectkit.Pipeliner); without it they run the statements one
// by one, with the same outcomes.
func (s *txStore[TX]) Pipelines() bool { return s.piper != nil }

// pipelineQueries returns the pipelined SQL with Record bounded by wait.
func (s *txStore[TX]) pipelineQueries(wait time.Duration) (*dialectkit.PipelineQueries, error) {
	if wait == 0 {
		if q, ok := s.pbounded.Load(wait); ok {
			return q.(*dialectkit.PipelineQueries), nil
		}
		q, _ := s.piper.PipelineQueries(s.table, 0)
		v, _ := s.pbounded.LoadOrStore(wait, &q)
		return v.(*dialectkit.PipelineQueries), nil
	}
	plain, _ := s.pipelineQueries(0)
	bound := s.piper.PipelineQueries
	if !s.rbounds {
		bound = nil
	}
	return boundedSQL(s.d.Name(), s.table, "record", wait, plain, &s.pbounded, bound)
}

// BeginClaim begins a transaction through p and claims req.Identity in it,
// the claim sent with BEGIN in one round trip: the first step of a
// claim-first unit whose transaction the ledger begins. Its outcomes are
// those of [txStore.Claim]:
//   - Acquired: tx is open and owns the identity; run the work in it, then
//     [txStore.CompleteCommit] (or Complete, and commit);
//   - Replay (with the stored result), ErrKeyReused or ErrIncomplete: the
//     entry was read back and the transaction rolled back, in a second
//     round trip; tx is the zero TX;
//   - any error: nothing is left open.
//
// The claim is the plain insert (dialects.Queries.Insert, bounded by
// req.LockWait as for Claim). When the entry it conflicted with is gone or
// expired by the time it is read, BeginClaim begins again without
// pipelining and claims as Claim does, taking the expired entry over.
func (s *txStore[TX]) BeginClaim(ctx context.Context, p ledgerkit.Pipeline[TX], req ClaimRequest) (TX, *Claim, error) {
	ctx, op := s.obs.begin(ctx, "opledger.claim", req.Identity)
	tx, c, err := s.beginClaim(ctx, p, req)
	err = s.explain(err) // BEGIN's failure, from p, too
	s.obs.claimed(ctx, op, req.Identity, c, err)
	return tx, c, err
}

func (s *txStore[TX]) beginClaim(ctx context.Context, p ledgerkit.Pipeline[TX], req ClaimRequest) (TX, *Claim, error) {
	var zero TX
	if p == nil {
		return zero, nil, invalid("tx", "pipeline must not be nil")
	}
	if err := checkRequest(false, req); err != nil {
		return zero, nil, err
	}
	q, err := s.queries(req.LockWait)
	if err != nil {
		return zero, nil, err
	}
	if s.piper == nil || s.check != nil {
		return s.beginThenClaim(ctx, p, req)
	}
	id, fp := req.Identity.id[:], req.Fingerprint[:]
	now := s.now()
	if err := s.window("claim", req.Identity, micros(now)); err != nil {
		return zero, nil, err
	}
	created, expires, born := s.times(req.Identity, now)
	tx, n, err := p.BeginExec(ctx, q.Insert, id, req.Identity.caller, req.Identity.method, fp, created, expires, born)
	if err != nil {
		return zero, nil, s.fail(ctx, "claim", err)
	}
	if n == 1 {
		if err := s.stillInWindow("claim", req.Identity); err != nil {
			_ = p.Rollback(ctx, tx)
			return zero, nil, err
		}
		return tx, s.acquired(req.Identity, tx), nil
	}
	// A conflict: read the entry and end the transaction.
	if s.afterConflict != nil {
		s.afterConflict()
	}
	e, err := scanRow(p.QueryRollback(ctx, tx, q.Select, s.readArgs(req.Identity)...))
	switch {
	case errors.Is(err, sql.ErrNoRows) || err == nil && e.expiresAt <= created:
		// Gone or expired: claim as Claim does, which takes it over.
		return s.beginThenClaim(ctx, p, req)
	case err != nil:
		return zero, nil, s.fail(ctx, "claim", err)
	}
	c, err := existing(req, e)
	return zero, c, err
}

// beginThenClaim begins a transaction through p and claims in it with
// Claim's statements, rolling back unless it acquired.
func (s *txStore[TX]) beginThenClaim(ctx context.Context, p ledgerkit.Pipeline[TX], req ClaimRequest) (TX, *Claim, error) {
	var zero TX
	tx, err := p.Begin(ctx)
	if err != nil {
		return zero, nil, s.fail(ctx, "claim", err)
	}
	c, err := s.claim(ctx, tx, req)
	if err != nil || !c.Acquired() {
		_ = p.Rollback(ctx, tx)
		return zero, c, err
	}
	return tx, c, nil
}

// CompleteCommit records r as the result of c in tx, which must be the
// transaction that acquired c, and commits tx, the completion and the
// COMMIT sent in one round trip. It ends tx in every case:
//   - nil: the result, the claim and the work's writes committed;
//   - ErrNotAcquired (c is not this transaction's pending acquisition, or
//     the completion matched no pending entry) or ErrInvalid (a result over
//     the limits): tx was rolled back;
//   - the completion's failure (a *DBError): the COMMIT sent after it did
//     not run, and tx was rolled back;
//   - COMMIT's failure, as p reports it: whether it committed may be
//     unknown (package pgxledger's match txmiddleware.ErrCommitUnknown
//     then).
//
// Every error passes through the dialect's explanation
// (dialectkit.ErrorExplainer), COMMIT's too: behind a transaction pooler a
// COMMIT prepared under a name that the server connection lacks matches
// postgres.ErrStatementPooling, as a failed claim or completion does.
func (s *txStore[TX]) CompleteCommit(ctx context.Context, p ledgerkit.Pipeline[TX], tx TX, c *Claim, r Result) error {
	var id Identity
	if c != nil {
		id = c.Identity
	}
	ctx, op := s.obs.begin(ctx, "opledger.complete", id)
	err := s.completeCommit(ctx, p, tx, c, r)
	err = s.explain(err) // COMMIT's failure, from p, too
	s.obs.completed(ctx, op, c, err)
	return err
}

func (s *txStore[TX]) completeCommit(ctx context.Context, p ledgerkit.Pipeline[TX], tx TX, c *Claim, r Result) error {
	if p == nil {
		return invalid("tx", "pipeline must not be nil")
	}
	if err := s.mine(tx, c, r); err != nil {
		if !isNil(tx) {
			_ = p.Rollback(ctx, tx)
		}
		return err
	}
	if s.piper == nil || !p.Owns(tx) {
		if err := s.complete(ctx, tx, c, r); err != nil {
			_ = p.Rollback(ctx, tx)
			return err
		}
		return p.Commit(ctx, tx)
	}
	pq, _ := s.pipelineQueries(0)
	execErr, commitErr := p.ExecCommit(ctx, tx, s.pipelinedComplete(pq, c.Identity.birth), s.completeArgs(c, r)...)
	if execErr != nil {
		_ = p.Rollback(ctx, tx)
		if s.piper.NotPending(execErr) {
			return fmt.Errorf("ledger: complete: entry not pending: %w", ErrNotAcquired)
		}
		return s.fail(ctx, "complete", execErr)
	}
	if commitErr != nil {
		return commitErr
	}
	c.completed = true
	return nil
}

// RecordCommit inserts req's identity already completed with r in tx, the
// transaction in which the work ran, and commits it, the record and the
// COMMIT sent in one round trip: claim at commit's last step. It ends tx
// in every case:
//   - a Claim with Outcome Recorded: the entry and the work's writes
//     committed;
//   - a Claim with Outcome Replay and the stored result, ErrKeyReused or
//     ErrIncomplete: the record conflicted, so the COMMIT sent with it did
//     not run; tx was rolled back (the work's writes with it) and the entry
//     read, in one more round trip;
//   - an error matching ErrRetryable when the entry it conflicted with had
//     expired or was gone: the work's writes were rolled back, the expired
//     entry deleted (in a statement of its own), and the whole unit, work
//     included, is to run again;
//   - the record's other failures (ErrInvalid before anything was sent, a
//     *DBError): tx was rolled back;
//   - COMMIT's failure, as p reports it (see [txStore.CompleteCommit]).
//
// A positive req.LockWait bounds the record's lock waits inside its
// statement, as for Record.
func (s *txStore[TX]) RecordCommit(ctx context.Context, p ledgerkit.Pipeline[TX], tx TX, req ClaimRequest, r Result) (*Claim, error) {
	ctx, op := s.obs.begin(ctx, "opledger.record", req.Identity)
	c, err := s.recordCommit(ctx, p, tx, req, r)
	err = s.explain(err) // COMMIT's failure, from p, too
	s.obs.claimed(ctx, op, req.Identity, c, err)
	return c, err
}

func (s *txStore[TX]) recordCommit(ctx context.Context, p ledgerkit.Pipeline[TX], tx TX, req ClaimRequest, r Result) (*Claim, error) {
	if p == nil {
		return nil, invalid("tx", "pipeline must not be nil")
	}
	fail := func(err error) (*Claim, error) {
		if !isNil(tx) {
			_ = p.Rollback(ctx, tx)
		}
		return nil, err
	}
	if err := s.checkResult(r); err != nil {
		return fail(err)
	}
	if err := checkRequest(isNil(tx), req); err != nil {
		return fail(err)
	}
	if s.piper == nil || s.check != nil || !p.Owns(tx) {
		return s.recordThenCommit(ctx, p, tx, req, r)
	}
	pq, err := s.pipelineQueries(req.LockWait)
	if err != nil {
		return fail(err)
	}
	now := s.now()
	if err := s.window("record", req.Identity, micros(now)); err != nil {
		return fail(err)
	}
	created, expires, born := s.times(req.Identity, now)
	resp := r.Response
	if resp == nil {
		resp = []byte{}
	}
	execErr, commitErr := p.ExecCommit(ctx, tx, pq.Record, req.Identity.id[:], req.Identity.caller, req.Identity.method,
		req.Fingerprint[:], int64(r.Code), resp, r.TypeName, created, created, expires, born)
	switch {
	case execErr == nil && commitErr != nil:
		return nil, commitErr
	case execErr == nil:
		return s.recorded(req.Identity, tx, false), nil
	case s.d.Classify(execErr) != dialects.ClassUniqueViolation:
		_ = p.Rollback(ctx, tx)
		return nil, s.fail(ctx, "record", execErr)
	}
	return s.recordConflict(ctx, p, pq, tx, req, created)
}

// recordThenCommit is RecordCommit without pipelining: Record, then
// COMMIT when it recorded (a rollback otherwise).
func (s *txStore[TX]) recordThenCommit(ctx context.Context, p ledgerkit.Pipeline[TX], tx TX, req ClaimRequest, r Result) (*Claim, error) {
	c, err := s.record(ctx, tx, req, r)
	if err != nil || !c.Recorded() {
		_ = p.Rollback(ctx, tx)
		return c, err
	}
	if err := p.Commit(ctx, tx); err != nil {
		return nil, err
	}
	return c, nil
}

// recordConflict handles a pipelined record that conflicted: it rolls the
// work back and reads the entry outside it, replaying a live entry and
// deleting an expired one (the unit then runs again).
func (s *txStore[TX]) recordConflict(ctx context.Context, p ledgerkit.Pipeline[TX], pq *dialectkit.PipelineQueries, tx TX, req ClaimRequest, created int64) (*Claim, error) {
	if s.afterConflict != nil {
		s.afterConflict()
	}
	id := req.Identity.id[:]
	e, err := scanRow(p.RollbackQuery(ctx, tx, s.q.Select, s.readArgs(req.Identity)...))
	switch {
	case errors.Is(err, sql.ErrNoRows):
		return nil, fmt.Errorf("ledger: record: the conflicting entry is gone; run the unit again: %w", ErrRetryable)
	case err != nil:
		return nil, s.fail(ctx, "record", err)
	case e.expiresAt <= created && req.Identity.birth != 0:
		return nil, expiredEntry("record")
	case e.expiresAt <= created:
		if _, err := p.Exec(ctx, pq.DeleteExpired, id, created); err != nil {
			return nil, s.fail(ctx, "record", err)
		}
		return nil, fmt.Errorf("ledger: record: deleted the expired entry it conflicted with; run the unit again: %w", ErrRetryable)
	}
	return existing(req, e)
}
