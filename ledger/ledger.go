package ledger

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"

	"github.com/opledger/opledger/dialects"
	"github.com/opledger/opledger/internal/dialectkit"
	"github.com/opledger/opledger/internal/options"
	"github.com/opledger/opledger/internal/outcomes"
)

// Ledger is the port the rest of the kit depends on. The SQL
// implementation is [Store]; the conformance suite proves any other (see
// the package documentation). Implementations must be safe for
// concurrent use.
type Ledger interface {
	// Claim claims req's identity inside tx. See [Store.Claim].
	Claim(ctx context.Context, tx *sql.Tx, req ClaimRequest) (*Claim, error)
	// Complete records the result of an acquired claim in the same tx.
	// See [Store.Complete].
	Complete(ctx context.Context, tx *sql.Tx, c *Claim, r Result) error
	// Lookup reads committed state for an identity without claiming it.
	// See [Store.Lookup].
	Lookup(ctx context.Context, q Querier, id Identity) (*Entry, error)
	// Dialect returns the dialect of the database the ledger's table is
	// in: txmiddleware classifies the failures of the whole transaction
	// with it and bounds its lock waits through it.
	Dialect() dialects.Dialect
}

// Recorder is implemented by ledgers that can record a completed entry
// first, as the last statement before COMMIT: claim at commit, where the
// work runs before the ledger is touched. [Store] implements it; so may
// any Ledger (the conformance suite proves it in its claim-at-commit
// mode). txmiddleware.WithClaimAtCommit needs it.
type Recorder interface {
	// Record inserts req's identity already completed with r, inside tx.
	// See [Store.Record].
	Record(ctx context.Context, tx *sql.Tx, req ClaimRequest, r Result) (*Claim, error)
}

// Querier is what Lookup reads through: *sql.DB, *sql.Conn and *sql.Tx all
// satisfy it.
type Querier interface {
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
}

var (
	_ Querier         = (*sql.DB)(nil)
	_ Querier         = (*sql.Conn)(nil)
	_ Querier         = (*sql.Tx)(nil)
	_ Ledger          = (*Store)(nil)
	_ Recorder        = (*Store)(nil)
	_ LockWaitBounder = (*Store)(nil)
	_ ResultSizer     = (*Store)(nil)
)

// ClaimRequest is what Claim needs.
type ClaimRequest struct {
	// Identity names the operation; build it with NewIdentity.
	Identity Identity
	// Fingerprint is the digest of the request; a retry must present the
	// same one.
	Fingerprint Fingerprint
	// LockWait, when positive, bounds how long the claim's statements wait
	// for another transaction that holds the identity uncommitted (past
	// it, Claim returns ErrInProgress), inside the claim's own statements:
	// no statement is added. Only a Ledger whose BoundsLockWait reports
	// true honours it (see [LockWaitBounder]); [Store.Claim] refuses a
	// positive LockWait with ErrInvalid when its dialect cannot bound a
	// claim this way. How far the bound reaches is the dialect's (see
	// dialectkit.StatementBounder; [Store.Record] honours it too): on
	// PostgreSQL it is
	// lock_timeout for the rest of the transaction. Zero leaves the
	// database's own bound.
	LockWait time.Duration
}

// LockWaitBounder is implemented by a Ledger that can honour
// ClaimRequest.LockWait. txmiddleware asks it: when BoundsLockWait
// reports true, a runner with a lock-wait bound begins a plain
// transaction and passes the bound in the ClaimRequest, instead of
// beginning a bounded transaction (dialects.LockWaiter), which costs
// statements of its own.
type LockWaitBounder interface {
	// BoundsLockWait reports whether Claim honours ClaimRequest.LockWait.
	BoundsLockWait() bool
}

// ResultSizer is implemented by a Ledger that bounds the results it
// stores: a Result.Response longer than MaxResultSize is refused with
// ErrInvalid. Transports ask it at construction, so that a response
// limit of theirs that the ledger could not store fails there, not on
// the first large response. [Store] implements it (see
// WithMaxResultSize).
type ResultSizer interface {
	// MaxResultSize returns the longest Result.Response stored, in bytes.
	MaxResultSize() int
}

// Result is what an operation produced, stored on completion and returned
// on replay byte for byte.
type Result struct {
	// Code is the status code (0 for success; gRPC codes in grpcint), at
	// most MaxCode.
	Code uint32
	// Response is the encoded response, or an encoded status for a
	// recorded error. Nil and empty are stored alike and replay as empty.
	Response []byte
	// TypeName names the type encoded in Response (a protobuf full name),
	// at most MaxTypeNameLen bytes of UTF-8 without control characters.
	TypeName string
}

// MaxTypeNameLen is the longest Result.TypeName accepted, in bytes.
const MaxTypeNameLen = 512

// MaxCode is the largest Result.Code accepted: every dialect stores the
// code in a signed 32-bit column. gRPC codes are 0 to 16.
const MaxCode = 1<<31 - 1

// Outcome says what Claim found.
type Outcome int

const (
	// Acquired means this transaction owns the identity: run the mutation
	// in the same transaction, then Complete.
	Acquired Outcome = iota + 1
	// Replay means an earlier transaction completed the operation: return
	// Claim.Result and do nothing.
	Replay
	// Recorded means Record inserted the completed entry in this
	// transaction (see [Recorder]): commit it. Claim never returns it.
	Recorded
)

// String returns "acquired", "replayed" or "recorded": the names the
// ledger's metrics give these outcomes (the opledger.outcome attribute).
func (o Outcome) String() string {
	switch o {
	case Acquired:
		return outcomes.Acquired
	case Replay:
		return outcomes.Replayed
	case Recorded:
		return outcomes.Recorded
	}
	return fmt.Sprintf("Outcome(%d)", int(o))
}

// Claim is the outcome of a successful Claim: read its fields, never
// build one as a literal; a Ledger implementation builds it with
// [NewAcquired] or [NewReplay].
type Claim struct {
	// Outcome is Acquired or Replay.
	Outcome Outcome
	// Identity is the identity claimed.
	Identity Identity
	// Result is the stored result (Replay only).
	Result Result
	// CompletedAt is when the stored result was recorded (Replay only).
	CompletedAt time.Time

	tx        any // the transaction that acquired or recorded it
	owner     any // the *TxStore that returned it
	completed bool
	tookOver  bool
}

// NewAcquired returns the claim of a Ledger implementation whose Claim
// acquired id in tx. Its Complete should refuse it for any other
// transaction (compare [Claim.Tx]) with ErrNotAcquired.
func NewAcquired(id Identity, tx *sql.Tx) *Claim { return NewAcquiredIn(id, tx) }

// NewAcquiredIn is [NewAcquired] for a [TxLedger] over another
// transaction API: the claim acquired id in tx (compare [ClaimTx]).
func NewAcquiredIn[TX any](id Identity, tx TX) *Claim {
	return &Claim{Outcome: Acquired, Identity: id, tx: tx}
}

// NewReplay returns the claim of a Ledger implementation whose Claim
// found id completed with r at completedAt.
func NewReplay(id Identity, r Result, completedAt time.Time) *Claim {
	return &Claim{Outcome: Replay, Identity: id, Result: r, CompletedAt: completedAt}
}

// NewRecorded returns the outcome of a [Recorder] implementation whose
// Record inserted id's completed entry in tx.
func NewRecorded(id Identity, tx *sql.Tx) *Claim { return NewRecordedIn(id, tx) }

// NewRecordedIn is [NewRecorded] for a [TxRecorder] over another
// transaction API.
func NewRecordedIn[TX any](id Identity, tx TX) *Claim {
	return &Claim{Outcome: Recorded, Identity: id, tx: tx, completed: true}
}

// Recorded reports whether Record inserted the completed entry in this
// transaction.
func (c *Claim) Recorded() bool { return c != nil && c.Outcome == Recorded }

// Acquired reports whether this transaction owns the identity.
func (c *Claim) Acquired() bool { return c != nil && c.Outcome == Acquired }

// TookOver reports whether the claim acquired an entry that was past its
// retention (an earlier operation with the same identity had expired),
// rather than a new one. Only a [Store]'s claims report it, and its
// Record only where the take-over is a statement of its own (not on
// SQLite, whose insert takes the entry over itself).
func (c *Claim) TookOver() bool { return c != nil && c.tookOver }

// Tx returns the *sql.Tx that acquired the claim, or nil for a replay or
// a claim acquired in another transaction API's transaction (see
// [ClaimTx]).
func (c *Claim) Tx() *sql.Tx {
	tx, _ := ClaimTx[*sql.Tx](c)
	return tx
}

// ClaimTx returns the transaction of type TX that acquired (or recorded)
// c, and whether it has one of that type: [Claim.Tx] for any transaction
// API.
func ClaimTx[TX any](c *Claim) (TX, bool) {
	var zero TX
	if c == nil {
		return zero, false
	}
	tx, ok := c.tx.(TX)
	return tx, ok
}

// State says whether a committed entry has a result.
type State int

const (
	// Pending: the entry was committed without a result (see ErrIncomplete).
	Pending State = iota + 1
	// Completed: the entry holds a result.
	Completed
)

// Entry is committed ledger state, as Lookup returns it.
type Entry struct {
	Identity    Identity
	State       State
	Fingerprint Fingerprint
	Result      Result // when Completed
	CreatedAt   time.Time
	CompletedAt time.Time // zero when Pending
	ExpiresAt   time.Time
}

// Defaults for Store options.
const (
	DefaultTable         = dialectkit.DefaultTable
	DefaultRetention     = 24 * time.Hour
	DefaultMaxResultSize = 1 << 20
)

// Option configures a Store; the With functions build them. Giving the
// same option twice is an error.
type Option struct{ o options.Option[config] }

type config struct {
	table        string
	retention    time.Duration
	maxResult    int
	sweepWait    time.Duration
	now          func() time.Time
	mp           metric.MeterProvider
	tp           trace.TracerProvider
	oneStatement bool
}

// WithTable sets the ledger's table (default "opledger_operations"): a
// plain identifier, always quoted in SQL. It must match the table the
// migrations created.
func WithTable(name string) Option {
	return Option{options.New("WithTable", func(c *config) error {
		if err := dialectkit.CheckTableName(name); err != nil {
			return err
		}
		c.table = name
		return nil
	})}
}

// WithRetention sets how long an entry lives after it is claimed (default
// 24h). Past it, a claim takes the entry over and Sweep deletes it.
func WithRetention(d time.Duration) Option {
	return Option{options.New("WithRetention", func(c *config) error {
		if d <= 0 {
			return errors.New("retention must be positive")
		}
		c.retention = d
		return nil
	})}
}

// WithMaxResultSize bounds Result.Response in bytes (default 1 MiB).
func WithMaxResultSize(n int) Option {
	return Option{options.New("WithMaxResultSize", func(c *config) error {
		if n < 0 {
			return errors.New("maximum result size must not be negative")
		}
		c.maxResult = n
		return nil
	})}
}

// WithClock replaces time.Now, for tests.
func WithClock(now func() time.Time) Option {
	return Option{options.New("WithClock", func(c *config) error {
		if now == nil {
			return errors.New("clock must not be nil")
		}
		c.now = now
		return nil
	})}
}

// WithOneStatementClaim makes Claim use the dialect's one-statement form
// where it has one (dialects.Queries.Claim: PostgreSQL's data-modifying
// CTE, which also returns the existing entry), so that a replay costs one
// statement instead of the insert and a read. The default is the plain
// insert, and the read only after a conflict: an acquisition, the common
// case, costs one plain statement. The one-statement form slows every
// acquisition a little to speed up a replay (docs/benchmarks.md): choose
// it for a workload that replays more than it acquires.
func WithOneStatementClaim() Option {
	return Option{options.New("WithOneStatementClaim", func(c *config) error {
		c.oneStatement = true
		return nil
	})}
}

// Store is the database/sql implementation of Ledger: a [TxStore] over
// *sql.Tx. It holds no connection: every call runs on the transaction or
// handle it is given. A Store is safe for concurrent use.
type Store struct {
	core    *TxStore[*sql.Tx]
	checker dialectkit.TxChecker // the dialect's, when it has one
}

// New returns a Store for dialect d. Bad options are an *InputError
// with Field "option", matching ErrInvalid.
func New(d dialects.Dialect, opts ...Option) (*Store, error) {
	core, err := NewTxStore[*sql.Tx](d, SQLDriver{}, opts...)
	if err != nil {
		return nil, err
	}
	s := &Store{core: core}
	if s.checker, _ = d.(dialectkit.TxChecker); s.checker != nil {
		core.check = s.check
	}
	return s, nil
}

// Dialect returns the store's dialect.
func (s *Store) Dialect() dialects.Dialect { return s.core.d }

// BoundsLockWait reports whether Claim and Record honour
// ClaimRequest.LockWait: whether the store's dialect implements
// dialectkit.StatementBounder and can bound a claim inside its statements
// and, when it implements dialectkit.RecordQuerier, a Record too
// (PostgreSQL). Claim honours it with the claim's bound alone.
func (s *Store) BoundsLockWait() bool { return s.core.BoundsLockWait() }

// MaxResultSize returns the longest Result.Response the store accepts, in
// bytes (see WithMaxResultSize).
func (s *Store) MaxResultSize() int { return s.core.maxResult }

// Table returns the store's table name.
func (s *Store) Table() string { return s.core.table }

// check runs the dialect's dialectkit.TxChecker on tx, when it has one.
func (s *Store) check(ctx context.Context, op string, tx *sql.Tx) error {
	if s.checker == nil {
		return nil
	}
	err := s.checker.CheckTx(ctx, tx)
	switch {
	case err == nil:
		return nil
	case errors.Is(err, dialects.ErrUnsuitableTx):
		return fmt.Errorf("ledger: %s: %w", op, err)
	}
	return s.core.fail(ctx, op, err)
}

func micros(t time.Time) int64 { return t.UnixMicro() }

func fromMicros(us int64) time.Time { return time.UnixMicro(us).UTC() }
