// Package txledger is the kit's ledger over any transaction API: package
// ledger's store, generic over the transaction type, for the kit's other
// APIs (package pgxledger's Store over pgx.Tx, the outbox's enqueue, the
// conformance suite's test ledgers). [Store] is it; create one with [New].
// ledger.Store is the same store over *sql.Tx. The package also holds the
// ledger's ports that only the kit names: the interfaces of a ledger over
// any transaction API ([TxLedger], [TxRecorder]) and the optional
// interfaces the kit asks a ledger.Ledger for ([Recorder],
// [LockWaitBounder], [ResultSizer]).
package txledger

import (
	"context"
	"database/sql"
	"time"

	"github.com/opledger/opledger/dialects"
	"github.com/opledger/opledger/internal/dialectkit"
	"github.com/opledger/opledger/internal/ledgerkit"
	"github.com/opledger/opledger/ledger"
)

// Row, Driver, Pipeline and SQLDriver are ledgerkit's: the seams of a
// transaction API.
type (
	Row              = ledgerkit.Row
	Driver[TX any]   = ledgerkit.Driver[TX]
	Pipeline[TX any] = ledgerkit.Pipeline[TX]
	SQLDriver        = ledgerkit.SQLDriver
)

// TxLedger is the ledger's port for a transaction API of type TX: what
// claims and completes inside the caller's transaction. ledger.Ledger is
// it for database/sql (*sql.Tx), with Lookup; a [Store] implements it for
// any TX, and package pgxledger's Store for pgx.Tx. The conformance suite
// proves an implementation over any TX it has a driver for.
type TxLedger[TX any] interface {
	// Claim claims req's identity inside tx. See ledger.Store's Claim.
	Claim(ctx context.Context, tx TX, req ledger.ClaimRequest) (*ledger.Claim, error)
	// Complete records the result of an acquired claim in the same tx.
	// See ledger.Store's Complete.
	Complete(ctx context.Context, tx TX, c *ledger.Claim, r ledger.Result) error
	// Dialect returns the dialect of the ledger's database.
	Dialect() dialects.Dialect
}

// TxRecorder is [Recorder] for a transaction API of type TX: claim at
// commit.
type TxRecorder[TX any] interface {
	// Record inserts req's identity already completed with r, inside tx.
	// See ledger.Store's Record.
	Record(ctx context.Context, tx TX, req ledger.ClaimRequest, r ledger.Result) (*ledger.Claim, error)
}

// Recorder is implemented by ledgers that can record a completed entry
// first, as the last statement before COMMIT: claim at commit, where the
// work runs before the ledger is touched. ledger.Store implements it; so
// may any ledger.Ledger (the conformance suite proves it in its
// claim-at-commit mode). txmiddleware.WithClaimAtCommit needs it.
type Recorder = TxRecorder[*sql.Tx]

// LockWaitBounder is implemented by a ledger of a user's own that can
// honour
// ledger.ClaimRequest.LockWait. txmiddleware asks it: when BoundsLockWait
// reports true, a runner with a lock-wait bound begins a plain
// transaction and passes the bound in the ClaimRequest, instead of
// beginning a bounded transaction (dialects.LockWaiter), which costs
// statements of its own. Ask [BoundsLockWait], which knows ledger.Store's
// answer too.
type LockWaitBounder interface {
	// BoundsLockWait reports whether Claim honours ClaimRequest.LockWait.
	BoundsLockWait() bool
}

// ResultSizer is implemented by a ledger of a user's own that bounds the
// results it
// stores: a Result.Response longer than MaxResultSize is refused with
// ledger.ErrInvalid. Transports ask it at construction, so that a
// response limit of theirs that the ledger could not store fails there,
// not on the first large response. Ask [MaxResultSize], which knows
// ledger.Store's limit too.
type ResultSizer interface {
	// MaxResultSize returns the longest Result.Response stored, in bytes.
	MaxResultSize() int
}

var (
	_ TxLedger[*sql.Tx] = ledger.Ledger(nil)
	_ Recorder          = (*ledger.Store)(nil)
	_ TxLedger[any]     = (*Store[any])(nil)
	_ TxRecorder[any]   = (*Store[any])(nil)
	_ LockWaitBounder   = (*Store[any])(nil)
	_ ResultSizer       = (*Store[any])(nil)
)

// hooks is what package ledger sets ledgerkit.Ledger to.
type hooks interface {
	NewStore(d dialects.Dialect, drv ledgerkit.Driver[any], opts []ledger.Option) (any, error)
	Acquired(id ledger.Identity, tx any) *ledger.Claim
	Recorded(id ledger.Identity, tx any) *ledger.Claim
	ClaimTx(c *ledger.Claim) any
	DBError(d dialects.Dialect, op string, err error) *ledger.DBError
	CheckMethod(method string) error
	TookOver(c *ledger.Claim) bool
	KeyHash(id ledger.Identity) [32]byte
	InputError(err error) (field, reason string, ok bool)
	BoundsLockWait(s *ledger.Store) bool
	MaxResultSize(s *ledger.Store) int
	Window(s *ledger.Store) (retention, skew time.Duration)
}

// the is package ledger's hooks: set when package ledger was initialised,
// which is before this package is.
var the = ledgerkit.Ledger.(hooks)

// core is the ledger's store over any transaction type (its txStore[any]).
type core interface {
	Dialect() dialects.Dialect
	Table() string
	MaxResultSize() int
	SweepLockWait() time.Duration
	Window() (retention, skew time.Duration)
	BoundsLockWait() bool
	Pipelines() bool
	Claim(ctx context.Context, tx any, req ledger.ClaimRequest) (*ledger.Claim, error)
	Complete(ctx context.Context, tx any, c *ledger.Claim, r ledger.Result) error
	Record(ctx context.Context, tx any, req ledger.ClaimRequest, r ledger.Result) (*ledger.Claim, error)
	BeginClaim(ctx context.Context, p ledgerkit.Pipeline[any], req ledger.ClaimRequest) (any, *ledger.Claim, error)
	CompleteCommit(ctx context.Context, p ledgerkit.Pipeline[any], tx any, c *ledger.Claim, r ledger.Result) error
	RecordCommit(ctx context.Context, p ledgerkit.Pipeline[any], tx any, req ledger.ClaimRequest, r ledger.Result) (*ledger.Claim, error)
	LookupWith(ctx context.Context, queryRow func(ctx context.Context, query string, args ...any) ledgerkit.Row, id ledger.Identity) (*ledger.Entry, error)
	SweepWith(ctx context.Context, exec func(ctx context.Context, query string, args ...any) (int64, error), queryRow func(ctx context.Context, query string, args ...any) ledgerkit.Row, parts dialectkit.DB, batch int) (int64, error)
}

// Store is the kit's ledger over transactions of type TX, whose
// statements run through a [Driver]: ledger.Store is it for database/sql,
// package pgxledger's Store for pgx.Tx. Its Claim, Complete and Record
// behave exactly as ledger.Store's (one implementation serves every API);
// it adds the pipelined forms [Store.BeginClaim], [Store.CompleteCommit]
// and [Store.RecordCommit] for an API that can send statements together
// (see [Pipeline]). It holds no connection and is safe for concurrent use.
type Store[TX any] struct{ c core }

// New returns a ledger for dialect d whose statements run through drv in
// transactions of type TX. Bad options are an error matching
// ledger.ErrInvalid and ledger.ErrInvalidConfig (see [InputError]).
func New[TX any](d dialects.Dialect, drv Driver[TX], opts ...ledger.Option) (*Store[TX], error) {
	var ad ledgerkit.Driver[any]
	if drv != nil {
		ad = anyDriver[TX]{drv}
	}
	c, err := the.NewStore(d, ad, opts)
	if err != nil {
		return nil, err
	}
	return &Store[TX]{c: c.(core)}, nil
}

// anyDriver is a Driver[TX] as the Driver[any] the store runs on.
type anyDriver[TX any] struct{ d Driver[TX] }

func (a anyDriver[TX]) Exec(ctx context.Context, tx any, query string, args ...any) (int64, error) {
	t, _ := tx.(TX)
	return a.d.Exec(ctx, t, query, args...)
}

func (a anyDriver[TX]) QueryRow(ctx context.Context, tx any, query string, args ...any) Row {
	t, _ := tx.(TX)
	return a.d.QueryRow(ctx, t, query, args...)
}

// Dialect returns the store's dialect.
func (s *Store[TX]) Dialect() dialects.Dialect { return s.c.Dialect() }

// Table returns the store's table name.
func (s *Store[TX]) Table() string { return s.c.Table() }

// MaxResultSize returns the longest Result.Response the store accepts, in
// bytes (see ledger.WithMaxResultSize).
func (s *Store[TX]) MaxResultSize() int { return s.c.MaxResultSize() }

// SweepLockWait returns the bound ledger.WithSweepLockWait set on each of
// a sweep's statements, or 0 without it. An API's sweep built on
// [Store.SweepWith] bounds its statements to it (package pgxledger's
// Sweep does).
func (s *Store[TX]) SweepLockWait() time.Duration { return s.c.SweepLockWait() }

// BoundsLockWait reports whether Claim and Record honour
// ClaimRequest.LockWait (see ledger.Store's BoundsLockWait).
func (s *Store[TX]) BoundsLockWait() bool { return s.c.BoundsLockWait() }

// Window returns the store's retention and clock skew
// (ledger.WithRetention, ledger.WithClockSkew): a key born before the
// retention minus the skew is refused as expired.
func (s *Store[TX]) Window() (retention, skew time.Duration) { return s.c.Window() }

// Pipelines reports whether BeginClaim, CompleteCommit and RecordCommit
// send their statements with BEGIN and COMMIT (the store's dialect
// implements dialectkit.Pipeliner); without it they run the statements
// one by one, with the same outcomes.
func (s *Store[TX]) Pipelines() bool { return s.c.Pipelines() }

// Claim claims req's identity inside tx, as ledger.Store's Claim does.
func (s *Store[TX]) Claim(ctx context.Context, tx TX, req ledger.ClaimRequest) (*ledger.Claim, error) {
	return s.c.Claim(ctx, tx, req)
}

// Complete records r as the result of c in tx, as ledger.Store's Complete
// does.
func (s *Store[TX]) Complete(ctx context.Context, tx TX, c *ledger.Claim, r ledger.Result) error {
	return s.c.Complete(ctx, tx, c, r)
}

// Record inserts req's identity already completed with r in tx, as
// ledger.Store's Record does.
func (s *Store[TX]) Record(ctx context.Context, tx TX, req ledger.ClaimRequest, r ledger.Result) (*ledger.Claim, error) {
	return s.c.Record(ctx, tx, req, r)
}

// BeginClaim begins a transaction through p and claims req.Identity in it,
// the claim sent with BEGIN in one round trip: the first step of a
// claim-first unit whose transaction the ledger begins. Its outcomes are
// those of Claim:
//   - Acquired: tx is open and owns the identity; run the work in it, then
//     [Store.CompleteCommit] (or Complete, and commit);
//   - Replay (with the stored result), ErrKeyReused or ErrIncomplete: the
//     entry was read back and the transaction rolled back, in a second
//     round trip; tx is the zero TX;
//   - any error: nothing is left open.
//
// The claim is the plain insert (dialects.Queries.Insert, bounded by
// req.LockWait as for Claim). When the entry it conflicted with is gone or
// expired by the time it is read, BeginClaim begins again without
// pipelining and claims as Claim does, taking the expired entry over. p
// works on transactions of type TX, passed to it as any.
func (s *Store[TX]) BeginClaim(ctx context.Context, p Pipeline[any], req ledger.ClaimRequest) (TX, *ledger.Claim, error) {
	tx, c, err := s.c.BeginClaim(ctx, p, req)
	t, _ := tx.(TX)
	return t, c, err
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
func (s *Store[TX]) CompleteCommit(ctx context.Context, p Pipeline[any], tx TX, c *ledger.Claim, r ledger.Result) error {
	return s.c.CompleteCommit(ctx, p, tx, c, r)
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
//   - COMMIT's failure, as p reports it (see [Store.CompleteCommit]).
//
// A positive req.LockWait bounds the record's lock waits inside its
// statement, as for Record.
func (s *Store[TX]) RecordCommit(ctx context.Context, p Pipeline[any], tx TX, req ledger.ClaimRequest, r ledger.Result) (*ledger.Claim, error) {
	return s.c.RecordCommit(ctx, p, tx, req, r)
}

// LookupWith reads the committed entry for id with queryRow, a function
// that runs a query outside the caller's transactions (on a pool, a
// connection or a read-only transaction of the store's API), without
// claiming or locking it: what ledger.Store's Lookup does through its
// Querier. Package pgxledger's Lookup is built on it.
func (s *Store[TX]) LookupWith(ctx context.Context, queryRow func(ctx context.Context, query string, args ...any) Row, id ledger.Identity) (*ledger.Entry, error) {
	return s.c.LookupWith(ctx, queryRow, id)
}

// SweepWith deletes expired entries with exec, a function that runs a
// statement outside the caller's transactions and returns the rows it
// deleted, at most batch per statement, until a batch comes back short,
// and returns how many it deleted: what ledger.Store's Sweep does on a
// dialect whose Sweep statement skips held entries (PostgreSQL's SKIP
// LOCKED). Package pgxledger's Sweep is built on it. exec bounds each
// statement's lock waits to [Store.SweepLockWait] when that is set. When
// queryRow is not nil, the entries left because other transactions held
// them are reported as ledger.Store's Sweep reports them: a
// *ledger.HeldError, matching ledger.ErrInProgress.
//
// When parts is not nil (a *sql.DB or a *sql.Conn on the same database,
// which runs statements outside any transaction) and the dialect
// implements dialectkit.Partitioner, a table partitioned by born_at is
// swept as ledger.Store's Sweep sweeps it, by the same code: its buckets
// are dropped and created through parts, and exec and queryRow delete
// and count only in the partitions of keys without a known birth or a
// bucket. With parts nil, or on a table not partitioned that way, exec
// deletes in the whole table.
func (s *Store[TX]) SweepWith(ctx context.Context, exec func(ctx context.Context, query string, args ...any) (int64, error), queryRow func(ctx context.Context, query string, args ...any) Row, parts dialectkit.DB, batch int) (int64, error) {
	return s.c.SweepWith(ctx, exec, queryRow, parts, batch)
}

// NewAcquired returns the claim of a ledger over transactions of type TX
// whose Claim acquired id in tx: ledger.NewAcquired for any transaction
// API (compare [ClaimTx]).
func NewAcquired[TX any](id ledger.Identity, tx TX) *ledger.Claim { return the.Acquired(id, tx) }

// NewRecorded returns the outcome of a [TxRecorder] whose Record inserted
// id's completed entry in tx: ledger.NewRecorded for any transaction API.
func NewRecorded[TX any](id ledger.Identity, tx TX) *ledger.Claim { return the.Recorded(id, tx) }

// ClaimTx returns the transaction of type TX that acquired (or recorded)
// c, and whether it has one of that type: ledger.Claim's Tx for any
// transaction API.
func ClaimTx[TX any](c *ledger.Claim) (TX, bool) {
	tx, ok := the.ClaimTx(c).(TX)
	return tx, ok
}

// NewDBError is the *ledger.DBError of op's failure err on a database of
// dialect d: err classified by d and wrapped in d's explanation, when it
// has one (dialectkit.Explain). Every DBError of the kit is made by it, so
// none misses the explanation. A nil d classifies nothing and explains
// nothing.
func NewDBError(d dialects.Dialect, op string, err error) *ledger.DBError {
	return the.DBError(d, op, err)
}

// AnyPipeline returns p, a Pipeline over transactions of type TX, as the
// Pipeline[any] that the pipelined forms of [Store] take (the store runs
// on transactions of any type). It costs what converting p to an
// interface costs, no more.
func AnyPipeline[TX any, P Pipeline[TX]](p P) Pipeline[any] { return anyPipeline[TX, P]{p} }

type anyPipeline[TX any, P Pipeline[TX]] struct{ p P }

func (a anyPipeline[TX, P]) Begin(ctx context.Context) (any, error) {
	tx, err := a.p.Begin(ctx)
	return tx, err
}

func (a anyPipeline[TX, P]) BeginExec(ctx context.Context, query string, args ...any) (any, int64, error) {
	tx, n, err := a.p.BeginExec(ctx, query, args...)
	return tx, n, err
}

func (a anyPipeline[TX, P]) ExecCommit(ctx context.Context, tx any, query string, args ...any) (execErr, commitErr error) {
	t, _ := tx.(TX)
	return a.p.ExecCommit(ctx, t, query, args...)
}

func (a anyPipeline[TX, P]) QueryRollback(ctx context.Context, tx any, query string, args ...any) Row {
	t, _ := tx.(TX)
	return a.p.QueryRollback(ctx, t, query, args...)
}

func (a anyPipeline[TX, P]) RollbackQuery(ctx context.Context, tx any, query string, args ...any) Row {
	t, _ := tx.(TX)
	return a.p.RollbackQuery(ctx, t, query, args...)
}

func (a anyPipeline[TX, P]) Owns(tx any) bool {
	t, ok := tx.(TX)
	return ok && a.p.Owns(t)
}

func (a anyPipeline[TX, P]) Commit(ctx context.Context, tx any) error {
	t, _ := tx.(TX)
	return a.p.Commit(ctx, t)
}

func (a anyPipeline[TX, P]) Rollback(ctx context.Context, tx any) error {
	t, _ := tx.(TX)
	return a.p.Rollback(ctx, t)
}

func (a anyPipeline[TX, P]) Exec(ctx context.Context, query string, args ...any) (int64, error) {
	return a.p.Exec(ctx, query, args...)
}

// CheckMethod reports whether method is one of the two forms of an
// identity's method (what ledger.NewIdentity accepts), at most 512 bytes
// in all:
//
//   - a full gRPC method name, "/package.Service/Method": a leading slash,
//     a service name of dotted identifiers, a slash and a method
//     identifier (what grpcint stores);
//   - an HTTP route, "POST /orders/{id}": an HTTP method in capitals
//     (A-Z, then A-Z, 0-9, "-" or "_", at most 32 bytes), one space, and
//     a route pattern that starts with "/" and holds only visible ASCII
//     (what httpint stores).
//
// Errors match ledger.ErrInvalid; [InputError] reads field "method".
func CheckMethod(method string) error { return the.CheckMethod(method) }

// BoundsLockWait reports whether ledger l honours
// ledger.ClaimRequest.LockWait inside its own statements: a *ledger.Store
// whose dialect can bound a claim (and, when it records, a Record) that
// way, or any ledger that implements [LockWaitBounder] and reports true.
func BoundsLockWait(l any) bool {
	if s, ok := l.(*ledger.Store); ok {
		return s != nil && the.BoundsLockWait(s)
	}
	b, ok := l.(LockWaitBounder)
	return ok && b.BoundsLockWait()
}

// Window returns the retention and the clock skew of ledger l, and
// whether l states them: a *ledger.Store, a [Store], any ledger with a
// Window() (retention, skew time.Duration) method, or a value that passes
// on its ledger's ([WindowStater]: the kit's keyed Transactions).
func Window(l any) (retention, skew time.Duration, ok bool) {
	if s, ok := l.(*ledger.Store); ok && s != nil {
		r, k := the.Window(s)
		return r, k, true
	}
	if w, ok := l.(WindowStater); ok {
		return w.LedgerWindow()
	}
	if w, ok := l.(interface {
		Window() (retention, skew time.Duration)
	}); ok {
		r, k := w.Window()
		return r, k, true
	}
	return 0, 0, false
}

// WindowStater is implemented by what holds a ledger and passes on its
// window, when the ledger states one (package keyed's Transactions over
// database/sql and over pgx): [Window] asks it.
type WindowStater interface {
	// LedgerWindow returns the ledger's retention and clock skew, and
	// whether the ledger states them.
	LedgerWindow() (retention, skew time.Duration, ok bool)
}

// MaxResultSize returns the longest Result.Response ledger l stores, in
// bytes, and whether l states it: a *ledger.Store (ledger.WithMaxResultSize)
// or any ledger that implements [ResultSizer].
func MaxResultSize(l any) (int, bool) {
	if s, ok := l.(*ledger.Store); ok && s != nil {
		return the.MaxResultSize(s), true
	}
	if rs, ok := l.(ResultSizer); ok {
		return rs.MaxResultSize(), true
	}
	return 0, false
}

// TookOver reports whether c, a claim of the kit's store, acquired an
// entry that was past its retention (an earlier operation with the same
// identity had expired), rather than a new one; its Record only where the
// take-over is a statement of its own (not on SQLite, whose insert takes
// the entry over itself).
func TookOver(c *ledger.Claim) bool { return the.TookOver(c) }

// KeyHash returns the SHA-256 of id's key: the kit's telemetry carries its
// first six bytes (opledger.key_hash).
func KeyHash(id ledger.Identity) [32]byte { return the.KeyHash(id) }

// InputError returns the field ("caller", "method", "key", "first sent",
// "fingerprint", "result", "tx", "table", "option", "name", "lock wait")
// and the reason of err, a ledger's error for bad input (matching
// ledger.ErrInvalid), and whether err is one.
func InputError(err error) (field, reason string, ok bool) { return the.InputError(err) }
