package ledger

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"sync"
	"time"

	"github.com/opledger/opledger/dialects"
	"github.com/opledger/opledger/internal/dialectkit"
	"github.com/opledger/opledger/internal/ledgerkit"
	"github.com/opledger/opledger/internal/options"
)

// txStore is the kit's ledger over transactions of type TX, whose
// statements run through a ledgerkit.Driver: [Store] is it for
// database/sql; txStore[any] is internal/txledger's Store (see seam.go),
// package pgxledger's over pgx.Tx. Its Claim, Complete and Record behave
// exactly as [Store.Claim], [Store.Complete] and [Store.Record] (one
// implementation serves every API); it adds the pipelined forms
// BeginClaim, CompleteCommit and RecordCommit for an API that can send
// statements together (see ledgerkit.Pipeline). It holds no connection
// and is safe for concurrent use.
type txStore[TX any] struct {
	drv       ledgerkit.Driver[TX]
	d         dialects.Dialect
	table     string
	retention time.Duration
	skew      time.Duration // WithClockSkew
	maxResult int
	sweepWait time.Duration       // WithSweepLockWait
	width     time.Duration       // WithBucketWidth; 0: the table's
	waiter    dialects.LockWaiter // the dialect's, when it has one
	now       func() time.Time
	q         dialects.Queries
	rq        *dialectkit.RecordQueries   // the dialect's, when it has them
	bounder   dialectkit.StatementBounder // the dialect's, when it can bound claims
	rbounds   bool                        // bounder bounds records too
	piper     dialectkit.Pipeliner        // the dialect's, when it has pipelined forms
	bounded   sync.Map                    // time.Duration → *dialects.Queries
	rbounded  sync.Map                    // time.Duration → *dialectkit.RecordQueries
	pbounded  sync.Map                    // time.Duration → *dialectkit.PipelineQueries
	obs       *observer

	// check, when set (database/sql: the dialect's TxChecker), runs on tx
	// before a claim or a record.
	check func(ctx context.Context, op string, tx TX) error

	// oneStatement, when set (WithOneStatementClaim), claims with the
	// dialect's one-statement Claim (Queries.Claim) instead of Insert and,
	// on a conflict only, Select.
	oneStatement bool

	// byBirth is the dialect's BirthQueries, when it has them: Select,
	// Complete and Lookup then take the key's birth last (see readArgs).
	byBirth *dialectkit.BirthQueries

	// afterConflict, when set (by tests only), runs between a conflicting
	// insert and the read that follows it.
	afterConflict func()
}

// newTxStore returns a ledger for dialect d whose statements run through
// drv in transactions of type TX. [New] is newTxStore for database/sql
// (with ledgerkit.SQLDriver and the dialect's dialectkit.TxChecker), and
// internal/txledger's New for any other API. Bad options are an
// *inputError with Field "option", matching ErrInvalid.
func newTxStore[TX any](d dialects.Dialect, drv ledgerkit.Driver[TX], opts ...Option) (*txStore[TX], error) {
	if d == nil {
		return nil, invalid("option", "dialect must not be nil")
	}
	if drv == nil {
		return nil, invalid("option", "driver must not be nil")
	}
	c := config{table: DefaultTable, retention: defaultRetention, maxResult: ledgerkit.DefaultMaxResultSize, now: time.Now}
	if err := options.Apply(&c, opts, func(o Option) options.Option[config] { return o.o }); err != nil {
		return nil, &inputError{Field: "option", Reason: err.Error(), Err: err}
	}
	if !c.skewSet {
		c.skew = defaultSkew(c.retention)
	}
	if c.skew >= c.retention {
		err := fmt.Errorf("WithClockSkew: clock skew %v must be shorter than the retention %v", c.skew, c.retention)
		return nil, &inputError{Field: "option", Reason: err.Error(), Err: err}
	}
	s := &txStore[TX]{drv: drv, d: d, table: c.table, retention: c.retention, skew: c.skew, maxResult: c.maxResult, sweepWait: c.sweepWait, width: c.bucketWidth, now: c.now}
	s.waiter, _ = d.(dialects.LockWaiter)
	if s.sweepWait > 0 && s.waiter == nil {
		err := fmt.Errorf("WithSweepLockWait: dialect %q cannot bound a lock wait (no dialects.LockWaiter)", d.Name())
		return nil, &inputError{Field: "option", Reason: err.Error(), Err: err}
	}
	s.q = d.Queries(s.table)
	if br, ok := d.(dialectkit.BirthReader); ok {
		bq := br.BirthQueries(s.table)
		s.q.Select, s.q.Complete, s.q.Lookup = bq.Select, bq.Complete, bq.Lookup
		s.byBirth = &bq
	}
	s.oneStatement = c.oneStatement && s.q.Claim != ""
	if rd, ok := d.(dialectkit.RecordQuerier); ok {
		rq := rd.RecordQueries(s.table)
		s.rq = &rq
	}
	if b, ok := d.(dialectkit.StatementBounder); ok {
		if q, ok := b.BoundedQueries(s.table, time.Second); ok && q.Insert != "" {
			s.bounder = b
			if s.rq != nil {
				rq, ok := b.BoundedRecordQueries(s.table, time.Second)
				s.rbounds = ok && rq.Insert != ""
			}
		}
	}
	if p, ok := d.(dialectkit.Pipeliner); ok {
		if q, ok := p.PipelineQueries(s.table, 0); ok && q.Complete != "" && q.Record != "" {
			s.piper = p
		}
	}
	s.obs = newObserver(d, s.table, c.mp, c.tp)
	return s, nil
}

// Dialect returns the store's dialect.
func (s *txStore[TX]) Dialect() dialects.Dialect { return s.d }

// Table returns the store's table name.
func (s *txStore[TX]) Table() string { return s.table }

// MaxResultSize returns the longest Result.Response the store accepts, in
// bytes (see WithMaxResultSize).
func (s *txStore[TX]) MaxResultSize() int { return s.maxResult }

// SweepLockWait returns the bound WithSweepLockWait set on each of a
// sweep's statements, or 0 without it. [Store.Sweep] honours it itself;
// an API's sweep built on [txStore.SweepWith] bounds its statements to it
// (package pgxledger's Sweep does).
func (s *txStore[TX]) SweepLockWait() time.Duration { return s.sweepWait }

// Window returns the store's retention and clock skew.
func (s *txStore[TX]) Window() (retention, skew time.Duration) { return s.retention, s.skew }

// BoundsLockWait reports whether Claim and Record honour
// ClaimRequest.LockWait (see Store.boundsLockWait).
func (s *txStore[TX]) BoundsLockWait() bool {
	return s.bounder != nil && (s.rq == nil || s.rbounds)
}

// queries returns the SQL of a claim bounded by wait (the store's plain
// SQL for wait 0).
func (s *txStore[TX]) queries(wait time.Duration) (*dialects.Queries, error) {
	var bound func(string, time.Duration) (dialects.Queries, bool)
	if s.bounder != nil {
		bound = func(table string, d time.Duration) (dialects.Queries, bool) {
			q, ok := s.bounder.BoundedQueries(table, d)
			if s.byBirth != nil {
				q.Select, q.Complete, q.Lookup = s.byBirth.Select, s.byBirth.Complete, s.byBirth.Lookup
			}
			return q, ok
		}
	}
	return boundedSQL(s.d.Name(), s.table, "claim", wait, &s.q, &s.bounded, bound)
}

// recordQueries returns the SQL of a Record bounded by wait (the
// dialect's plain Record SQL for wait 0); s.rq must be set.
func (s *txStore[TX]) recordQueries(wait time.Duration) (*dialectkit.RecordQueries, error) {
	var bound func(string, time.Duration) (dialectkit.RecordQueries, bool)
	if s.rbounds {
		bound = s.bounder.BoundedRecordQueries
	}
	return boundedSQL(s.d.Name(), s.table, "record", wait, s.rq, &s.rbounded, bound)
}

// boundedSQL returns plain for wait 0, else the SQL that bound (nil when
// the dialect cannot bound op) builds for wait, cached in cache.
func boundedSQL[Q any](dialect, table, op string, wait time.Duration, plain *Q, cache *sync.Map, bound func(string, time.Duration) (Q, bool)) (*Q, error) {
	if wait == 0 {
		return plain, nil
	}
	if wait < 0 {
		return nil, invalid("lock wait", "must not be negative")
	}
	if bound == nil {
		return nil, invalid("lock wait", "dialect "+dialect+" cannot bound a "+op+"'s lock waits in its statements (see BoundsLockWait)")
	}
	if q, ok := cache.Load(wait); ok {
		return q.(*Q), nil
	}
	q, ok := bound(table, wait)
	if !ok {
		return nil, invalid("lock wait", fmt.Sprintf("dialect %s cannot bound a %s's lock waits to %v", dialect, op, wait))
	}
	v, _ := cache.LoadOrStore(wait, &q)
	return v.(*Q), nil
}

// window refuses a claim, a record or a lookup (op) of id at now (Unix
// microseconds) when id's key was born before the ledger's window (the
// retention minus the clock skew): ErrKeyExpired; or more than the skew
// after now: ErrInvalid, field "key". A key without a known birth passes.
// It costs no statement.
func (s *txStore[TX]) window(op string, id Identity, now int64) error {
	if id.birth == 0 {
		return nil
	}
	switch {
	case id.birth < now-(s.retention-s.skew).Microseconds():
		return fmt.Errorf("ledger: %s: key born at %s, before the window of %v (retention %v minus clock skew %v): %w",
			op, fromMicros(id.birth).Format(time.RFC3339), s.retention-s.skew, s.retention, s.skew, ErrKeyExpired)
	case id.birth > now+s.skew.Microseconds():
		return invalid("key", fmt.Sprintf("born at %s, more than the allowed clock skew (%v) ahead of the server's clock", fromMicros(id.birth).Format(time.RFC3339), s.skew))
	}
	return nil
}

// stillInWindow reads the clock again once an insert acquired id: a key
// whose window ended meanwhile (a claim that stalled between its window
// check and its insert) is refused with ErrKeyExpired, and the caller
// rolls the insert back. Its entry may have been swept (SQLite, a table
// that is not partitioned) or its bucket dropped (MySQL then routes the
// insert to the next bucket) after the window ended and before the
// insert, which would then acquire a key that already ran. It costs no
// statement.
func (s *txStore[TX]) stillInWindow(op string, id Identity) error {
	if id.birth == 0 {
		return nil
	}
	if err := s.window(op, id, micros(s.now())); errors.Is(err, ErrKeyExpired) {
		return err
	}
	return nil
}

// times returns the created_at, expires_at and born_at of an entry of id
// claimed at now: an entry lives for the retention from its key's birth,
// when that is known, else from its claim. born_at is 0 for a key without
// a known birth.
func (s *txStore[TX]) times(id Identity, now time.Time) (created, expires, born int64) {
	created = micros(now)
	if id.birth != 0 {
		return created, id.birth + s.retention.Microseconds(), id.birth
	}
	return created, micros(now.Add(s.retention)), 0
}

// checkTx runs the store's transaction check, when it has one.
func (s *txStore[TX]) checkTx(ctx context.Context, op string, tx TX) error {
	if s.check == nil {
		return nil
	}
	return s.check(ctx, op, tx)
}

// fail wraps a database error. A cancelled or expired context wins over
// whatever the driver made of it.
func (s *txStore[TX]) fail(ctx context.Context, op string, err error) error {
	if errors.Is(err, sql.ErrTxDone) {
		return fmt.Errorf("ledger: %s: %w", op, err)
	}
	if cerr := ctx.Err(); cerr != nil {
		return fmt.Errorf("ledger: %s: %w (%w)", op, cerr, err)
	}
	return newDBError(s.d, op, err)
}

// explain passes err, an error of a statement the store sent through
// something else than its driver (a Pipeline's COMMIT), through the
// dialect's explanation (dialectkit.Explain): err itself unless the dialect
// explains it.
func (s *txStore[TX]) explain(err error) error { return dialectkit.Explain(s.d, err) }

// isNil reports whether tx is nil: a nil pointer, interface, or any other
// nil-able value.
func isNil[TX any](tx TX) bool {
	v := any(tx)
	if v == nil {
		return true
	}
	switch rv := reflect.ValueOf(v); rv.Kind() {
	case reflect.Pointer, reflect.Interface, reflect.Map, reflect.Slice, reflect.Func, reflect.Chan:
		return rv.IsNil()
	}
	return false
}

// sameTx reports whether a and b are the same transaction, without
// panicking on a transaction type that is not comparable (it is then
// never the same).
func sameTx(a, b any) bool {
	if a == nil || b == nil {
		return false
	}
	ta := reflect.TypeOf(a)
	if ta != reflect.TypeOf(b) || !ta.Comparable() {
		return false
	}
	return a == b
}

// byHour returns q, a BirthQueries statement (or a TakeOver) run for a
// key born at born, ended with the hour of born's range of born_at when
// the dialect asks for it (dialectkit.BirthQueries.PruneByHour).
func (s *txStore[TX]) byHour(q string, born int64) string {
	if s.byBirth == nil || !s.byBirth.PruneByHour {
		return q
	}
	return q + dialectkit.HourOfBirth(born)
}

// claimByHour returns the one-statement claim q for a key born at born,
// with the hour of its birth after its read's WHERE when the dialect
// prunes by hour (see byHour).
func (s *txStore[TX]) claimByHour(q string, born int64) string {
	if s.byBirth == nil || !s.byBirth.PruneByHour || s.byBirth.ClaimHour == "" {
		return q
	}
	i := strings.Index(q, s.byBirth.ClaimHour)
	if i < 0 {
		return q
	}
	i += len(s.byBirth.ClaimHour)
	return q[:i] + dialectkit.HourOfBirth(born) + q[i:]
}

// pipelinedComplete returns pq's completion for a key born at born, with
// the hour of its birth where the completion's WHERE ends when the
// dialect prunes by hour (see byHour).
func (s *txStore[TX]) pipelinedComplete(pq *dialectkit.PipelineQueries, born int64) string {
	if s.byBirth == nil || !s.byBirth.PruneByHour || pq.CompleteHour <= 0 || pq.CompleteHour > len(pq.Complete) {
		return pq.Complete
	}
	return pq.Complete[:pq.CompleteHour] + dialectkit.HourOfBirth(born) + pq.Complete[pq.CompleteHour:]
}

// readArgs are the arguments of Select and Lookup for id: its digest,
// and its birth when the dialect reads by birth (dialectkit.BirthReader).
func (s *txStore[TX]) readArgs(id Identity) []any {
	if s.byBirth != nil {
		return []any{id.id[:], id.birth}
	}
	return []any{id.id[:]}
}
