package conformance_test

import (
	"bytes"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/opledger/opledger/conformance"
	"github.com/opledger/opledger/dialects"
	"github.com/opledger/opledger/ledger"
)

// The two broken ledgers below exist to prove that the suite has teeth.
// Both are otherwise careful: they validate input, classify database
// errors like the real Store (so retryable failures are retried), honour
// the size limit and expiry, and delegate Lookup and Sweep to a Store on
// the same table. Each has exactly one design flaw.

// rawSQL is what both need beyond the dialect's queries.
type rawSQL struct {
	d     dialects.Dialect
	q     dialects.Queries
	table string
	cfg   conformance.LedgerConfig
	store *ledger.Store
}

func newRawSQL(d dialects.Dialect, cfg conformance.LedgerConfig) (*rawSQL, error) {
	s, err := ledger.New(d, ledger.WithTable(cfg.Table), ledger.WithRetention(cfg.Retention),
		ledger.WithClock(cfg.Clock), ledger.WithMaxResultSize(cfg.MaxResultSize))
	if err != nil {
		return nil, err
	}
	return &rawSQL{d: d, q: d.Queries(cfg.Table), table: cfg.Table, cfg: cfg, store: s}, nil
}

func (r *rawSQL) ph(n int) string { return r.d.Placeholder(n) }

// Dialect returns the dialect the ledger was built for.
func (r *rawSQL) Dialect() dialects.Dialect { return r.d }

// plainInsert is an INSERT with no conflict clause.
func (r *rawSQL) plainInsert() string {
	return "INSERT INTO " + r.d.QuoteIdent(r.table) + " (id, caller, method, request_fp, created_at, expires_at) VALUES (" +
		r.ph(1) + ", " + r.ph(2) + ", " + r.ph(3) + ", " + r.ph(4) + ", " + r.ph(5) + ", " + r.ph(6) + ")"
}

func (r *rawSQL) fail(op string, err error) error {
	return &ledger.DBError{Op: op, Class: r.d.Classify(err), Err: err}
}

type entryRow struct {
	fp          []byte
	res         ledger.Result
	completed   bool
	completedAt time.Time
	expires     int64
}

// read reads an entry with the dialect's plain, non-locking Lookup query:
// the naive ledger's check.
func (r *rawSQL) read(ctx context.Context, q interface {
	QueryRowContext(context.Context, string, ...any) *sql.Row
}, id ledger.Identity) (entryRow, error) {
	var (
		e        entryRow
		code     sql.NullInt64
		typeName sql.NullString
		created  int64
		done     sql.NullInt64
	)
	idb := id.ID()
	err := q.QueryRowContext(ctx, r.q.Lookup, idb[:]).Scan(&e.fp, &code, &e.res.Response, &typeName, &created, &done, &e.expires)
	e.completed = done.Valid
	if done.Valid {
		e.completedAt = time.UnixMicro(done.Int64)
	}
	e.res.Code, e.res.TypeName = uint32(code.Int64), typeName.String
	return e, err
}

// outcomeOf turns an existing, unexpired entry into the claim's answer.
func outcomeOf(e entryRow, req ledger.ClaimRequest) (*ledger.Claim, error) {
	if !bytes.Equal(e.fp, req.Fingerprint[:]) {
		return nil, ledger.ErrKeyReused
	}
	if !e.completed {
		return nil, ledger.ErrIncomplete
	}
	if e.res.Response == nil {
		e.res.Response = []byte{}
	}
	return ledger.NewReplay(req.Identity, e.res, e.completedAt), nil
}

func (r *rawSQL) complete(ctx context.Context, tx *sql.Tx, c *ledger.Claim, res ledger.Result) error {
	if c == nil || c.Outcome != ledger.Acquired || c.Tx() != tx {
		return ledger.ErrNotAcquired
	}
	if len(res.Response) > r.cfg.MaxResultSize {
		return &ledger.InputError{Field: "result", Reason: "too large"}
	}
	resp := res.Response
	if resp == nil {
		resp = []byte{}
	}
	idb := c.Identity.ID()
	if _, err := tx.ExecContext(ctx, r.q.Complete, int64(res.Code), resp, res.TypeName, r.cfg.Clock().UnixMicro(), idb[:]); err != nil {
		return r.fail("complete", err)
	}
	return nil
}

func (r *rawSQL) Lookup(ctx context.Context, q ledger.Querier, id ledger.Identity) (*ledger.Entry, error) {
	return r.store.Lookup(ctx, q, id)
}

func (r *rawSQL) Sweep(ctx context.Context, db ledger.Execer, batch int) (int64, error) {
	return r.store.Sweep(ctx, db, batch)
}

// naiveLedger reads (a plain SELECT), then inserts if it found nothing:
// the classic check-then-act race. It re-acquires an expired entry with an UPDATE that
// does not check it is still expired.
type naiveLedger struct{ *rawSQL }

func (n naiveLedger) Claim(ctx context.Context, tx *sql.Tx, req ledger.ClaimRequest) (*ledger.Claim, error) {
	now := n.cfg.Clock()
	created, expires := now.UnixMicro(), now.Add(n.cfg.Retention).UnixMicro()
	idb := req.Identity.ID()
	e, err := n.read(ctx, tx, req.Identity)
	switch {
	case errors.Is(err, sql.ErrNoRows):
		if _, err := tx.ExecContext(ctx, n.plainInsert(), idb[:], req.Identity.Caller(), req.Identity.Method(), req.Fingerprint[:], created, expires); err != nil {
			return nil, n.fail("claim", err)
		}
		return ledger.NewAcquired(req.Identity, tx), nil
	case err != nil:
		return nil, n.fail("claim", err)
	case e.expires <= created:
		upd := "UPDATE " + n.d.QuoteIdent(n.table) + " SET request_fp = " + n.ph(1) + ", created_at = " + n.ph(2) + ", expires_at = " + n.ph(3) +
			", code = NULL, response = NULL, response_type = NULL, completed_at = NULL WHERE id = " + n.ph(4)
		if _, err := tx.ExecContext(ctx, upd, req.Fingerprint[:], created, expires, idb[:]); err != nil {
			return nil, n.fail("claim", err)
		}
		return ledger.NewAcquired(req.Identity, tx), nil
	}
	return outcomeOf(e, req)
}

func (n naiveLedger) Complete(ctx context.Context, tx *sql.Tx, c *ledger.Claim, r ledger.Result) error {
	return n.complete(ctx, tx, c, r)
}

// ownTxLedger claims correctly (insert first, read on conflict) but in a
// transaction of its own, committed at once, and completes in the
// caller's: the claim no longer commits or rolls back with the mutation.
type ownTxLedger struct {
	*rawSQL
	db *sql.DB
}

func (o ownTxLedger) Claim(ctx context.Context, tx *sql.Tx, req ledger.ClaimRequest) (*ledger.Claim, error) {
	own, err := o.db.BeginTx(ctx, nil)
	if err != nil {
		return nil, o.fail("claim", err)
	}
	defer own.Rollback()
	c, err := o.store.Claim(ctx, own, req)
	if err != nil {
		return nil, err
	}
	if err := own.Commit(); err != nil {
		return nil, o.fail("claim", err)
	}
	if c.Acquired() {
		// Completed later in the caller's transaction.
		return ledger.NewAcquired(req.Identity, tx), nil
	}
	return c, nil
}

func (o ownTxLedger) Complete(ctx context.Context, tx *sql.Tx, c *ledger.Claim, r ledger.Result) error {
	return o.complete(ctx, tx, c, r)
}

// ownTxRecorder is a correct claim-first ledger (the Store's Claim and
// Complete) whose claim-at-commit Record inserts the completed entry
// correctly (insert first, read on conflict) but in a transaction of its
// own, committed at once: the entry no longer commits or rolls back with
// the caller's work.
type ownTxRecorder struct {
	*rawSQL
	db *sql.DB
}

func (o ownTxRecorder) Claim(ctx context.Context, tx *sql.Tx, req ledger.ClaimRequest) (*ledger.Claim, error) {
	return o.store.Claim(ctx, tx, req)
}

func (o ownTxRecorder) Complete(ctx context.Context, tx *sql.Tx, c *ledger.Claim, r ledger.Result) error {
	return o.store.Complete(ctx, tx, c, r)
}

func (o ownTxRecorder) Record(ctx context.Context, tx *sql.Tx, req ledger.ClaimRequest, r ledger.Result) (*ledger.Claim, error) {
	own, err := o.db.BeginTx(ctx, nil)
	if err != nil {
		return nil, o.fail("record", err)
	}
	defer own.Rollback()
	c, err := o.store.Record(ctx, own, req, r)
	if err != nil {
		return nil, err
	}
	if err := own.Commit(); err != nil {
		return nil, o.fail("record", err)
	}
	if c.Recorded() {
		return ledger.NewRecorded(req.Identity, tx), nil
	}
	return c, nil
}

// badTarget returns tg with its ledger replaced.
func badTarget(tg conformance.Target, kind string) conformance.Target {
	tg.Name += "/" + kind
	d, db := tg.Dialect, tg.DB
	tg.NewLedger = func(cfg conformance.LedgerConfig) (ledger.Ledger, error) {
		r, err := newRawSQL(d, cfg)
		if err != nil {
			return nil, err
		}
		switch kind {
		case "naive":
			return naiveLedger{r}, nil
		case "own-tx":
			return ownTxLedger{r, db}, nil
		case "own-tx-record":
			return ownTxRecorder{r, db}, nil
		}
		return nil, fmt.Errorf("unknown ledger %q", kind)
	}
	return tg
}
