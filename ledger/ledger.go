package ledger

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"
	"unicode"
	"unicode/utf8"

	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"

	"github.com/opledger/opledger/dialects"
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
	// dialects.ClaimBounder, and dialects.RecordBounder for
	// [Store.Record], which honours it too): on PostgreSQL it is
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
// ledger's metrics give these outcomes (OutcomeAcquired, OutcomeReplayed,
// OutcomeRecorded).
func (o Outcome) String() string {
	switch o {
	case Acquired:
		return OutcomeAcquired
	case Replay:
		return OutcomeReplayed
	case Recorded:
		return OutcomeRecorded
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

	tx        *sql.Tx
	owner     *Store
	completed bool
	tookOver  bool
}

// NewAcquired returns the claim of a Ledger implementation whose Claim
// acquired id in tx. Its Complete should refuse it for any other
// transaction (compare [Claim.Tx]) with ErrNotAcquired.
func NewAcquired(id Identity, tx *sql.Tx) *Claim {
	return &Claim{Outcome: Acquired, Identity: id, tx: tx}
}

// NewReplay returns the claim of a Ledger implementation whose Claim
// found id completed with r at completedAt.
func NewReplay(id Identity, r Result, completedAt time.Time) *Claim {
	return &Claim{Outcome: Replay, Identity: id, Result: r, CompletedAt: completedAt}
}

// NewRecorded returns the outcome of a [Recorder] implementation whose
// Record inserted id's completed entry in tx.
func NewRecorded(id Identity, tx *sql.Tx) *Claim {
	return &Claim{Outcome: Recorded, Identity: id, tx: tx, completed: true}
}

// Recorded reports whether Record inserted the completed entry in this
// transaction.
func (c *Claim) Recorded() bool { return c != nil && c.Outcome == Recorded }

// Acquired reports whether this transaction owns the identity.
func (c *Claim) Acquired() bool { return c != nil && c.Outcome == Acquired }

// Tx returns the transaction that acquired the claim, or nil for a replay.
func (c *Claim) Tx() *sql.Tx {
	if c == nil {
		return nil
	}
	return c.tx
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
	DefaultTable         = "opledger_operations"
	DefaultRetention     = 24 * time.Hour
	DefaultMaxResultSize = 1 << 20
)

// Option configures a Store; the With functions build them. Giving the
// same option twice is an error.
type Option struct{ o options.Option[config] }

type config struct {
	table     string
	retention time.Duration
	maxResult int
	sweepWait time.Duration
	now       func() time.Time
	mp        metric.MeterProvider
	tp        trace.TracerProvider
}

// WithTable sets the ledger's table (default "opledger_operations"): a
// plain identifier, always quoted in SQL. It must match the table the
// migrations created.
func WithTable(name string) Option {
	return Option{options.New("WithTable", func(c *config) error {
		if err := dialects.CheckTableName(name); err != nil {
			return err
		}
		c.table = name
		return nil
	})}
}

// WithRetention sets how long an entry lives after it is claimed (default
// 24h). Past it, a claim re-acquires the entry and Sweep deletes it.
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

// Store is the database/sql implementation of Ledger. It holds no
// connection: every call runs on the transaction or handle it is given.
// A Store is safe for concurrent use.
type Store struct {
	d         dialects.Dialect
	table     string
	retention time.Duration
	maxResult int
	sweepWait time.Duration       // WithSweepLockWait
	waiter    dialects.LockWaiter // the dialect's, when it has one
	now       func() time.Time
	q         dialects.Queries
	rq        *dialects.RecordQueries // the dialect's, when it has them
	checker   dialects.TxChecker      // the dialect's, when it has one
	bounder   dialects.ClaimBounder   // the dialect's, when it can bound claims
	rbounder  dialects.RecordBounder  // the dialect's, when it can bound records
	bounded   sync.Map                // time.Duration → *dialects.Queries
	rbounded  sync.Map                // time.Duration → *dialects.RecordQueries
	obs       *observer

	// split, when set (by tests only), claims with Insert and Select even
	// when the dialect has a one-statement Claim.
	split bool

	// afterConflict, when set (by tests only), runs between a conflicting
	// insert and the read that follows it.
	afterConflict func()
}

// New returns a Store for dialect d. Bad options are an *InputError
// with Field "option", matching ErrInvalid.
func New(d dialects.Dialect, opts ...Option) (*Store, error) {
	if d == nil {
		return nil, invalid("option", "dialect must not be nil")
	}
	c := config{table: DefaultTable, retention: DefaultRetention, maxResult: DefaultMaxResultSize, now: time.Now}
	if err := options.Apply(&c, opts, func(o Option) options.Option[config] { return o.o }); err != nil {
		return nil, &InputError{Field: "option", Reason: err.Error(), Err: err}
	}
	s := &Store{d: d, table: c.table, retention: c.retention, maxResult: c.maxResult, sweepWait: c.sweepWait, now: c.now}
	s.waiter, _ = d.(dialects.LockWaiter)
	if s.sweepWait > 0 && s.waiter == nil {
		err := fmt.Errorf("WithSweepLockWait: dialect %q cannot bound a lock wait (no dialects.LockWaiter)", d.Name())
		return nil, &InputError{Field: "option", Reason: err.Error(), Err: err}
	}
	s.q = d.Queries(s.table)
	s.checker, _ = d.(dialects.TxChecker)
	if rd, ok := d.(dialects.Recorder); ok {
		rq := rd.RecordQueries(s.table)
		s.rq = &rq
	}
	if b, ok := d.(dialects.ClaimBounder); ok {
		if q, ok := b.BoundedQueries(s.table, time.Second); ok && q.Insert != "" {
			s.bounder = b
		}
	}
	if rb, ok := d.(dialects.RecordBounder); ok && s.rq != nil {
		if q, ok := rb.BoundedRecordQueries(s.table, time.Second); ok && q.Insert != "" {
			s.rbounder = rb
		}
	}
	s.obs = newObserver(d, s.table, c.mp, c.tp)
	return s, nil
}

// Dialect returns the store's dialect.
func (s *Store) Dialect() dialects.Dialect { return s.d }

// BoundsLockWait reports whether Claim and Record honour
// ClaimRequest.LockWait: whether the store's dialect implements
// dialects.ClaimBounder and can bound a claim inside its statements and,
// when it implements dialects.Recorder, also dialects.RecordBounder
// (PostgreSQL). Claim honours it with a ClaimBounder alone.
func (s *Store) BoundsLockWait() bool {
	return s.bounder != nil && (s.rq == nil || s.rbounder != nil)
}

// queries returns the SQL of a claim bounded by wait (the store's plain
// SQL for wait 0).
func (s *Store) queries(wait time.Duration) (*dialects.Queries, error) {
	var bound func(string, time.Duration) (dialects.Queries, bool)
	if s.bounder != nil {
		bound = s.bounder.BoundedQueries
	}
	return boundedSQL(s, "claim", wait, &s.q, &s.bounded, bound)
}

// recordQueries returns the SQL of a Record bounded by wait (the
// dialect's plain Record SQL for wait 0); s.rq must be set.
func (s *Store) recordQueries(wait time.Duration) (*dialects.RecordQueries, error) {
	var bound func(string, time.Duration) (dialects.RecordQueries, bool)
	if s.rbounder != nil {
		bound = s.rbounder.BoundedRecordQueries
	}
	return boundedSQL(s, "record", wait, s.rq, &s.rbounded, bound)
}

// boundedSQL returns plain for wait 0, else the SQL that bound (nil when
// the dialect cannot bound op) builds for wait, cached in cache.
func boundedSQL[Q any](s *Store, op string, wait time.Duration, plain *Q, cache *sync.Map, bound func(string, time.Duration) (Q, bool)) (*Q, error) {
	if wait == 0 {
		return plain, nil
	}
	if wait < 0 {
		return nil, invalid("lock wait", "must not be negative")
	}
	if bound == nil {
		return nil, invalid("lock wait", "dialect "+s.d.Name()+" cannot bound a "+op+"'s lock waits in its statements (see BoundsLockWait)")
	}
	if q, ok := cache.Load(wait); ok {
		return q.(*Q), nil
	}
	q, ok := bound(s.table, wait)
	if !ok {
		return nil, invalid("lock wait", fmt.Sprintf("dialect %s cannot bound a %s's lock waits to %v", s.d.Name(), op, wait))
	}
	v, _ := cache.LoadOrStore(wait, &q)
	return v.(*Q), nil
}

// MaxResultSize returns the longest Result.Response the store accepts, in
// bytes (see WithMaxResultSize).
func (s *Store) MaxResultSize() int { return s.maxResult }

// Table returns the store's table name.
func (s *Store) Table() string { return s.table }

// maxClaimLoops bounds the insert/read loop: a row can be deleted (swept)
// between the conflict and the read, or re-acquired by another claimant.
const maxClaimLoops = 4

// Claim claims req.Identity inside tx.
//
// It inserts first; only on conflict does it read the existing entry
// (never read-then-insert). It never opens a transaction or connection of
// its own, so the claim commits or rolls back with the caller's mutation.
// The result is:
//   - a Claim with Outcome Acquired: this transaction owns the identity;
//   - a Claim with Outcome Replay and the stored Result;
//   - ErrKeyReused: the identity exists with another fingerprint;
//   - ErrInProgress: another open transaction held the identity past the
//     transaction's lock timeout (or SQLite's busy timeout);
//   - ErrIncomplete: the entry was committed without a result;
//   - an error matching ErrRetryable (serialization failure, deadlock):
//     roll back and retry the whole transaction;
//   - an error matching dialects.ErrUnsuitableTx, before any insert, when
//     the dialect implements dialects.TxChecker and tx runs in a mode in
//     which a claim is not safe (TiDB's optimistic transactions): its
//     message names the setting to change;
//   - ErrInvalid, a context error, sql.ErrTxDone, or another *DBError.
//
// An entry past its retention is re-acquired atomically: of many
// concurrent claimants exactly one acquires it.
func (s *Store) Claim(ctx context.Context, tx *sql.Tx, req ClaimRequest) (*Claim, error) {
	ctx, op := s.obs.begin(ctx, "opledger.claim", req.Identity)
	c, err := s.claim(ctx, tx, req)
	s.obs.claimed(ctx, op, req.Identity, c, err)
	return c, err
}

func (s *Store) claim(ctx context.Context, tx *sql.Tx, req ClaimRequest) (*Claim, error) {
	if err := checkRequest(tx, req); err != nil {
		return nil, err
	}
	q, err := s.queries(req.LockWait)
	if err != nil {
		return nil, err
	}
	if err := s.check(ctx, "claim", tx); err != nil {
		return nil, err
	}
	id, fp := req.Identity.id[:], req.Fingerprint[:]
	p := insertFirst{
		op:     "claim",
		insert: q.Insert,
		args: func(created, expires int64) []any {
			return []any{id, req.Identity.caller, req.Identity.method, fp, created, expires}
		},
		takeOver: func(created, expires int64) (string, []any) {
			return q.Reacquire, []any{fp, created, expires, id, created}
		},
		won: func(tookOver bool) *Claim {
			if tookOver {
				return s.reacquired(req.Identity, tx)
			}
			return s.acquired(req.Identity, tx)
		},
	}
	if !s.split {
		p.one = q.Claim
	}
	return s.insertFirst(ctx, tx, req, q.Select, p)
}

func (s *Store) acquired(id Identity, tx *sql.Tx) *Claim {
	c := NewAcquired(id, tx)
	c.owner = s
	return c
}

// Complete records r as the result of c in tx, which must be the
// transaction that acquired c. It returns ErrNotAcquired for a replay, a
// claim from another transaction or store, or a claim already completed,
// and ErrInvalid for a result over the size limit.
func (s *Store) Complete(ctx context.Context, tx *sql.Tx, c *Claim, r Result) error {
	var id Identity
	if c != nil {
		id = c.Identity
	}
	ctx, op := s.obs.begin(ctx, "opledger.complete", id)
	err := s.complete(ctx, tx, c, r)
	s.obs.completed(ctx, op, c, err)
	return err
}

func (s *Store) complete(ctx context.Context, tx *sql.Tx, c *Claim, r Result) error {
	if tx == nil {
		return invalid("tx", "transaction must not be nil")
	}
	if c == nil || c.Outcome != Acquired || c.tx != tx || c.owner != s || c.completed {
		return ErrNotAcquired
	}
	if err := s.checkResult(r); err != nil {
		return err
	}
	resp := r.Response
	if resp == nil {
		resp = []byte{}
	}
	res, err := tx.ExecContext(ctx, s.q.Complete, int64(r.Code), resp, r.TypeName, micros(s.now()), c.Identity.id[:])
	if err != nil {
		return s.fail(ctx, "complete", err)
	}
	n, err := res.RowsAffected()
	if err != nil {
		return s.fail(ctx, "complete", err)
	}
	if n != 1 {
		return fmt.Errorf("ledger: complete: entry not pending (%d rows): %w", n, ErrNotAcquired)
	}
	c.completed = true
	return nil
}

func checkTypeName(name string) error {
	switch {
	case len(name) > MaxTypeNameLen:
		return invalid("result", "type name longer than 512 bytes")
	case !utf8.ValidString(name):
		return invalid("result", "type name is not valid UTF-8")
	case strings.IndexFunc(name, unicode.IsControl) >= 0:
		return invalid("result", "type name contains a control character")
	}
	return nil
}

// Lookup reads the committed entry for id without claiming or locking it.
// It returns ErrNotFound when there is none or it has expired; an entry
// committed without a result comes back with State Pending. An attempt
// still in flight in another transaction is invisible to it.
func (s *Store) Lookup(ctx context.Context, q Querier, id Identity) (*Entry, error) {
	if q == nil {
		return nil, invalid("tx", "querier must not be nil")
	}
	if id.IsZero() {
		return nil, invalid("caller", "identity is zero; build it with NewIdentity")
	}
	e, err := s.scan(q.QueryRowContext(ctx, s.q.Lookup, id.id[:]))
	if errors.Is(err, sql.ErrNoRows) {
		return nil, ErrNotFound
	}
	if err != nil {
		return nil, s.fail(ctx, "lookup", err)
	}
	if e.expiresAt <= micros(s.now()) {
		return nil, ErrNotFound
	}
	out := &Entry{
		Identity:  id,
		State:     Pending,
		CreatedAt: fromMicros(e.createdAt),
		ExpiresAt: fromMicros(e.expiresAt),
	}
	copy(out.Fingerprint[:], e.fp)
	if e.completedAt != nil {
		out.State = Completed
		out.Result = e.result
		out.CompletedAt = fromMicros(*e.completedAt)
	}
	return out, nil
}

// check runs the dialect's dialects.TxChecker on tx, when it has one.
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
	return s.fail(ctx, op, err)
}

// fail wraps a database error. A cancelled or expired context wins over
// whatever the driver made of it.
func (s *Store) fail(ctx context.Context, op string, err error) error {
	if errors.Is(err, sql.ErrTxDone) {
		return fmt.Errorf("ledger: %s: %w", op, err)
	}
	if cerr := ctx.Err(); cerr != nil {
		return fmt.Errorf("ledger: %s: %w (%w)", op, cerr, err)
	}
	return &DBError{Op: op, Class: s.d.Classify(err), Err: dialects.Explain(s.d, err)}
}

type row struct {
	fp          []byte
	result      Result
	createdAt   int64
	completedAt *int64
	expiresAt   int64
}

func (s *Store) scan(r *sql.Row) (row, error) {
	var (
		e        row
		code     sql.NullInt64
		typeName sql.NullString
		done     sql.NullInt64
	)
	if err := r.Scan(&e.fp, &code, &e.result.Response, &typeName, &e.createdAt, &done, &e.expiresAt); err != nil {
		return row{}, err
	}
	e.completed(done, code, typeName)
	return e, nil
}

// completed fills in e's completion from the nullable columns read.
func (e *row) completed(done, code sql.NullInt64, typeName sql.NullString) {
	if !done.Valid {
		return
	}
	e.completedAt = &done.Int64
	e.result.Code = uint32(code.Int64)
	e.result.TypeName = typeName.String
	if e.result.Response == nil {
		e.result.Response = []byte{}
	}
}

// scanClaim reads the row of a one-statement Claim: whether it inserted,
// and the existing entry when the statement saw one.
func (s *Store) scanClaim(r *sql.Row) (inserted bool, e row, found bool, err error) {
	var (
		ins                          sql.NullBool
		code, created, done, expires sql.NullInt64
		typeName                     sql.NullString
		fp, resp                     []byte
	)
	if err := r.Scan(&ins, &fp, &code, &resp, &typeName, &created, &done, &expires); err != nil {
		return false, row{}, false, err
	}
	if ins.Valid && ins.Bool {
		return true, row{}, false, nil
	}
	if fp == nil || !created.Valid || !expires.Valid {
		return false, row{}, false, nil
	}
	e = row{fp: fp, createdAt: created.Int64, expiresAt: expires.Int64}
	e.result.Response = resp
	e.completed(done, code, typeName)
	return false, e, true, nil
}

func micros(t time.Time) int64 { return t.UnixMicro() }

func fromMicros(us int64) time.Time { return time.UnixMicro(us).UTC() }
