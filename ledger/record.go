package ledger

import (
	"context"
	"database/sql"
)

// Record inserts req's identity already completed with r, inside tx: the
// claim at commit. The caller runs its work in tx first and calls Record
// as the last statement before COMMIT; the entry and the work commit or
// roll back together, and only one transaction can ever commit an entry
// for the identity. The result is:
//   - a Claim with Outcome Recorded: the completed entry is in tx; commit;
//   - a Claim with Outcome Replay and the stored Result, or ErrKeyReused:
//     roll tx back (the work's writes must not commit);
//   - ErrInProgress, ErrIncomplete, an error matching ErrRetryable (roll
//     back and run the whole transaction again, work included) or
//     dialects.ErrUnsuitableTx, ErrInvalid (also for a positive LockWait
//     the store's dialect cannot bound: see [ClaimRequest]), a context
//     error, sql.ErrTxDone or another *DBError, as for [Store.Claim].
//
// An entry past its retention is taken over with r. docs/ledger.md ("Claim
// at commit") has the statements per database and what a concurrent
// duplicate does.
func (s *Store) Record(ctx context.Context, tx *sql.Tx, req ClaimRequest, r Result) (*Claim, error) {
	return s.core.Record(ctx, tx, req, r)
}

// Record inserts req's identity already completed with r, inside tx: the
// claim at commit. It behaves as [Store.Record].
func (s *txStore[TX]) Record(ctx context.Context, tx TX, req ClaimRequest, r Result) (*Claim, error) {
	ctx, op := s.obs.begin(ctx, "opledger.record", req.Identity)
	c, err := s.record(ctx, tx, req, r)
	s.obs.claimed(ctx, op, req.Identity, c, err)
	return c, err
}

// recorded returns this store's Recorded outcome for id in tx.
func (s *txStore[TX]) recorded(id Identity, tx TX, tookOver bool) *Claim {
	return &Claim{Outcome: Recorded, Identity: id, tx: tx, owner: s, completed: true, tookOver: tookOver}
}

func (s *txStore[TX]) record(ctx context.Context, tx TX, req ClaimRequest, r Result) (*Claim, error) {
	if err := s.checkResult(r); err != nil {
		return nil, err
	}
	if s.rq == nil {
		c, err := s.claim(ctx, tx, req)
		if err != nil || !c.Acquired() {
			return c, err
		}
		if err := s.complete(ctx, tx, c, r); err != nil {
			return nil, err
		}
		return s.recorded(req.Identity, tx, false), nil
	}
	if err := checkRequest(isNil(tx), req); err != nil {
		return nil, err
	}
	rq, err := s.recordQueries(req.LockWait)
	if err != nil {
		return nil, err
	}
	if err := s.checkTx(ctx, "record", tx); err != nil {
		return nil, err
	}
	id, fp := req.Identity.id[:], req.Fingerprint[:]
	resp := r.Response
	if resp == nil {
		resp = []byte{}
	}
	p := insertFirst[TX]{
		op:     "record",
		insert: rq.Insert,
		args: func(created, expires, born int64) []any {
			args := []any{id, req.Identity.caller, req.Identity.method, fp, int64(r.Code), resp, r.TypeName, created, created, expires, born}
			if rq.TakesOver {
				args = append(args, created)
			}
			return args
		},
		takeOver: func(created, expires int64) (string, []any) {
			return s.byHour(rq.TakeOver, req.Identity.birth), []any{fp, int64(r.Code), resp, r.TypeName, created, created, expires, id, created}
		},
		won: func(tookOver bool) *Claim { return s.recorded(req.Identity, tx, tookOver) },
	}
	return s.insertFirst(ctx, tx, req, s.q.Select, p)
}
