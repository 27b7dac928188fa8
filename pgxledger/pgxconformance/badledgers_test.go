package pgxconformance_test

import (
	"bytes"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/opledger/opledger/conformance"
	"github.com/opledger/opledger/dialects"
	"github.com/opledger/opledger/dialects/postgres"
	"github.com/opledger/opledger/ledger"
	"github.com/opledger/opledger/pgxledger"
	"github.com/opledger/opledger/pgxledger/pgxconformance"
)

// The broken ledgers below exist to prove that the suite has teeth on the
// pgx path. Each is otherwise careful (input checks, the Store's error
// classification, Lookup and Sweep through a correct Store on the same
// table) and has exactly one design flaw.

// raw is what they share: the dialect's SQL on the case's table, and a
// correct Store on it.
type raw struct {
	pgxconformance.Ledger // the correct Store: Lookup, Sweep, Dialect, the pipelined forms
	q                     dialects.Queries
	table                 string
	cfg                   conformance.LedgerConfig
}

func newRaw(pool *pgxpool.Pool, cfg conformance.LedgerConfig) (*raw, error) {
	s, err := pgxledger.New(ledger.WithTable(cfg.Table), ledger.WithRetention(cfg.Retention),
		ledger.WithClock(cfg.Clock), ledger.WithMaxResultSize(cfg.MaxResultSize))
	if err != nil {
		return nil, err
	}
	return &raw{Ledger: pgxconformance.Ledger{Store: s, Pool: pool}, q: postgres.New().Queries(cfg.Table), table: cfg.Table, cfg: cfg}, nil
}

// BoundsLockWait: the broken ledgers do not bound their waits.
func (r *raw) BoundsLockWait() bool { return false }

func (r *raw) fail(op string, err error) error {
	return &ledger.DBError{Op: op, Class: postgres.New().Classify(err), Err: err}
}

// complete is a careful completion of an acquisition made in tx.
func (r *raw) complete(ctx context.Context, tx pgx.Tx, c *ledger.Claim, res ledger.Result) error {
	if got, ok := ledger.ClaimTx[pgx.Tx](c); !ok || got != tx || c.Outcome != ledger.Acquired {
		return ledger.ErrNotAcquired
	}
	if len(res.Response) > r.cfg.MaxResultSize {
		return &ledger.InputError{Field: "result", Reason: "too large"}
	}
	resp := res.Response
	if resp == nil {
		resp = []byte{}
	}
	id := c.Identity.ID()
	if _, err := tx.Exec(ctx, r.q.Complete, int64(res.Code), resp, res.TypeName, r.cfg.Clock().UnixMicro(), id[:]); err != nil {
		return r.fail("complete", err)
	}
	return nil
}

// read reads the entry for id with the plain, non-locking Lookup query.
func (r *raw) read(ctx context.Context, q interface {
	QueryRow(context.Context, string, ...any) pgx.Row
}, id ledger.Identity) (fp []byte, res ledger.Result, completed bool, completedAt time.Time, expires int64, err error) {
	var (
		code     sql.NullInt64
		typeName sql.NullString
		created  int64
		done     sql.NullInt64
	)
	idb := id.ID()
	err = q.QueryRow(ctx, r.q.Lookup, idb[:]).Scan(&fp, &code, &res.Response, &typeName, &created, &done, &expires)
	res.Code, res.TypeName = uint32(code.Int64), typeName.String
	if done.Valid {
		completed, completedAt = true, time.UnixMicro(done.Int64)
	}
	if res.Response == nil {
		res.Response = []byte{}
	}
	return fp, res, completed, completedAt, expires, err
}

// existing answers for an existing, live entry.
func existing(req ledger.ClaimRequest, fp []byte, res ledger.Result, completed bool, at time.Time) (*ledger.Claim, error) {
	if !bytes.Equal(fp, req.Fingerprint[:]) {
		return nil, ledger.ErrKeyReused
	}
	if !completed {
		return nil, ledger.ErrIncomplete
	}
	return ledger.NewReplay(req.Identity, res, at), nil
}

// naive reads (a plain SELECT), then inserts if it found nothing: the
// check-then-act race; an expired entry is taken over without checking
// that it still is.
type naive struct{ *raw }

func (n naive) Claim(ctx context.Context, tx pgx.Tx, req ledger.ClaimRequest) (*ledger.Claim, error) {
	now := n.cfg.Clock()
	created, expires := now.UnixMicro(), now.Add(n.cfg.Retention).UnixMicro()
	idb := req.Identity.ID()
	fp, res, completed, at, exp, err := n.read(ctx, tx, req.Identity)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		ins := "INSERT INTO " + postgres.New().QuoteIdent(n.table) + " (id, caller, method, request_fp, created_at, expires_at) VALUES ($1, $2, $3, $4, $5, $6)"
		if _, err := tx.Exec(ctx, ins, idb[:], req.Identity.Caller(), req.Identity.Method(), req.Fingerprint[:], created, expires); err != nil {
			return nil, n.fail("claim", err)
		}
		return ledger.NewAcquiredIn[pgx.Tx](req.Identity, tx), nil
	case err != nil:
		return nil, n.fail("claim", err)
	case exp <= created:
		upd := "UPDATE " + postgres.New().QuoteIdent(n.table) + " SET request_fp = $1, created_at = $2, expires_at = $3, " +
			"code = NULL, response = NULL, response_type = NULL, completed_at = NULL WHERE id = $4"
		if _, err := tx.Exec(ctx, upd, req.Fingerprint[:], created, expires, idb[:]); err != nil {
			return nil, n.fail("claim", err)
		}
		return ledger.NewAcquiredIn[pgx.Tx](req.Identity, tx), nil
	}
	return existing(req, fp, res, completed, at)
}

func (n naive) Complete(ctx context.Context, tx pgx.Tx, c *ledger.Claim, r ledger.Result) error {
	return n.complete(ctx, tx, c, r)
}

// ownTx claims correctly (insert first, read on conflict) but in a
// transaction of its own, committed at once, and completes in the
// caller's: the claim no longer commits or rolls back with the work. Its
// pipelined BeginClaim (own-tx-begin) does the same: the claim committed
// with its BEGIN, the work in a transaction after it.
type ownTx struct{ *raw }

func (o ownTx) claimOwn(ctx context.Context, req ledger.ClaimRequest) (*ledger.Claim, error) {
	own, err := o.Pool.Begin(ctx)
	if err != nil {
		return nil, o.fail("claim", err)
	}
	defer own.Rollback(ctx)
	c, err := o.Store.Claim(ctx, own, req)
	if err != nil {
		return nil, err
	}
	if err := own.Commit(ctx); err != nil {
		return nil, o.fail("claim", err)
	}
	return c, nil
}

func (o ownTx) Claim(ctx context.Context, tx pgx.Tx, req ledger.ClaimRequest) (*ledger.Claim, error) {
	c, err := o.claimOwn(ctx, req)
	if err != nil || !c.Acquired() {
		return c, err
	}
	return ledger.NewAcquiredIn(req.Identity, tx), nil // completed later in the caller's transaction
}

func (o ownTx) Complete(ctx context.Context, tx pgx.Tx, c *ledger.Claim, r ledger.Result) error {
	return o.complete(ctx, tx, c, r)
}

func (o ownTx) BeginClaim(ctx context.Context, level sql.IsolationLevel, req ledger.ClaimRequest) (pgx.Tx, *ledger.Claim, error) {
	c, err := o.claimOwn(ctx, req)
	if err != nil || !c.Acquired() {
		return nil, c, err
	}
	tx, err := pgxconformance.Driver{Pool: o.Pool}.Begin(ctx, level)
	if err != nil {
		return nil, nil, err
	}
	return tx, ledger.NewAcquiredIn(req.Identity, tx), nil
}

func (o ownTx) CompleteCommit(ctx context.Context, tx pgx.Tx, c *ledger.Claim, r ledger.Result) error {
	if err := o.complete(ctx, tx, c, r); err != nil {
		tx.Rollback(ctx)
		return err
	}
	return tx.Commit(ctx)
}

// ownTxRecorder is a correct claim-first ledger whose Record inserts the
// completed entry correctly but in a transaction of its own, committed at
// once: the entry no longer commits or rolls back with the caller's work.
type ownTxRecorder struct{ *raw }

func (o ownTxRecorder) Record(ctx context.Context, tx pgx.Tx, req ledger.ClaimRequest, r ledger.Result) (*ledger.Claim, error) {
	own, err := o.Pool.Begin(ctx)
	if err != nil {
		return nil, o.fail("record", err)
	}
	defer own.Rollback(ctx)
	c, err := o.Store.Record(ctx, own, req, r)
	if err != nil {
		return nil, err
	}
	if err := own.Commit(ctx); err != nil {
		return nil, o.fail("record", err)
	}
	if c.Recorded() {
		return ledger.NewRecordedIn(req.Identity, tx), nil
	}
	return c, nil
}

// lenientRecorder is a correct ledger whose pipelined RecordCommit sends
// the record as INSERT … ON CONFLICT DO NOTHING with the COMMIT: a
// conflict inserts nothing, fails nothing, and the COMMIT commits the
// duplicate's work; the entry is read afterwards and replayed.
type lenientRecorder struct{ *raw }

func (l lenientRecorder) BeginAt(ctx context.Context, level sql.IsolationLevel) (pgx.Tx, error) {
	return pgxconformance.Driver{Pool: l.Pool}.Begin(ctx, level)
}

func (l lenientRecorder) RecordCommit(ctx context.Context, tx pgx.Tx, req ledger.ClaimRequest, r ledger.Result) (*ledger.Claim, error) {
	defer tx.Rollback(ctx)
	now := l.cfg.Clock()
	created, expires := now.UnixMicro(), now.Add(l.cfg.Retention).UnixMicro()
	resp := r.Response
	if resp == nil {
		resp = []byte{}
	}
	idb := req.Identity.ID()
	tag, err := tx.Exec(ctx, postgres.New().RecordQueries(l.table).Insert,
		idb[:], req.Identity.Caller(), req.Identity.Method(), req.Fingerprint[:], int64(r.Code), resp, r.TypeName, created, created, expires)
	if err != nil {
		return nil, l.fail("record", err)
	}
	if err := tx.Commit(ctx); err != nil {
		return nil, l.fail("commit", err)
	}
	if tag.RowsAffected() == 1 {
		return ledger.NewRecordedIn(req.Identity, tx), nil
	}
	fp, res, completed, at, _, err := l.read(ctx, l.Pool, req.Identity)
	if err != nil {
		return nil, l.fail("record", err)
	}
	return existing(req, fp, res, completed, at)
}

// badTarget returns the conformance target of the broken ledger kind on
// pool.
func badTarget(pool *pgxpool.Pool, db *sql.DB, kind string) conformance.Target {
	return pgxconformance.TargetFor("postgres/pgx-native/"+kind, pool, db, func(cfg conformance.LedgerConfig) (conformance.TxLedger[pgx.Tx], error) {
		r, err := newRaw(pool, cfg)
		if err != nil {
			return nil, err
		}
		switch kind {
		case "naive":
			return naive{r}, nil
		case "own-tx", "own-tx-begin":
			return ownTx{r}, nil
		case "own-tx-record":
			return ownTxRecorder{r}, nil
		case "lenient-record":
			return lenientRecorder{r}, nil
		}
		return nil, fmt.Errorf("unknown ledger %q", kind)
	})
}
