package conformance_test

import (
	"context"
	"database/sql"
	"fmt"

	"github.com/opledger/opledger/conformance"
	"github.com/opledger/opledger/internal/testkit/badledgers"
	"github.com/opledger/opledger/internal/txledger"
	"github.com/opledger/opledger/ledger"
)

// The broken ledgers that prove the suite has teeth are package
// badledgers' (written once for any transaction API), here on
// database/sql with a correct Store's Lookup and Sweep.

// lookups gives a broken ledger the correct Store's Lookup and Sweep.
type lookups struct{ store *ledger.Store }

func (l lookups) Lookup(ctx context.Context, q ledger.Querier, id ledger.Identity) (*ledger.Entry, error) {
	return l.store.Lookup(ctx, q, id)
}

func (l lookups) Sweep(ctx context.Context, db ledger.Execer, batch int) (int64, error) {
	return l.store.Sweep(ctx, db, batch)
}

type naiveLedger struct {
	badledgers.Naive[*sql.Tx]
	lookups
}

type ownTxLedger struct {
	badledgers.OwnTx[*sql.Tx]
	lookups
}

type ownTxRecorder struct {
	badledgers.OwnTxRecorder[*sql.Tx]
	lookups
}

type birthBlindLedger struct {
	badledgers.BirthBlind[*sql.Tx]
	lookups
}

// Lookup answers ErrNotFound where the correct one refuses the key for its
// birth.
func (l birthBlindLedger) Lookup(ctx context.Context, q ledger.Querier, id ledger.Identity) (*ledger.Entry, error) {
	return badledgers.Forget(l.lookups.Lookup(ctx, q, id))
}

// badTarget returns tg with its ledger replaced.
func badTarget(tg conformance.Target, kind string) conformance.Target {
	tg.Name += "/" + kind
	d, db := tg.Dialect, tg.DB
	tg.NewLedger = func(cfg conformance.LedgerConfig) (ledger.Ledger, error) {
		b, err := badledgers.New[*sql.Tx](d, txledger.SQLDriver{}, badledgers.SQLTxns{DB: db}, cfg)
		if err != nil {
			return nil, err
		}
		s, err := ledger.New(d, ledger.WithTable(cfg.Table), ledger.WithRetention(cfg.Retention),
			ledger.WithClock(cfg.Clock), ledger.WithMaxResultSize(cfg.MaxResultSize))
		if err != nil {
			return nil, err
		}
		switch kind {
		case "naive":
			return naiveLedger{badledgers.Naive[*sql.Tx]{Base: b}, lookups{s}}, nil
		case "own-tx":
			return ownTxLedger{badledgers.OwnTx[*sql.Tx]{Base: b}, lookups{s}}, nil
		case "own-tx-record":
			return ownTxRecorder{badledgers.OwnTxRecorder[*sql.Tx]{Base: b}, lookups{s}}, nil
		case "birth-blind":
			return birthBlindLedger{badledgers.BirthBlind[*sql.Tx]{Base: b}, lookups{s}}, nil
		}
		return nil, fmt.Errorf("unknown ledger %q", kind)
	}
	return tg
}
