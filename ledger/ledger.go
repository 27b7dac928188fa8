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
	"github.com/opledger/opledger/internal/ledgerkit"
	"github.com/opledger/opledger/internal/options"
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

// Querier is what Lookup reads through: *sql.DB, *sql.Conn and *sql.Tx all
// satisfy it.
type Querier interface {
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
}

var (
	_ Querier = (*sql.DB)(nil)
	_ Querier = (*sql.Conn)(nil)
	_ Querier = (*sql.Tx)(nil)
	_ Ledger  = (*Store)(nil)
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
	// no statement is added. Only a Ledger that can bound its statements
	// honours it: a Store whose dialect can (PostgreSQL's), or a Ledger of
	// your own with a BoundsLockWait() bool method that reports true;
	// [Store.Claim] refuses a
	// positive LockWait with ErrInvalid when its dialect cannot bound a
	// claim this way. How far the bound reaches is the dialect's (see
	// docs/txmiddleware.md; [Store.Record] honours it too): on
	// PostgreSQL it is lock_timeout for the rest of the transaction. Zero
	// leaves the database's own bound.
	LockWait time.Duration
}

// Result is what an operation produced, stored on completion and returned
// on replay byte for byte.
type Result struct {
	// Code is the status code (0 for success; gRPC codes in grpcint), at
	// most 2³¹-1: every dialect stores it in a signed 32-bit column.
	Code uint32
	// Response is the encoded response, or an encoded status for a
	// recorded error. Nil and empty are stored alike and replay as empty.
	Response []byte
	// TypeName names the type encoded in Response (a protobuf full name),
	// at most 512 bytes of UTF-8 without control characters.
	TypeName string
}

// ClaimOutcome says what a Claim (or a Record) found: the Outcome of a
// [Claim]. (Package keyed's Outcome is another thing: what a keyed call
// ended with.)
type ClaimOutcome int

const (
	// Acquired means this transaction owns the identity: run the mutation
	// in the same transaction, then Complete.
	Acquired ClaimOutcome = iota + 1
	// Replay means an earlier transaction completed the operation: return
	// Claim.Result and do nothing.
	Replay
	// Recorded means Record inserted the completed entry in this
	// transaction (see [Store.Record]): commit it. Claim never returns it.
	Recorded
)

// Claim is the outcome of a successful Claim: read its fields, never
// build one as a literal; a Ledger implementation builds it with
// [NewAcquired] or [NewReplay].
type Claim struct {
	// Outcome is Acquired or Replay.
	Outcome ClaimOutcome
	// Identity is the identity claimed.
	Identity Identity
	// Result is the stored result (Replay only).
	Result Result
	// CompletedAt is when the stored result was recorded (Replay only).
	CompletedAt time.Time

	tx        any // the transaction that acquired or recorded it
	owner     any // the *txStore that returned it
	completed bool
	tookOver  bool
}

// NewAcquired returns the claim of a Ledger implementation whose Claim
// acquired id in tx. Its Complete should refuse it for any other
// transaction (compare [Claim.Tx]) with ErrNotAcquired.
func NewAcquired(id Identity, tx *sql.Tx) *Claim { return newAcquiredIn(id, tx) }

// newAcquiredIn is [NewAcquired] for a ledger over another transaction
// API: the claim acquired id in tx (compare claimTx).
func newAcquiredIn[TX any](id Identity, tx TX) *Claim {
	return &Claim{Outcome: Acquired, Identity: id, tx: tx}
}

// NewReplay returns the claim of a Ledger implementation whose Claim
// found id completed with r at completedAt.
func NewReplay(id Identity, r Result, completedAt time.Time) *Claim {
	return &Claim{Outcome: Replay, Identity: id, Result: r, CompletedAt: completedAt}
}

// NewRecorded returns the outcome of a Ledger implementation whose Record
// (claim at commit: see [Store.Record]) inserted id's completed entry in
// tx.
func NewRecorded(id Identity, tx *sql.Tx) *Claim { return newRecordedIn(id, tx) }

// newRecordedIn is [NewRecorded] for a ledger over another transaction
// API.
func newRecordedIn[TX any](id Identity, tx TX) *Claim {
	return &Claim{Outcome: Recorded, Identity: id, tx: tx, completed: true}
}

// Recorded reports whether Record inserted the completed entry in this
// transaction.
func (c *Claim) Recorded() bool { return c != nil && c.Outcome == Recorded }

// Acquired reports whether this transaction owns the identity.
func (c *Claim) Acquired() bool { return c != nil && c.Outcome == Acquired }

// Tx returns the *sql.Tx that acquired the claim, or nil for a replay or
// a claim acquired in another transaction API's transaction (a pgx.Tx).
func (c *Claim) Tx() *sql.Tx {
	tx, _ := claimTx[*sql.Tx](c)
	return tx
}

// claimTx returns the transaction of type TX that acquired (or recorded)
// c, and whether it has one of that type: [Claim.Tx] for any transaction
// API.
func claimTx[TX any](c *Claim) (TX, bool) {
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

// DefaultTable is the ledger's table unless WithTable says otherwise.
const DefaultTable = dialectkit.DefaultTable

// defaultRetention is how long an entry lives unless WithRetention says
// otherwise.
const defaultRetention = 24 * time.Hour

// Option configures a Store; the With functions build them. Giving the
// same option twice is an error.
type Option struct{ o options.Option[config] }

type config struct {
	table        string
	retention    time.Duration
	skew         time.Duration
	skewSet      bool
	maxResult    int
	sweepWait    time.Duration
	now          func() time.Time
	mp           metric.MeterProvider
	tp           trace.TracerProvider
	oneStatement bool
	bucketWidth  time.Duration
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

// WithRetention sets how long the ledger remembers a key (default 24h):
// for a key whose birth is known (Identity.Birth), from its birth; for any
// other, from its claim. Past it Sweep deletes the entry.
//
// A key whose birth is known is honoured for the window, the retention
// minus the clock skew (WithClockSkew): a claim or a lookup of a key born
// before it is refused with ErrKeyExpired, never run again. A key without
// a known birth is not refused: past its retention, a claim takes its
// entry over and runs the call again, and a lookup finds nothing.
func WithRetention(d time.Duration) Option {
	return Option{options.New("WithRetention", func(c *config) error {
		if d <= 0 {
			return errors.New("retention must be positive")
		}
		c.retention = d
		return nil
	})}
}

// WithClockSkew sets how far the clocks of the ledger's callers and
// servers may be apart (default a minute, or a tenth of the retention when
// that is shorter): the ledger's window is the retention minus it, so that
// a key is refused as expired (ErrKeyExpired) a skew before its entry can
// be deleted; and a key born more than it ahead of the server's clock is
// refused as invalid (ErrInvalid, field "key"). d must not be negative and
// must be shorter than the retention.
func WithClockSkew(d time.Duration) Option {
	return Option{options.New("WithClockSkew", func(c *config) error {
		if d < 0 {
			return errors.New("clock skew must not be negative")
		}
		c.skew, c.skewSet = d, true
		return nil
	})}
}

// defaultSkew is the clock skew for retention r unless WithClockSkew says
// otherwise: a minute, or a tenth of r when that is shorter.
func defaultSkew(r time.Duration) time.Duration { return min(time.Minute, r/10) }

// WithBucketWidth sets the width of the buckets Sweep creates on a table
// partitioned by the keys' birth (PostgreSQL, MySQL/MariaDB/TiDB; see
// docs/operations.md): each bucket holds the keys born in d, and is
// dropped whole. Without it the width follows the retention: a 24th of
// it, rounded down to a width that divides a day or is whole days, and
// at least an hour (an hour for the default retention, six hours for a
// week, a day for 30 days), so that a table holds about 24 buckets of
// kept keys whatever its retention. Give the same d to every sweeper of
// a table, as its retention. A narrower bucket makes each drop shorter
// (it removes d's worth of entries), at the cost of more partitions. New
// buckets take the width after the ones that exist, so a table changes
// width gradually, without a migration. d must divide a day, or be a
// whole number of days, and be at least a minute. Sweep then creates
// buckets ahead for a day or two buckets, whichever is longer, so it
// must run at least that often.
func WithBucketWidth(d time.Duration) Option {
	return Option{options.New("WithBucketWidth", func(c *config) error {
		day := 24 * time.Hour
		if d < time.Minute || (day%d != 0 && d%day != 0) {
			return fmt.Errorf("bucket width %v must be at least a minute and divide a day or be a whole number of days", d)
		}
		c.bucketWidth = d
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

// Store is the database/sql implementation of Ledger. It holds no
// connection: every call runs on the transaction or handle it is given.
// A Store is safe for concurrent use.
type Store struct {
	core    *txStore[*sql.Tx]
	checker dialectkit.TxChecker // the dialect's, when it has one
}

// New returns a Store for dialect d. Bad options are an error matching
// ErrInvalid and ErrInvalidConfig.
func New(d dialects.Dialect, opts ...Option) (*Store, error) {
	core, err := newTxStore[*sql.Tx](d, ledgerkit.SQLDriver{}, opts...)
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

// boundsLockWait reports whether Claim and Record honour
// ClaimRequest.LockWait: whether the store's dialect implements
// dialectkit.StatementBounder and can bound a claim inside its statements
// and, when it implements dialectkit.RecordQuerier, a Record too
// (PostgreSQL). Claim honours it with the claim's bound alone.
func (s *Store) boundsLockWait() bool { return s.core.BoundsLockWait() }

// maxResultSize returns the longest Result.Response the store accepts, in
// bytes (see WithMaxResultSize).
func (s *Store) maxResultSize() int { return s.core.maxResult }

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
