package conformance

import (
	"context"
	"database/sql"
	"errors"
	"time"

	"github.com/opledger/opledger/dialects"
	"github.com/opledger/opledger/internal/dialectkit"
	"github.com/opledger/opledger/internal/txledger"
	"github.com/opledger/opledger/ledger"
)

// Driver is a transaction API other than database/sql, of type TX, for
// the suite's units of work (River's riverdriver.Driver[TTx] is the
// model): what begins and ends the transactions the ledger under test
// claims in, and runs the suite's own statements in them. Package
// pgxledger/pgxconformance has the one for pgx. Everything else the suite
// does (scratch tables, counts, lookups of what committed, sweeps, the
// database's view of lock waits, killing a session) runs on the target's
// *sql.DB, a database/sql handle on the same database (for pgx:
// stdlib.OpenDBFromPool on the same pool). A Driver must be safe for
// concurrent use.
type Driver[TX any] interface {
	// Begin begins a transaction at level (sql.LevelDefault: the
	// database's default).
	Begin(ctx context.Context, level sql.IsolationLevel) (TX, error)
	// Commit commits tx.
	Commit(ctx context.Context, tx TX) error
	// Rollback rolls tx back; once tx has ended it returns an error and
	// does nothing else.
	Rollback(ctx context.Context, tx TX) error
	// Exec runs query, written in the dialect's SQL, in tx.
	Exec(ctx context.Context, tx TX, query string, args ...any) error
	// QueryInt runs query in tx and returns the integer in its one row
	// and column (the suite reads COUNT(*)).
	QueryInt(ctx context.Context, tx TX, query string, args ...any) (int64, error)
	// SessionID returns the database's id of the session tx runs on (see
	// dialectkit.Sessions), for the cases that wait on the database's view
	// of lock waits or kill a holder's session.
	SessionID(ctx context.Context, tx TX) (int64, error)
}

// BoundedBeginner is implemented by a [Driver] that can begin a
// transaction whose lock waits end after wait with an error the ledger
// reports as ledger.ErrInProgress (PostgreSQL: SET LOCAL lock_timeout),
// for the in-progress case; it is what Capabilities.BeginBounded is for
// database/sql.
type BoundedBeginner[TX any] interface {
	BeginBounded(ctx context.Context, wait time.Duration) (TX, error)
}

// TxLedger is the ledger under test of a target over a [Driver]:
// txledger.TxLedger on TX, and a Lookup of committed state (through the
// ledger's own reads, on the same database). It may also implement
// txledger.TxRecorder[TX] (claim at commit), txledger.LockWaitBounder,
// [Pipeliner] (the pipelined forms) and Sweep(ctx, batch) (int64, error)
// (the sweep cases).
type TxLedger[TX any] interface {
	txledger.TxLedger[TX]
	// Lookup reads the committed entry for id outside any of the suite's
	// transactions.
	Lookup(ctx context.Context, id ledger.Identity) (*ledger.Entry, error)
}

// Pipeliner is implemented by a [TxLedger] whose API sends the claim with
// BEGIN, and the completion or the record with COMMIT (package
// pgxledger's BeginClaim, CompleteCommit and RecordCommit). A target made
// with [Target.Pipelined] runs the suite's units of work through it.
type Pipeliner[TX any] interface {
	// BeginClaim begins a transaction at level and claims req in it; on
	// any outcome but Acquired nothing is left open.
	BeginClaim(ctx context.Context, level sql.IsolationLevel, req ledger.ClaimRequest) (TX, *ledger.Claim, error)
	// BeginAt begins a transaction at level that RecordCommit and
	// CompleteCommit can end with the statement that ends it.
	BeginAt(ctx context.Context, level sql.IsolationLevel) (TX, error)
	// CompleteCommit completes c with r in tx and commits; it ends tx in
	// every case.
	CompleteCommit(ctx context.Context, tx TX, c *ledger.Claim, r ledger.Result) error
	// RecordCommit records req completed with r in tx and commits, or, on
	// a replay, rolls the work back; it ends tx in every case.
	RecordCommit(ctx context.Context, tx TX, req ledger.ClaimRequest, r ledger.Result) (*ledger.Claim, error)
}

// TxTarget returns a Target whose units of work run in transactions of
// type TX through drv, against the ledger newLedger builds for each case;
// db is a database/sql handle on the same database, for the suite's own
// statements (see [Driver]). It has the default capabilities of d, its
// in-progress case bounds its wait with drv's [BoundedBeginner] (or skips
// that part without one), and it runs claim first; use [Target.AtCommit]
// and [Target.Pipelined] for the other forms. Its NewLedger and Setup are
// nil.
func TxTarget[TX any](name string, db *sql.DB, d dialects.Dialect, drv Driver[TX], newLedger func(LedgerConfig) (TxLedger[TX], error)) Target {
	return Target{Name: name, DB: db, Dialect: d, api: &driverAPI[TX]{drv: drv, mk: newLedger}}
}

// Pipelined returns a copy of tg, named tg.Name + "/pipelined", whose
// units of work claim with BEGIN and complete (or, at commit, record)
// with COMMIT through the ledger's [Pipeliner]: a target of [TxTarget]
// whose ledger implements it. Transactions that a case holds open between
// two of its steps (a holder others wait behind, a claim rolled back
// after it) use the ledger's unpipelined calls on the same table; cases
// whose point is a statement before the claim skip claim first (snapshot,
// no-poisoning, prior-read).
func (tg Target) Pipelined() Target {
	tg.pipelined = true
	tg.Name += "/pipelined"
	return tg
}

// PoolReporter is implemented by a [Driver] whose transactions take the
// connections of a pool other than the target's *sql.DB (a pgx pool): the
// suite lowers its concurrency to fit the pool's size and checks, after
// each case, that no connection is left in use, as it does on the
// *sql.DB.
type PoolReporter interface {
	// PoolStats returns how many of the pool's connections are in use and
	// how many it allows (0: no limit).
	PoolStats() (inUse, max int)
}

// unitTx is a transaction of the target's API: a *sql.Tx for a
// database/sql target, a *driverTx for one over a Driver.
type unitTx interface {
	Commit() error
	Rollback() error
}

// txAPI is a target's transaction API, for the cases.
type txAPI interface {
	begin(ctx context.Context, db *sql.DB, level sql.IsolationLevel) (unitTx, error)
	// beginBounded is nil when the API cannot bound a transaction's waits.
	beginBounded() func(ctx context.Context) (unitTx, func(), error)
	exec(ctx context.Context, tx unitTx, query string, args ...any) error
	count(ctx context.Context, tx unitTx, query string) (int, error)
	sessionID(ctx context.Context, d dialects.Dialect, tx unitTx) (int64, error)
	newLedger(cfg LedgerConfig, db *sql.DB) (suiteLedger, error)
	// pool reports the API's own pool, when it has one.
	pool() (PoolReporter, bool)
}

// suiteLedger is the ledger under test on unitTx.
type suiteLedger interface {
	claim(ctx context.Context, tx unitTx, req ledger.ClaimRequest) (*ledger.Claim, error)
	complete(ctx context.Context, tx unitTx, c *ledger.Claim, r ledger.Result) error
	// record is errNoRecorder without one.
	record(ctx context.Context, tx unitTx, req ledger.ClaimRequest, r ledger.Result) (*ledger.Claim, error)
	recorder() bool
	lookup(ctx context.Context, id ledger.Identity) (*ledger.Entry, error)
	// sweep is nil without one.
	sweep() func(ctx context.Context, batch int) (int64, error)
	dialect() dialects.Dialect
	boundsLockWait() bool
	// pipeline is nil without the pipelined forms.
	pipeline() suitePipeline
}

// suitePipeline is a ledger's Pipeliner on unitTx.
type suitePipeline interface {
	beginClaim(ctx context.Context, level sql.IsolationLevel, req ledger.ClaimRequest) (unitTx, *ledger.Claim, error)
	beginAt(ctx context.Context, level sql.IsolationLevel) (unitTx, error)
	completeCommit(ctx context.Context, tx unitTx, c *ledger.Claim, r ledger.Result) error
	recordCommit(ctx context.Context, tx unitTx, req ledger.ClaimRequest, r ledger.Result) (*ledger.Claim, error)
}

// errWrongTx is what a ledger adapter gets for a transaction of another
// API: a bug in the suite.
var errWrongTx = errors.New("conformance: a transaction of another API")

// sqlAPI is database/sql.
type sqlAPI struct {
	tg *Target
}

func (a sqlAPI) begin(ctx context.Context, db *sql.DB, level sql.IsolationLevel) (unitTx, error) {
	tx, err := db.BeginTx(ctx, &sql.TxOptions{Isolation: level})
	if err != nil {
		return nil, err
	}
	return tx, nil
}

func (a sqlAPI) beginBounded() func(ctx context.Context) (unitTx, func(), error) {
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
		return nil, errWrongTx
	}
	return t, nil
}

func (sqlAPI) exec(ctx context.Context, tx unitTx, query string, args ...any) error {
	t, err := sqlTx(tx)
	if err != nil {
		return err
	}
	_, err = t.ExecContext(ctx, query, args...)
	return err
}

func (sqlAPI) count(ctx context.Context, tx unitTx, query string) (int, error) {
	t, err := sqlTx(tx)
	if err != nil {
		return 0, err
	}
	var n int
	err = t.QueryRowContext(ctx, query).Scan(&n)
	return n, err
}

func (sqlAPI) sessionID(ctx context.Context, d dialects.Dialect, tx unitTx) (int64, error) {
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

func (a sqlAPI) newLedger(cfg LedgerConfig, db *sql.DB) (suiteLedger, error) {
	l, err := a.tg.NewLedger(cfg)
	if err != nil {
		return nil, err
	}
	if l == nil {
		return nil, errors.New("NewLedger returned nil")
	}
	return sqlLedger{l: l, db: db}, nil
}

func (sqlAPI) pool() (PoolReporter, bool) { return nil, false }

// sqlLedger is a ledger.Ledger on unitTx.
type sqlLedger struct {
	l  ledger.Ledger
	db *sql.DB
}

func (s sqlLedger) claim(ctx context.Context, tx unitTx, req ledger.ClaimRequest) (*ledger.Claim, error) {
	t, err := sqlTx(tx)
	if err != nil {
		return nil, err
	}
	return s.l.Claim(ctx, t, req)
}

func (s sqlLedger) complete(ctx context.Context, tx unitTx, c *ledger.Claim, r ledger.Result) error {
	t, err := sqlTx(tx)
	if err != nil {
		return err
	}
	return s.l.Complete(ctx, t, c, r)
}

func (s sqlLedger) record(ctx context.Context, tx unitTx, req ledger.ClaimRequest, r ledger.Result) (*ledger.Claim, error) {
	rec, ok := s.l.(txledger.Recorder)
	if !ok {
		return nil, errNoRecorder
	}
	t, err := sqlTx(tx)
	if err != nil {
		return nil, err
	}
	return rec.Record(ctx, t, req, r)
}

func (s sqlLedger) recorder() bool { _, ok := s.l.(txledger.Recorder); return ok }

func (s sqlLedger) lookup(ctx context.Context, id ledger.Identity) (*ledger.Entry, error) {
	return s.l.Lookup(ctx, s.db, id)
}

func (s sqlLedger) sweep() func(ctx context.Context, batch int) (int64, error) {
	sw, ok := s.l.(Sweeper)
	if !ok {
		return nil
	}
	return func(ctx context.Context, batch int) (int64, error) { return sw.Sweep(ctx, s.db, batch) }
}

func (s sqlLedger) dialect() dialects.Dialect { return s.l.Dialect() }

func (s sqlLedger) boundsLockWait() bool {
	return txledger.BoundsLockWait(s.l)
}

func (sqlLedger) pipeline() suitePipeline { return nil }

// driverAPI is a Driver's API.
type driverAPI[TX any] struct {
	drv Driver[TX]
	mk  func(LedgerConfig) (TxLedger[TX], error)
}

// driverTx is a transaction of a Driver, with the context it began in.
type driverTx[TX any] struct {
	ctx context.Context
	tx  TX
	drv Driver[TX]
}

func (t *driverTx[TX]) Commit() error   { return t.drv.Commit(t.ctx, t.tx) }
func (t *driverTx[TX]) Rollback() error { return t.drv.Rollback(t.ctx, t.tx) }

func (a *driverAPI[TX]) wrap(ctx context.Context, tx TX) *driverTx[TX] {
	return &driverTx[TX]{ctx: ctx, tx: tx, drv: a.drv}
}

func (a *driverAPI[TX]) unwrap(tx unitTx) (TX, error) {
	t, ok := tx.(*driverTx[TX])
	if !ok {
		var zero TX
		return zero, errWrongTx
	}
	return t.tx, nil
}

func (a *driverAPI[TX]) begin(ctx context.Context, _ *sql.DB, level sql.IsolationLevel) (unitTx, error) {
	tx, err := a.drv.Begin(ctx, level)
	if err != nil {
		return nil, err
	}
	return a.wrap(ctx, tx), nil
}

func (a *driverAPI[TX]) beginBounded() func(ctx context.Context) (unitTx, func(), error) {
	b, ok := a.drv.(BoundedBeginner[TX])
	if !ok {
		return nil
	}
	return func(ctx context.Context) (unitTx, func(), error) {
		tx, err := b.BeginBounded(ctx, boundedWait)
		if err != nil {
			return nil, nil, err
		}
		return a.wrap(ctx, tx), func() {}, nil
	}
}

func (a *driverAPI[TX]) exec(ctx context.Context, tx unitTx, query string, args ...any) error {
	t, err := a.unwrap(tx)
	if err != nil {
		return err
	}
	return a.drv.Exec(ctx, t, query, args...)
}

func (a *driverAPI[TX]) count(ctx context.Context, tx unitTx, query string) (int, error) {
	t, err := a.unwrap(tx)
	if err != nil {
		return 0, err
	}
	n, err := a.drv.QueryInt(ctx, t, query)
	return int(n), err
}

func (a *driverAPI[TX]) sessionID(ctx context.Context, _ dialects.Dialect, tx unitTx) (int64, error) {
	t, err := a.unwrap(tx)
	if err != nil {
		return 0, err
	}
	return a.drv.SessionID(ctx, t)
}

func (a *driverAPI[TX]) newLedger(cfg LedgerConfig, _ *sql.DB) (suiteLedger, error) {
	if a.mk == nil {
		return nil, errors.New("the target has no NewLedger")
	}
	l, err := a.mk(cfg)
	if err != nil {
		return nil, err
	}
	if any(l) == nil {
		return nil, errors.New("NewLedger returned nil")
	}
	return &driverLedger[TX]{a: a, l: l}, nil
}

func (a *driverAPI[TX]) pool() (PoolReporter, bool) {
	p, ok := a.drv.(PoolReporter)
	return p, ok
}

// driverLedger is a TxLedger on unitTx.
type driverLedger[TX any] struct {
	a *driverAPI[TX]
	l TxLedger[TX]
}

func (d *driverLedger[TX]) claim(ctx context.Context, tx unitTx, req ledger.ClaimRequest) (*ledger.Claim, error) {
	t, err := d.a.unwrap(tx)
	if err != nil {
		return nil, err
	}
	return d.l.Claim(ctx, t, req)
}

func (d *driverLedger[TX]) complete(ctx context.Context, tx unitTx, c *ledger.Claim, r ledger.Result) error {
	t, err := d.a.unwrap(tx)
	if err != nil {
		return err
	}
	return d.l.Complete(ctx, t, c, r)
}

func (d *driverLedger[TX]) record(ctx context.Context, tx unitTx, req ledger.ClaimRequest, r ledger.Result) (*ledger.Claim, error) {
	rec, ok := d.l.(txledger.TxRecorder[TX])
	if !ok {
		return nil, errNoRecorder
	}
	t, err := d.a.unwrap(tx)
	if err != nil {
		return nil, err
	}
	return rec.Record(ctx, t, req, r)
}

func (d *driverLedger[TX]) recorder() bool { _, ok := d.l.(txledger.TxRecorder[TX]); return ok }

func (d *driverLedger[TX]) lookup(ctx context.Context, id ledger.Identity) (*ledger.Entry, error) {
	return d.l.Lookup(ctx, id)
}

func (d *driverLedger[TX]) sweep() func(ctx context.Context, batch int) (int64, error) {
	sw, ok := d.l.(interface {
		Sweep(ctx context.Context, batch int) (int64, error)
	})
	if !ok {
		return nil
	}
	return sw.Sweep
}

func (d *driverLedger[TX]) dialect() dialects.Dialect { return d.l.Dialect() }

func (d *driverLedger[TX]) boundsLockWait() bool {
	return txledger.BoundsLockWait(d.l)
}

func (d *driverLedger[TX]) pipeline() suitePipeline {
	p, ok := d.l.(Pipeliner[TX])
	if !ok {
		return nil
	}
	return driverPipeline[TX]{a: d.a, p: p}
}

// driverPipeline is a Pipeliner on unitTx.
type driverPipeline[TX any] struct {
	a *driverAPI[TX]
	p Pipeliner[TX]
}

func (d driverPipeline[TX]) beginClaim(ctx context.Context, level sql.IsolationLevel, req ledger.ClaimRequest) (unitTx, *ledger.Claim, error) {
	tx, c, err := d.p.BeginClaim(ctx, level, req)
	if err != nil || !c.Acquired() {
		return nil, c, err
	}
	return d.a.wrap(ctx, tx), c, nil
}

func (d driverPipeline[TX]) beginAt(ctx context.Context, level sql.IsolationLevel) (unitTx, error) {
	tx, err := d.p.BeginAt(ctx, level)
	if err != nil {
		return nil, err
	}
	return d.a.wrap(ctx, tx), nil
}

func (d driverPipeline[TX]) completeCommit(ctx context.Context, tx unitTx, c *ledger.Claim, r ledger.Result) error {
	t, err := d.a.unwrap(tx)
	if err != nil {
		return err
	}
	return d.p.CompleteCommit(ctx, t, c, r)
}

func (d driverPipeline[TX]) recordCommit(ctx context.Context, tx unitTx, req ledger.ClaimRequest, r ledger.Result) (*ledger.Claim, error) {
	t, err := d.a.unwrap(tx)
	if err != nil {
		return nil, err
	}
	return d.p.RecordCommit(ctx, t, req, r)
}
