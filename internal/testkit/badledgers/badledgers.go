// Package badledgers holds the deliberately broken ledgers that prove the
// conformance suite has teeth, written once for any transaction API (the
// suite's tests run them on database/sql, pgxconformance's on pgx). Each
// is otherwise careful: it validates input, classifies database errors
// like the kit's ledger (so that retryable failures are retried), honours
// the size limit and expiry, and leaves Lookup and Sweep to a correct
// ledger on the same table; each has exactly one design flaw.
package badledgers

import (
	"bytes"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/opledger/opledger/conformance"
	"github.com/opledger/opledger/dialects"
	"github.com/opledger/opledger/internal/txledger"
	"github.com/opledger/opledger/ledger"
)

// Txns begins and ends transactions of type TX of their own (what the
// own-transaction ledgers claim in): conformance.Driver has these.
type Txns[TX any] interface {
	Begin(ctx context.Context, level sql.IsolationLevel) (TX, error)
	Commit(ctx context.Context, tx TX) error
	Rollback(ctx context.Context, tx TX) error
}

// Base is what the broken ledgers share.
type Base[TX any] struct {
	D     dialects.Dialect
	Q     dialects.Queries
	Table string
	Cfg   conformance.LedgerConfig
	Drv   txledger.Driver[TX]
	Txns  Txns[TX]
	// Store is a correct ledger on the same table.
	Store *txledger.Store[TX]
}

// New returns the Base of a case's table.
func New[TX any](d dialects.Dialect, drv txledger.Driver[TX], txns Txns[TX], cfg conformance.LedgerConfig) (*Base[TX], error) {
	s, err := txledger.New[TX](d, drv, ledger.WithTable(cfg.Table), ledger.WithRetention(cfg.Retention),
		ledger.WithClock(cfg.Clock), ledger.WithMaxResultSize(cfg.MaxResultSize))
	if err != nil {
		return nil, err
	}
	return &Base[TX]{D: d, Q: d.Queries(cfg.Table), Table: cfg.Table, Cfg: cfg, Drv: drv, Txns: txns, Store: s}, nil
}

// Window refuses id as the kit's ledger does, before any statement: a key
// born before the window (the retention minus the clock skew, the correct
// Store's) with ledger.ErrKeyExpired, one born more than the skew ahead of
// the clock with ledger.ErrInvalid. A key without a known birth passes.
func (b *Base[TX]) Window(id ledger.Identity) error {
	birth, ok := id.Birth()
	if !ok {
		return nil
	}
	r, s := b.Store.Window()
	now := b.Cfg.Clock()
	switch {
	case birth.Before(now.Add(-(r - s))):
		return fmt.Errorf("badledgers: key born before the window: %w", ledger.ErrKeyExpired)
	case birth.After(now.Add(s)):
		return fmt.Errorf("badledgers: key born more than the clock skew ahead: %w", ledger.ErrInvalid)
	}
	return nil
}

// times returns the created_at, expires_at and born_at of an entry of id
// claimed now, as the kit's ledger sets them: an entry lives for the
// retention from its key's birth when that is known, else from its claim.
func (b *Base[TX]) times(id ledger.Identity, now time.Time) (created, expires, born int64) {
	created = now.UnixMicro()
	if birth, ok := id.Birth(); ok {
		return created, birth.Add(b.Cfg.Retention).UnixMicro(), birth.UnixMicro()
	}
	return created, now.Add(b.Cfg.Retention).UnixMicro(), 0
}

// Dialect returns the dialect the ledger was built for.
func (b *Base[TX]) Dialect() dialects.Dialect { return b.D }

func (b *Base[TX]) ph(n int) string { return b.D.Placeholder(n) }

// Fail wraps a database error as the kit's ledger does.
func (b *Base[TX]) Fail(op string, err error) error {
	return &ledger.DBError{Op: op, Class: b.D.Classify(err), Err: err}
}

// Entry is an entry read with the dialect's plain, non-locking Lookup.
type Entry struct {
	FP          []byte
	Result      ledger.Result
	Completed   bool
	CompletedAt time.Time
	Expires     int64
}

// Read reads id's entry with row, the first row of the dialect's Lookup
// query: the naive ledger's check.
func Read(row txledger.Row) (Entry, error) {
	var (
		e        Entry
		code     sql.NullInt64
		typeName sql.NullString
		created  int64
		done     sql.NullInt64
	)
	err := row.Scan(&e.FP, &code, &e.Result.Response, &typeName, &created, &done, &e.Expires)
	e.Completed = done.Valid
	if done.Valid {
		e.CompletedAt = time.UnixMicro(done.Int64)
	}
	e.Result.Code, e.Result.TypeName = uint32(code.Int64), typeName.String
	if e.Result.Response == nil {
		e.Result.Response = []byte{}
	}
	return e, err
}

// Outcome turns an existing, unexpired entry into a claim's answer.
func Outcome(e Entry, req ledger.ClaimRequest) (*ledger.Claim, error) {
	if !bytes.Equal(e.FP, req.Fingerprint[:]) {
		return nil, ledger.ErrKeyReused
	}
	if !e.Completed {
		return nil, ledger.ErrIncomplete
	}
	return ledger.NewReplay(req.Identity, e.Result, e.CompletedAt), nil
}

// Complete is a careful completion of an acquisition made in tx.
func (b *Base[TX]) Complete(ctx context.Context, tx TX, c *ledger.Claim, res ledger.Result) error {
	if got, ok := txledger.ClaimTx[TX](c); !ok || c.Outcome != ledger.Acquired || any(got) != any(tx) {
		return ledger.ErrNotAcquired
	}
	if len(res.Response) > b.Cfg.MaxResultSize {
		return fmt.Errorf("badledgers: invalid result: too large: %w", ledger.ErrInvalid)
	}
	resp := res.Response
	if resp == nil {
		resp = []byte{}
	}
	id := c.Identity.ID()
	if _, err := b.Drv.Exec(ctx, tx, b.Q.Complete, int64(res.Code), resp, res.TypeName, b.Cfg.Clock().UnixMicro(), id[:]); err != nil {
		return b.Fail("complete", err)
	}
	return nil
}

// Naive reads (a plain SELECT), then inserts if it found nothing: the
// classic check-then-act race. It re-acquires an expired entry with an
// UPDATE that does not check it is still expired. It honours the window
// (Base.Window) as the kit's ledger does.
type Naive[TX any] struct{ *Base[TX] }

// Claim reads, then inserts.
func (n Naive[TX]) Claim(ctx context.Context, tx TX, req ledger.ClaimRequest) (*ledger.Claim, error) {
	if err := n.Window(req.Identity); err != nil {
		return nil, err
	}
	created, expires, born := n.times(req.Identity, n.Cfg.Clock())
	idb := req.Identity.ID()
	e, err := Read(n.Drv.QueryRow(ctx, tx, n.Q.Lookup, idb[:]))
	t, p := n.D.QuoteIdent(n.Table), n.ph
	switch {
	case errors.Is(err, sql.ErrNoRows):
		ins := "INSERT INTO " + t + " (id, caller, method, request_fp, created_at, expires_at, born_at) VALUES (" +
			p(1) + ", " + p(2) + ", " + p(3) + ", " + p(4) + ", " + p(5) + ", " + p(6) + ", " + p(7) + ")"
		if _, err := n.Drv.Exec(ctx, tx, ins, idb[:], req.Identity.Caller(), req.Identity.Method(), req.Fingerprint[:], created, expires, born); err != nil {
			return nil, n.Fail("claim", err)
		}
		return txledger.NewAcquired(req.Identity, tx), nil
	case err != nil:
		return nil, n.Fail("claim", err)
	case e.Expires <= created && born != 0:
		return nil, fmt.Errorf("badledgers: the key's entry is past its retention: %w", ledger.ErrKeyExpired)
	case e.Expires <= created:
		upd := "UPDATE " + t + " SET request_fp = " + p(1) + ", created_at = " + p(2) + ", expires_at = " + p(3) +
			", code = NULL, response = NULL, response_type = NULL, completed_at = NULL WHERE id = " + p(4)
		if _, err := n.Drv.Exec(ctx, tx, upd, req.Fingerprint[:], created, expires, idb[:]); err != nil {
			return nil, n.Fail("claim", err)
		}
		return txledger.NewAcquired(req.Identity, tx), nil
	}
	return Outcome(e, req)
}

// OwnTx claims correctly (insert first, read on conflict) but in a
// transaction of its own, committed at once, and completes in the
// caller's: the claim no longer commits or rolls back with the mutation.
type OwnTx[TX any] struct{ *Base[TX] }

// ClaimOwn claims req in a transaction of its own and commits it.
func (o OwnTx[TX]) ClaimOwn(ctx context.Context, req ledger.ClaimRequest) (*ledger.Claim, error) {
	own, err := o.Txns.Begin(ctx, sql.LevelDefault)
	if err != nil {
		return nil, o.Fail("claim", err)
	}
	defer o.Txns.Rollback(ctx, own)
	c, err := o.Store.Claim(ctx, own, req)
	if err != nil {
		return nil, err
	}
	if err := o.Txns.Commit(ctx, own); err != nil {
		return nil, o.Fail("claim", err)
	}
	return c, nil
}

// Claim claims in a transaction of its own; an acquisition is completed
// later in the caller's.
func (o OwnTx[TX]) Claim(ctx context.Context, tx TX, req ledger.ClaimRequest) (*ledger.Claim, error) {
	c, err := o.ClaimOwn(ctx, req)
	if err != nil || !c.Acquired() {
		return c, err
	}
	return txledger.NewAcquired(req.Identity, tx), nil
}

// Complete completes in the caller's transaction.
func (o OwnTx[TX]) Complete(ctx context.Context, tx TX, c *ledger.Claim, r ledger.Result) error {
	return o.Base.Complete(ctx, tx, c, r)
}

// OwnTxRecorder is a correct claim-first ledger (the correct Store's
// Claim and Complete) whose claim-at-commit Record inserts the completed
// entry correctly (insert first, read on conflict) but in a transaction of
// its own, committed at once: the entry no longer commits or rolls back
// with the caller's work.
type OwnTxRecorder[TX any] struct{ *Base[TX] }

// Claim is the correct Store's.
func (o OwnTxRecorder[TX]) Claim(ctx context.Context, tx TX, req ledger.ClaimRequest) (*ledger.Claim, error) {
	return o.Store.Claim(ctx, tx, req)
}

// Complete is the correct Store's.
func (o OwnTxRecorder[TX]) Complete(ctx context.Context, tx TX, c *ledger.Claim, r ledger.Result) error {
	return o.Store.Complete(ctx, tx, c, r)
}

// Record records in a transaction of its own.
func (o OwnTxRecorder[TX]) Record(ctx context.Context, tx TX, req ledger.ClaimRequest, r ledger.Result) (*ledger.Claim, error) {
	own, err := o.Txns.Begin(ctx, sql.LevelDefault)
	if err != nil {
		return nil, o.Fail("record", err)
	}
	defer o.Txns.Rollback(ctx, own)
	c, err := o.Store.Record(ctx, own, req, r)
	if err != nil {
		return nil, err
	}
	if err := o.Txns.Commit(ctx, own); err != nil {
		return nil, o.Fail("record", err)
	}
	if c.Recorded() {
		return txledger.NewRecorded(req.Identity, tx), nil
	}
	return c, nil
}

// BirthBlind is a correct ledger (the correct Store's claims, records and
// completions) that ignores a key's birth wherever the Store refuses a key
// for it: a key born before the window, or ahead of the clock, is claimed
// as a key without a birth is (an entry past its retention taken over, a
// fresh entry inserted where there is none, a live one replayed), and its
// lookup answers ledger.ErrNotFound (see [Forget]): the ledger of before
// the window, which runs an expired key again.
type BirthBlind[TX any] struct{ *Base[TX] }

// refusedForBirth reports whether err is the Store's refusal of a key for
// its birth: ErrKeyExpired, or ErrInvalid for the field "key" (a birth
// ahead of the clock: an identity's key is otherwise checked when it is
// built).
func refusedForBirth(err error) bool {
	if errors.Is(err, ledger.ErrKeyExpired) {
		return true
	}
	field, _, ok := txledger.InputError(err)
	return ok && field == "key"
}

// Claim is the Store's, but claims a key the Store refuses for its birth
// as if it had none.
func (b BirthBlind[TX]) Claim(ctx context.Context, tx TX, req ledger.ClaimRequest) (*ledger.Claim, error) {
	c, err := b.Store.Claim(ctx, tx, req)
	if !refusedForBirth(err) {
		return c, err
	}
	return b.claimBlind(ctx, tx, req)
}

// claimBlind claims req as a key without a birth: take over an expired
// entry, else insert, else answer the live entry.
func (b BirthBlind[TX]) claimBlind(ctx context.Context, tx TX, req ledger.ClaimRequest) (*ledger.Claim, error) {
	idb := req.Identity.ID()
	for range 3 {
		now := b.Cfg.Clock()
		created, expires := now.UnixMicro(), now.Add(b.Cfg.Retention).UnixMicro()
		n, err := b.Drv.Exec(ctx, tx, b.Q.TakeOver, req.Fingerprint[:], created, expires, idb[:], created)
		if err != nil {
			return nil, b.Fail("claim", err)
		}
		if n == 1 {
			return txledger.NewAcquired(req.Identity, tx), nil
		}
		n, err = b.Drv.Exec(ctx, tx, b.Q.Insert, idb[:], req.Identity.Caller(), req.Identity.Method(), req.Fingerprint[:], created, expires, int64(0))
		switch {
		case err == nil && n == 1:
			return txledger.NewAcquired(req.Identity, tx), nil
		case err != nil && b.D.Classify(err) != dialects.ClassUniqueViolation:
			return nil, b.Fail("claim", err)
		}
		e, err := Read(b.Drv.QueryRow(ctx, tx, b.Q.Select, idb[:]))
		switch {
		case errors.Is(err, sql.ErrNoRows):
			continue
		case err != nil:
			return nil, b.Fail("claim", err)
		case e.Expires <= created:
			continue
		}
		return Outcome(e, req)
	}
	return nil, fmt.Errorf("badledgers: entry changed under the claim: %w", ledger.ErrRetryable)
}

// Complete is the correct one.
func (b BirthBlind[TX]) Complete(ctx context.Context, tx TX, c *ledger.Claim, r ledger.Result) error {
	return b.Base.Complete(ctx, tx, c, r)
}

// Record is the Store's, but records a key the Store refuses for its
// birth as if it had none.
func (b BirthBlind[TX]) Record(ctx context.Context, tx TX, req ledger.ClaimRequest, r ledger.Result) (*ledger.Claim, error) {
	c, err := b.Store.Record(ctx, tx, req, r)
	if !refusedForBirth(err) {
		return c, err
	}
	c, err = b.claimBlind(ctx, tx, req)
	if err != nil || !c.Acquired() {
		return c, err
	}
	if err := b.Base.Complete(ctx, tx, c, r); err != nil {
		return nil, err
	}
	return txledger.NewRecorded(req.Identity, tx), nil
}

// Forget is what a BirthBlind ledger's Lookup answers, given a correct
// Lookup's answer: a refusal for the key's birth becomes ErrNotFound.
func Forget(en *ledger.Entry, err error) (*ledger.Entry, error) {
	if refusedForBirth(err) {
		return nil, ledger.ErrNotFound
	}
	return en, err
}

// SQLTxns is Txns on a database/sql pool.
type SQLTxns struct{ DB *sql.DB }

// Begin begins a transaction of the pool at level.
func (s SQLTxns) Begin(ctx context.Context, level sql.IsolationLevel) (*sql.Tx, error) {
	return s.DB.BeginTx(ctx, &sql.TxOptions{Isolation: level})
}

// Commit commits tx.
func (SQLTxns) Commit(_ context.Context, tx *sql.Tx) error { return tx.Commit() }

// Rollback rolls tx back.
func (SQLTxns) Rollback(_ context.Context, tx *sql.Tx) error { return tx.Rollback() }
