// Package conformancekit is the conformance suite's seam for a
// transaction API other than database/sql: what package
// pgxledger/pgxconformance (and the suite's own tests, with their broken
// ledgers) run the suite's cases through. A target over such an API is
// made by [TxTarget], which wraps a [Driver] of the API and the ledgers
// under test ([TxLedger]) as the suite's [API]; package conformance runs
// its cases on an API, its own database/sql one or this one, and sets
// [NewTarget] when it is initialised.
package conformancekit

import (
	"context"
	"database/sql"
	"errors"
	"time"

	"github.com/opledger/opledger/dialects"
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
// for the in-progress case; it is what conformance.Capabilities'
// BeginBounded is for database/sql.
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
// pgxledger's BeginClaim, CompleteCommit and its claim-at-commit steps). A
// target made pipelined (conformance.Target's Pipelined) runs the suite's
// units of work through it.
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

// Sweeper is implemented by database/sql ledgers that can delete expired
// entries, as *ledger.Store does. The delete-race and sweep-under-load
// cases need it and skip without it.
type Sweeper interface {
	// Sweep deletes expired entries through db, at most batch per
	// statement, and returns how many it deleted.
	Sweep(ctx context.Context, db ledger.Execer, batch int) (int64, error)
}

// LedgerConfig is conformance.LedgerConfig (which converts to it): what a
// case asks of the ledger under test.
type LedgerConfig struct {
	Table         string
	Retention     time.Duration
	Clock         func() time.Time
	MaxResultSize int
}

// The defaults of the suite's options (conformance.WithKeys,
// WithCaseTimeout), for the command that runs it too.
const (
	DefaultKeys        = 200
	DefaultCaseTimeout = 2 * time.Minute
)

// BoundedWait is the lock-wait bound of the in-progress case.
const BoundedWait = 500 * time.Millisecond

// ErrNoRecorder is what a claim-at-commit case gets from a ledger
// without Record.
var ErrNoRecorder = errors.New("the ledger has no Record method, which a claim-at-commit target needs")

// errWrongTx is what a ledger adapter gets for a transaction of another
// API: a bug in the suite.
var errWrongTx = errors.New("conformance: a transaction of another API")

// UnitTx is a transaction of the target's API: a *sql.Tx for a
// database/sql target, one of [TxTarget]'s for one over a Driver.
type UnitTx interface {
	Commit() error
	Rollback() error
}

// API is a target's transaction API, for the cases.
type API interface {
	Begin(ctx context.Context, db *sql.DB, level sql.IsolationLevel) (UnitTx, error)
	// BeginBounded is nil when the API cannot bound a transaction's waits.
	BeginBounded() func(ctx context.Context) (UnitTx, func(), error)
	Exec(ctx context.Context, tx UnitTx, query string, args ...any) error
	Count(ctx context.Context, tx UnitTx, query string) (int, error)
	SessionID(ctx context.Context, d dialects.Dialect, tx UnitTx) (int64, error)
	NewLedger(cfg LedgerConfig, db *sql.DB) (Ledger, error)
	// Pool reports the API's own pool, when it has one.
	Pool() (PoolReporter, bool)
}

// Ledger is the ledger under test on UnitTx.
type Ledger interface {
	Claim(ctx context.Context, tx UnitTx, req ledger.ClaimRequest) (*ledger.Claim, error)
	Complete(ctx context.Context, tx UnitTx, c *ledger.Claim, r ledger.Result) error
	// Record is ErrNoRecorder without one.
	Record(ctx context.Context, tx UnitTx, req ledger.ClaimRequest, r ledger.Result) (*ledger.Claim, error)
	Recorder() bool
	Lookup(ctx context.Context, id ledger.Identity) (*ledger.Entry, error)
	// Sweeper is nil without a sweep.
	Sweeper() func(ctx context.Context, batch int) (int64, error)
	Dialect() dialects.Dialect
	BoundsLockWait() bool
	// Window returns the ledger's retention and clock skew, and whether it
	// states them (txledger.Window: a *ledger.Store, or a Window method).
	Window() (retention, skew time.Duration, ok bool)
	// Pipeline is nil without the pipelined forms.
	Pipeline() Pipeline
}

// Pipeline is a ledger's Pipeliner on UnitTx.
type Pipeline interface {
	BeginClaim(ctx context.Context, level sql.IsolationLevel, req ledger.ClaimRequest) (UnitTx, *ledger.Claim, error)
	BeginAt(ctx context.Context, level sql.IsolationLevel) (UnitTx, error)
	CompleteCommit(ctx context.Context, tx UnitTx, c *ledger.Claim, r ledger.Result) error
	RecordCommit(ctx context.Context, tx UnitTx, req ledger.ClaimRequest, r ledger.Result) (*ledger.Claim, error)
}

// NewTarget returns the conformance.Target (as any) named name on db and
// d whose units of work run on api. Package conformance sets it when it is
// initialised.
var NewTarget func(name string, db *sql.DB, d dialects.Dialect, api API) any

// TxTarget returns a conformance.Target (as any: assert it) whose units
// of work run in transactions of type TX through drv, against the ledger
// newLedger builds for each case; db is a database/sql handle on the same
// database, for the suite's own statements (see [Driver]). It has the
// default capabilities of d, its in-progress case bounds its wait with
// drv's [BoundedBeginner] (or skips that part without one), and it runs
// claim first; use the Target's AtCommit and Pipelined for the other
// forms. Its NewLedger and Setup are nil.
func TxTarget[TX any](name string, db *sql.DB, d dialects.Dialect, drv Driver[TX], newLedger func(LedgerConfig) (TxLedger[TX], error)) any {
	return NewTarget(name, db, d, &driverAPI[TX]{drv: drv, mk: newLedger})
}

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

func (a *driverAPI[TX]) unwrap(tx UnitTx) (TX, error) {
	t, ok := tx.(*driverTx[TX])
	if !ok {
		var zero TX
		return zero, errWrongTx
	}
	return t.tx, nil
}

func (a *driverAPI[TX]) Begin(ctx context.Context, _ *sql.DB, level sql.IsolationLevel) (UnitTx, error) {
	tx, err := a.drv.Begin(ctx, level)
	if err != nil {
		return nil, err
	}
	return a.wrap(ctx, tx), nil
}

func (a *driverAPI[TX]) BeginBounded() func(ctx context.Context) (UnitTx, func(), error) {
	b, ok := a.drv.(BoundedBeginner[TX])
	if !ok {
		return nil
	}
	return func(ctx context.Context) (UnitTx, func(), error) {
		tx, err := b.BeginBounded(ctx, BoundedWait)
		if err != nil {
			return nil, nil, err
		}
		return a.wrap(ctx, tx), func() {}, nil
	}
}

func (a *driverAPI[TX]) Exec(ctx context.Context, tx UnitTx, query string, args ...any) error {
	t, err := a.unwrap(tx)
	if err != nil {
		return err
	}
	return a.drv.Exec(ctx, t, query, args...)
}

func (a *driverAPI[TX]) Count(ctx context.Context, tx UnitTx, query string) (int, error) {
	t, err := a.unwrap(tx)
	if err != nil {
		return 0, err
	}
	n, err := a.drv.QueryInt(ctx, t, query)
	return int(n), err
}

func (a *driverAPI[TX]) SessionID(ctx context.Context, _ dialects.Dialect, tx UnitTx) (int64, error) {
	t, err := a.unwrap(tx)
	if err != nil {
		return 0, err
	}
	return a.drv.SessionID(ctx, t)
}

func (a *driverAPI[TX]) NewLedger(cfg LedgerConfig, _ *sql.DB) (Ledger, error) {
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

func (a *driverAPI[TX]) Pool() (PoolReporter, bool) {
	p, ok := a.drv.(PoolReporter)
	return p, ok
}

// driverLedger is a TxLedger on UnitTx.
type driverLedger[TX any] struct {
	a *driverAPI[TX]
	l TxLedger[TX]
}

func (d *driverLedger[TX]) Claim(ctx context.Context, tx UnitTx, req ledger.ClaimRequest) (*ledger.Claim, error) {
	t, err := d.a.unwrap(tx)
	if err != nil {
		return nil, err
	}
	return d.l.Claim(ctx, t, req)
}

func (d *driverLedger[TX]) Complete(ctx context.Context, tx UnitTx, c *ledger.Claim, r ledger.Result) error {
	t, err := d.a.unwrap(tx)
	if err != nil {
		return err
	}
	return d.l.Complete(ctx, t, c, r)
}

func (d *driverLedger[TX]) Record(ctx context.Context, tx UnitTx, req ledger.ClaimRequest, r ledger.Result) (*ledger.Claim, error) {
	rec, ok := d.l.(txledger.TxRecorder[TX])
	if !ok {
		return nil, ErrNoRecorder
	}
	t, err := d.a.unwrap(tx)
	if err != nil {
		return nil, err
	}
	return rec.Record(ctx, t, req, r)
}

func (d *driverLedger[TX]) Recorder() bool { _, ok := d.l.(txledger.TxRecorder[TX]); return ok }

func (d *driverLedger[TX]) Lookup(ctx context.Context, id ledger.Identity) (*ledger.Entry, error) {
	return d.l.Lookup(ctx, id)
}

func (d *driverLedger[TX]) Sweeper() func(ctx context.Context, batch int) (int64, error) {
	sw, ok := d.l.(interface {
		Sweep(ctx context.Context, batch int) (int64, error)
	})
	if !ok {
		return nil
	}
	return sw.Sweep
}

func (d *driverLedger[TX]) Dialect() dialects.Dialect { return d.l.Dialect() }

func (d *driverLedger[TX]) BoundsLockWait() bool {
	return txledger.BoundsLockWait(d.l)
}

func (d *driverLedger[TX]) Window() (retention, skew time.Duration, ok bool) {
	return txledger.Window(d.l)
}

func (d *driverLedger[TX]) Pipeline() Pipeline {
	p, ok := d.l.(Pipeliner[TX])
	if !ok {
		return nil
	}
	return driverPipeline[TX]{a: d.a, p: p}
}

// driverPipeline is a Pipeliner on UnitTx.
type driverPipeline[TX any] struct {
	a *driverAPI[TX]
	p Pipeliner[TX]
}

func (d driverPipeline[TX]) BeginClaim(ctx context.Context, level sql.IsolationLevel, req ledger.ClaimRequest) (UnitTx, *ledger.Claim, error) {
	tx, c, err := d.p.BeginClaim(ctx, level, req)
	if err != nil || !c.Acquired() {
		return nil, c, err
	}
	return d.a.wrap(ctx, tx), c, nil
}

func (d driverPipeline[TX]) BeginAt(ctx context.Context, level sql.IsolationLevel) (UnitTx, error) {
	tx, err := d.p.BeginAt(ctx, level)
	if err != nil {
		return nil, err
	}
	return d.a.wrap(ctx, tx), nil
}

func (d driverPipeline[TX]) CompleteCommit(ctx context.Context, tx UnitTx, c *ledger.Claim, r ledger.Result) error {
	t, err := d.a.unwrap(tx)
	if err != nil {
		return err
	}
	return d.p.CompleteCommit(ctx, t, c, r)
}

func (d driverPipeline[TX]) RecordCommit(ctx context.Context, tx UnitTx, req ledger.ClaimRequest, r ledger.Result) (*ledger.Claim, error) {
	t, err := d.a.unwrap(tx)
	if err != nil {
		return nil, err
	}
	return d.p.RecordCommit(ctx, t, req, r)
}
