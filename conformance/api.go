package conformance

import (
	"context"
	"database/sql"
	"errors"
	"time"

	"github.com/opledger/opledger/dialects"
	"github.com/opledger/opledger/internal/conformancekit"
	"github.com/opledger/opledger/internal/dialectkit"
	"github.com/opledger/opledger/internal/txledger"
	"github.com/opledger/opledger/ledger"
)

// The suite's seam for a transaction API: unexported names for
// internal/conformancekit's, which both this package's database/sql API
// and conformancekit's driver API implement.
type (
	unitTx        = conformancekit.UnitTx
	txAPI         = conformancekit.API
	suiteLedger   = conformancekit.Ledger
	suitePipeline = conformancekit.Pipeline
)

// errWrongTxSQL is what the database/sql API gets for a transaction of
// another API: a bug in the suite.
var errWrongTxSQL = errors.New("conformance: a transaction of another API")

func init() {
	conformancekit.NewTarget = func(name string, db *sql.DB, d dialects.Dialect, api conformancekit.API) any {
		return Target{Name: name, DB: db, Dialect: d, api: api}
	}
}

// Pipelined returns a copy of tg, named tg.Name + "/pipelined", whose
// units of work claim with BEGIN and complete (or, at commit, record)
// with COMMIT through the ledger's pipelined forms: a target over pgx
// (pgxledger/pgxconformance's NewTarget), whose ledger has them.
// Transactions that a case holds open between two of its steps (a holder others wait behind, a claim rolled back
// after it) use the ledger's unpipelined calls on the same table; cases
// whose point is a statement before the claim skip claim first (snapshot,
// no-poisoning, prior-read).
func (tg Target) Pipelined() Target {
	tg.pipelined = true
	tg.Name += "/pipelined"
	return tg
}

// sqlAPI is database/sql.
type sqlAPI struct {
	tg *Target
}

func (a sqlAPI) Begin(ctx context.Context, db *sql.DB, level sql.IsolationLevel) (unitTx, error) {
	tx, err := db.BeginTx(ctx, &sql.TxOptions{Isolation: level})
	if err != nil {
		return nil, err
	}
	return tx, nil
}

func (a sqlAPI) BeginBounded() func(ctx context.Context) (unitTx, func(), error) {
	b, _ := a.tg.beginBoundedSQL()
	if b == nil {
		return nil
	}
	return func(ctx context.Context) (unitTx, func(), error) {
		tx, release, err := b(ctx, a.tg.DB)
		if err != nil {
			return nil, nil, err
		}
		return tx, release, nil
	}
}

func sqlTx(tx unitTx) (*sql.Tx, error) {
	t, ok := tx.(*sql.Tx)
	if !ok {
		return nil, errWrongTxSQL
	}
	return t, nil
}

func (sqlAPI) Exec(ctx context.Context, tx unitTx, query string, args ...any) error {
	t, err := sqlTx(tx)
	if err != nil {
		return err
	}
	_, err = t.ExecContext(ctx, query, args...)
	return err
}

func (sqlAPI) Count(ctx context.Context, tx unitTx, query string) (int, error) {
	t, err := sqlTx(tx)
	if err != nil {
		return 0, err
	}
	var n int
	err = t.QueryRowContext(ctx, query).Scan(&n)
	return n, err
}

func (sqlAPI) SessionID(ctx context.Context, d dialects.Dialect, tx unitTx) (int64, error) {
	ss, ok := d.(dialectkit.Sessions)
	if !ok {
		return 0, nil
	}
	t, err := sqlTx(tx)
	if err != nil {
		return 0, err
	}
	return ss.SessionID(ctx, t)
}

func (a sqlAPI) NewLedger(cfg conformancekit.LedgerConfig, db *sql.DB) (suiteLedger, error) {
	l, err := a.tg.NewLedger(LedgerConfig(cfg))
	if err != nil {
		return nil, err
	}
	if l == nil {
		return nil, errors.New("NewLedger returned nil")
	}
	return sqlLedger{l: l, db: db}, nil
}

func (sqlAPI) Pool() (conformancekit.PoolReporter, bool) { return nil, false }

// sqlLedger is a ledger.Ledger on unitTx.
type sqlLedger struct {
	l  ledger.Ledger
	db *sql.DB
}

func (s sqlLedger) Claim(ctx context.Context, tx unitTx, req ledger.ClaimRequest) (*ledger.Claim, error) {
	t, err := sqlTx(tx)
	if err != nil {
		return nil, err
	}
	return s.l.Claim(ctx, t, req)
}

func (s sqlLedger) Complete(ctx context.Context, tx unitTx, c *ledger.Claim, r ledger.Result) error {
	t, err := sqlTx(tx)
	if err != nil {
		return err
	}
	return s.l.Complete(ctx, t, c, r)
}

func (s sqlLedger) Record(ctx context.Context, tx unitTx, req ledger.ClaimRequest, r ledger.Result) (*ledger.Claim, error) {
	rec, ok := s.l.(txledger.Recorder)
	if !ok {
		return nil, conformancekit.ErrNoRecorder
	}
	t, err := sqlTx(tx)
	if err != nil {
		return nil, err
	}
	return rec.Record(ctx, t, req, r)
}

func (s sqlLedger) Recorder() bool { _, ok := s.l.(txledger.Recorder); return ok }

func (s sqlLedger) Lookup(ctx context.Context, id ledger.Identity) (*ledger.Entry, error) {
	return s.l.Lookup(ctx, s.db, id)
}

func (s sqlLedger) Sweeper() func(ctx context.Context, batch int) (int64, error) {
	sw, ok := s.l.(conformancekit.Sweeper)
	if !ok {
		return nil
	}
	return func(ctx context.Context, batch int) (int64, error) { return sw.Sweep(ctx, s.db, batch) }
}

func (s sqlLedger) Dialect() dialects.Dialect { return s.l.Dialect() }

func (s sqlLedger) BoundsLockWait() bool {
	return txledger.BoundsLockWait(s.l)
}

func (s sqlLedger) Window() (retention, skew time.Duration, ok bool) { return txledger.Window(s.l) }

func (sqlLedger) Pipeline() suitePipeline { return nil }
