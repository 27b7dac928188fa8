package ledger

import (
	"context"
	"database/sql"
)

// Record inserts req's identity already completed with r, inside tx: the
// claim at commit. The caller runs its work in tx first and calls Record
// as the last statement before COMMIT; the entry and the work commit or
// roll back together, exactly as with Claim and Complete, and only one
// transaction can ever commit an entry for the identity.
//
// It inserts first, against the same unique constraint as Claim, and
// reads only on conflict. The result is:
//   - a Claim with Outcome Recorded: the completed entry is in tx; commit;
//   - a Claim with Outcome Replay and the stored Result: another
//     transaction completed the operation first; roll tx back (the work's
//     writes must not commit) and return the stored result;
//   - ErrKeyReused: the identity exists with another fingerprint; roll
//     back;
//   - ErrInProgress: another open transaction held the identity past the
//     transaction's lock timeout (or SQLite's busy timeout);
//   - ErrIncomplete: the entry was committed without a result;
//   - an error matching ErrRetryable (serialization failure, deadlock):
//     roll back and retry the whole transaction, work included;
//   - ErrInvalid (bad input, a result over the limits, or a positive
//     LockWait the store cannot honour, before any statement), an error
//     matching dialects.ErrUnsuitableTx (as for Claim), a context error,
//     sql.ErrTxDone, or another *DBError.
//
// A positive req.LockWait bounds the record's lock waits inside its own
// statements, as for Claim (see [Store.BoundsLockWait]).
//
// An entry past its retention is taken over with r. For a dialect
// without [dialects.RecordQuerier] Record claims and completes (two
// statements, the same outcomes). What a concurrent duplicate does per
// database is in docs/ledger.md.
func (s *Store) Record(ctx context.Context, tx *sql.Tx, req ClaimRequest, r Result) (*Claim, error) {
	return s.core.Record(ctx, tx, req, r)
}

// Record inserts req's identity already completed with r, inside tx: the
// claim at commit. It behaves as [Store.Record].
func (s *TxStore[TX]) Record(ctx context.Context, tx TX, req ClaimRequest, r Result) (*Claim, error) {
	ctx, op := s.obs.begin(ctx, "opledger.record", req.Identity)
	c, err := s.record(ctx, tx, req, r)
	s.obs.claimed(ctx, op, req.Identity, c, err)
	return c, err
}

// recorded returns this store's Recorded outcome for id in tx.
func (s *TxStore[TX]) recorded(id Identity, tx TX, tookOver bool) *Claim {
	return &Claim{Outcome: Recorded, Identity: id, tx: tx, owner: s, completed: true, tookOver: tookOver}
}

func (s *TxStore[TX]) record(ctx context.Context, tx TX, req ClaimRequest, r Result) (*Claim, error) {
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
		args: func(created, expires int64) []any {
			args := []any{id, req.Identity.caller, req.Identity.method, fp, int64(r.Code), resp, r.TypeName, created, created, expires}
			if rq.TakesOver {
				args = append(args, created)
			}
			return args
		},
		takeOver: func(created, expires int64) (string, []any) {
			return rq.TakeOver, []any{fp, int64(r.Code), resp, r.TypeName, created, created, expires, id, created}
		},
		won: func(tookOver bool) *Claim { return s.recorded(req.Identity, tx, tookOver) },
	}
	return s.insertFirst(ctx, tx, req, s.q.Select, p)
}
