package pgxconformance_test

import (
	"context"
	"database/sql"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/opledger/opledger/conformance"
	"github.com/opledger/opledger/internal/conformancekit"
	"github.com/opledger/opledger/internal/pgdialect"
	"github.com/opledger/opledger/internal/pgxkit"
	"github.com/opledger/opledger/internal/testkit/badledgers"
	"github.com/opledger/opledger/internal/txledger"
	"github.com/opledger/opledger/ledger"
	"github.com/opledger/opledger/pgxledger"
	"github.com/opledger/opledger/pgxledger/pgxconformance"
)

// The broken ledgers are package badledgers' (written once for any
// transaction API), here on pgx.Tx with a correct Store's Lookup and
// Sweep; and two broken pipelined forms of pgx's own.

// correct gives a broken ledger the correct Store's Lookup and Sweep.
type correct struct{ l pgxconformance.Ledger }

func (c correct) Lookup(ctx context.Context, id ledger.Identity) (*ledger.Entry, error) {
	return c.l.Lookup(ctx, id)
}

func (c correct) Sweep(ctx context.Context, batch int) (int64, error) { return c.l.Sweep(ctx, batch) }

type naive struct {
	badledgers.Naive[pgx.Tx]
	correct
}

type ownTxRecorder struct {
	badledgers.OwnTxRecorder[pgx.Tx]
	correct
}

// ownTx is package badledgers' ledger that claims in a transaction of its
// own; its pipelined BeginClaim (own-tx-begin) does the same: the claim
// committed with its BEGIN, the work in a transaction after it.
type ownTx struct {
	badledgers.OwnTx[pgx.Tx]
	correct
}

func (o ownTx) BeginClaim(ctx context.Context, level sql.IsolationLevel, req ledger.ClaimRequest) (pgx.Tx, *ledger.Claim, error) {
	c, err := o.ClaimOwn(ctx, req)
	if err != nil || !c.Acquired() {
		return nil, c, err
	}
	tx, err := o.Txns.Begin(ctx, level)
	if err != nil {
		return nil, nil, err
	}
	return tx, txledger.NewAcquired(req.Identity, tx), nil
}

func (o ownTx) BeginAt(ctx context.Context, level sql.IsolationLevel) (pgx.Tx, error) {
	return o.Txns.Begin(ctx, level)
}

func (o ownTx) CompleteCommit(ctx context.Context, tx pgx.Tx, c *ledger.Claim, r ledger.Result) error {
	if err := o.Complete(ctx, tx, c, r); err != nil {
		tx.Rollback(ctx)
		return err
	}
	return tx.Commit(ctx)
}

func (o ownTx) RecordCommit(ctx context.Context, tx pgx.Tx, req ledger.ClaimRequest, r ledger.Result) (*ledger.Claim, error) {
	return nil, fmt.Errorf("own-tx-begin: claim first only")
}

// lenientRecorder is the correct Store whose pipelined RecordCommit sends
// the record as INSERT … ON CONFLICT DO NOTHING with the COMMIT: a
// conflict inserts nothing, fails nothing, and the COMMIT commits the
// duplicate's work; the entry is read afterwards and replayed.
type lenientRecorder struct {
	pgxconformance.Ledger
	b *badledgers.Base[pgx.Tx]
}

func (l lenientRecorder) BoundsLockWait() bool { return false }

func (l lenientRecorder) BeginAt(ctx context.Context, level sql.IsolationLevel) (pgx.Tx, error) {
	return l.b.Txns.Begin(ctx, level)
}

func (l lenientRecorder) RecordCommit(ctx context.Context, tx pgx.Tx, req ledger.ClaimRequest, r ledger.Result) (*ledger.Claim, error) {
	defer tx.Rollback(ctx)
	now := l.b.Cfg.Clock()
	created, expires := now.UnixMicro(), now.Add(l.b.Cfg.Retention).UnixMicro()
	resp := r.Response
	if resp == nil {
		resp = []byte{}
	}
	idb := req.Identity.ID()
	tag, err := tx.Exec(ctx, pgdialect.New().RecordQueries(l.b.Table).Insert,
		idb[:], req.Identity.Caller(), req.Identity.Method(), req.Fingerprint[:], int64(r.Code), resp, r.TypeName, created, created, expires)
	if err != nil {
		return nil, l.b.Fail("record", err)
	}
	if err := tx.Commit(ctx); err != nil {
		return nil, l.b.Fail("commit", err)
	}
	if tag.RowsAffected() == 1 {
		return txledger.NewRecorded(req.Identity, tx), nil
	}
	e, err := badledgers.Read(l.Pool.QueryRow(ctx, l.b.Q.Lookup, idb[:]))
	if err != nil {
		return nil, l.b.Fail("record", err)
	}
	return badledgers.Outcome(e, req)
}

// badTarget returns the conformance target of the broken ledger kind on
// pool.
func badTarget(pool *pgxpool.Pool, db *sql.DB, kind string) conformance.Target {
	return pgxconformance.TargetFor("postgres/pgx-native/"+kind, pool, db, func(cfg conformancekit.LedgerConfig) (conformancekit.TxLedger[pgx.Tx], error) {
		b, err := badledgers.New[pgx.Tx](pgdialect.New(), pgxkit.Driver{}, pgxconformance.Driver{Pool: pool}, conformance.LedgerConfig(cfg))
		if err != nil {
			return nil, err
		}
		s, err := pgxledger.New(ledger.WithTable(cfg.Table), ledger.WithRetention(cfg.Retention),
			ledger.WithClock(cfg.Clock), ledger.WithMaxResultSize(cfg.MaxResultSize))
		if err != nil {
			return nil, err
		}
		ok := correct{pgxconformance.Ledger{Store: s, Pool: pool}}
		switch kind {
		case "naive":
			return naive{badledgers.Naive[pgx.Tx]{Base: b}, ok}, nil
		case "own-tx", "own-tx-begin":
			return ownTx{badledgers.OwnTx[pgx.Tx]{Base: b}, ok}, nil
		case "own-tx-record":
			return ownTxRecorder{badledgers.OwnTxRecorder[pgx.Tx]{Base: b}, ok}, nil
		case "lenient-record":
			return lenientRecorder{ok.l, b}, nil
		}
		return nil, fmt.Errorf("unknown ledger %q", kind)
	})
}
