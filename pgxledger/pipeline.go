package pgxledger

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/opledger/opledger/internal/txledger"
	"github.com/opledger/opledger/ledger"
	"github.com/opledger/opledger/txmiddleware"
)

var (
	errNilPool = fmt.Errorf("pgxledger: pool must not be nil: %w", ledger.ErrInvalid)
	// errRunnerEnds is what the work of a Runner gets from Commit or
	// Rollback on its transaction: the runner ends it.
	errRunnerEnds = errors.New("pgxledger: the runner commits or rolls back the work's transaction; the work must not")
)

// ptx is a transaction begun by the Store on a connection it acquired
// from a pool (Begin, BeginClaim), which the Store can end with a COMMIT
// or ROLLBACK sent in a batch with the ledger's statement: it then
// releases the connection itself, and the transaction behaves as closed.
type ptx struct {
	pgx.Tx // open: the transaction the batch began; once ended: a closed one
	c      *pgxpool.Conn
	s      *Store
	pool   *pgxpool.Pool // c's
	// prepare: the connection caches prepared statements, so the Store's
	// are sent prepared under its own names.
	prepare bool
	// owned: a Runner's; Commit and Rollback from its work fail.
	owned bool
}

// stmt returns what to queue for query on t's connection: the name it is
// prepared under (preparing it on first use), or the text itself.
func (t *ptx) stmt(ctx context.Context, query string) (string, error) {
	return t.s.stmt(ctx, t.c.Conn(), t.prepare, query)
}

// stmt returns what to queue for query on conn: with prepare set, the
// name it is prepared under on conn (preparing it on first use: a round
// trip, once per connection), else the text itself. The completion of a
// given hour of birth (Store.hourly) is queued as text: with prepare set,
// pgx's statement cache prepares it on first use, a round trip once per
// connection and hour, and bounds how many such texts a connection keeps.
func (s *Store) stmt(ctx context.Context, conn *pgx.Conn, prepare bool, query string) (string, error) {
	if !prepare || s.hourly != "" && strings.HasPrefix(query, s.hourly) {
		return query, nil
	}
	name := s.name(query)
	if _, err := conn.Prepare(ctx, name, query); err != nil {
		return "", err
	}
	return name, nil
}

// warm prepares the statements a pipelined transaction on conn may need
// once it is aborted (see Store.always), on conn's first one.
func (s *Store) warm(ctx context.Context, conn *pgx.Conn, prepare bool) error {
	for _, q := range s.always {
		if _, err := s.stmt(ctx, conn, prepare, q); err != nil {
			return err
		}
	}
	return nil
}

// Commit commits the transaction and releases its connection.
func (t *ptx) Commit(ctx context.Context) error {
	if t.owned {
		return errRunnerEnds
	}
	return t.commit(ctx)
}

// Rollback rolls the transaction back and releases its connection; after
// the transaction ended it returns an error matching pgx.ErrTxClosed.
func (t *ptx) Rollback(ctx context.Context) error {
	if t.owned {
		return errRunnerEnds
	}
	return t.rollback(ctx)
}

func (t *ptx) commit(ctx context.Context) error {
	if t.c == nil {
		return pgx.ErrTxClosed
	}
	err := t.Tx.Commit(ctx)
	t.end()
	return err
}

func (t *ptx) rollback(ctx context.Context) error {
	if t.c == nil {
		return pgx.ErrTxClosed
	}
	err := t.Tx.Rollback(ctx)
	t.end()
	return err
}

// end releases the connection (the pool destroys it unless it is idle
// outside a transaction) and closes the transaction.
func (t *ptx) end() {
	t.Tx = t.s.closed
	if t.c != nil {
		t.c.Release()
		t.c = nil
	}
}

// pipeline is txledger.Pipeline on pgx: batches sent on a connection of a
// pool.
type pipeline struct {
	s     *Store
	pool  *pgxpool.Pool
	opts  pgx.TxOptions
	owned bool
	// held, when set, is a connection a Runner acquired within its
	// lock-wait bound, which the pipeline's first transaction begins on.
	held *heldConn
}

// heldConn is a connection acquired before the pipeline needs it, taken
// by the first acquire.
type heldConn struct{ c *pgxpool.Conn }

// take returns the connection, once.
func (h *heldConn) take() *pgxpool.Conn {
	c := h.c
	h.c = nil
	return c
}

// release releases the connection unless it was taken.
func (h *heldConn) release() {
	if c := h.take(); c != nil {
		c.Release()
	}
}

var _ txledger.Pipeline[pgx.Tx] = pipeline{}

func (s *Store) pipeline(pool *pgxpool.Pool, opts pgx.TxOptions, owned bool) pipeline {
	return pipeline{s: s, pool: pool, opts: opts, owned: owned}
}

func (p pipeline) acquire(ctx context.Context) (*pgxpool.Conn, error) {
	if p.held != nil {
		if c := p.held.take(); c != nil {
			return c, nil
		}
	}
	if p.pool == nil {
		return nil, errNilPool
	}
	return p.pool.Acquire(ctx)
}

func (p pipeline) wrap(tx pgx.Tx, c *pgxpool.Conn) *ptx {
	return &ptx{Tx: tx, c: c, s: p.s, pool: p.pool, prepare: p.s.prepared(p.pool), owned: p.owned}
}

// pipelineOf is the pipeline that ends tx: its pool's, when it is one of
// the Store's own transactions.
func (s *Store) pipelineOf(tx pgx.Tx) pipeline {
	if t, ok := tx.(*ptx); ok {
		return pipeline{s: s, pool: t.pool, owned: t.owned}
	}
	return pipeline{s: s}
}

// Begin begins a transaction on a connection of its own.
func (p pipeline) Begin(ctx context.Context) (pgx.Tx, error) {
	c, err := p.acquire(ctx)
	if err != nil {
		return nil, err
	}
	if err := p.s.warm(ctx, c.Conn(), p.s.prepared(p.pool)); err != nil {
		c.Release()
		return nil, err
	}
	tx, err := c.Conn().BeginTx(ctx, p.opts)
	if err != nil {
		c.Release()
		return nil, err
	}
	return p.wrap(tx, c), nil
}

// BeginExec sends BEGIN and query in one batch.
func (p pipeline) BeginExec(ctx context.Context, query string, args ...any) (pgx.Tx, int64, error) {
	c, err := p.acquire(ctx)
	if err != nil {
		return nil, 0, err
	}
	prepare := p.s.prepared(p.pool)
	q, err := p.s.stmt(ctx, c.Conn(), prepare, query)
	if err == nil {
		err = p.s.warm(ctx, c.Conn(), prepare)
	}
	if err != nil {
		c.Release()
		return nil, 0, err
	}
	b := &pgx.Batch{}
	b.BeginTx(p.opts)
	b.Queue(q, args...)
	br := c.Conn().SendBatch(ctx, b)
	tx := br.Tx()
	_, berr := br.Exec()
	tag, qerr := br.Exec()
	cerr := br.Close()
	t := p.wrap(tx, c)
	if err := errors.Join(berr, qerr, cerr); err != nil {
		if c.Conn().PgConn().TxStatus() != 'I' {
			_ = t.rollback(ctx)
		}
		t.end()
		return nil, 0, firstErr(berr, qerr, cerr)
	}
	return t, tag.RowsAffected(), nil
}

// Owns reports whether tx is one of the Store's own transactions, still
// open.
func (p pipeline) Owns(tx pgx.Tx) bool {
	t, ok := tx.(*ptx)
	return ok && t.c != nil
}

// ExecCommit sends query and COMMIT in one batch on one of the Store's
// own transactions.
func (p pipeline) ExecCommit(ctx context.Context, tx pgx.Tx, query string, args ...any) (execErr, commitErr error) {
	t, ok := tx.(*ptx)
	if !ok || t.c == nil {
		return pgx.ErrTxClosed, nil
	}
	q, err := t.stmt(ctx, query)
	if err != nil {
		return err, nil
	}
	commit, err := t.stmt(ctx, "commit")
	if err != nil {
		return err, nil
	}
	b := &pgx.Batch{}
	b.Queue(q, args...)
	b.Queue(commit)
	br := t.Tx.SendBatch(ctx, b)
	_, qerr := br.Exec()
	tag, cerr := br.Exec()
	closeErr := br.Close()
	var pgErr *pgconn.PgError
	switch {
	case qerr != nil && errors.As(qerr, &pgErr):
		// The statement failed: the COMMIT after it did not run, and the
		// transaction is still open, aborted.
		return qerr, nil
	case qerr != nil:
		// The connection broke or the context ended with the batch in
		// flight: the COMMIT may have run, unless nothing was sent.
		t.end()
		return nil, p.commitErr(qerr)
	case cerr == nil && tag.String() == "COMMIT":
		t.end()
		return nil, nil
	case cerr == nil:
		t.end()
		return nil, p.commitErr(fmt.Errorf("%w (COMMIT answered %q)", pgx.ErrTxCommitRollback, tag.String()))
	}
	t.end()
	return nil, p.commitErr(firstErr(cerr, closeErr))
}

// commitErr sorts a failed COMMIT: refused by the database (a definite
// rollback, retried by a runner when transient), not sent (not committed),
// or unknown (the connection broke or the context ended while it was in
// flight). A refused COMMIT is a *ledger.DBError made by txledger.NewDBError,
// so it carries the dialect's explanation: behind a transaction pooler the
// Store's prepared COMMIT (opledger_commit_…) can be missing on the server
// connection (26000), which matches postgres.ErrStatementPooling.
func (p pipeline) commitErr(err error) error {
	var pgErr *pgconn.PgError
	d := p.s.core.Dialect()
	switch {
	case err == nil:
		return nil
	case errors.Is(err, pgx.ErrTxClosed):
		return fmt.Errorf("pgxledger: commit: %w", err)
	case errors.Is(err, pgx.ErrTxCommitRollback) || errors.As(err, &pgErr):
		return txledger.NewDBError(d, "commit", err)
	case !pgconn.SafeToRetry(err):
		return fmt.Errorf("%w: %w", txmiddleware.ErrCommitUnknown, err)
	case errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded):
		return fmt.Errorf("pgxledger: commit not sent: %w", err)
	}
	return txledger.NewDBError(d, "commit", err)
}

// QueryRollback sends query and ROLLBACK in one batch when the row is
// scanned.
func (p pipeline) QueryRollback(ctx context.Context, tx pgx.Tx, query string, args ...any) txledger.Row {
	return p.endWith(ctx, tx, false, query, args)
}

// RollbackQuery sends ROLLBACK and query in one batch when the row is
// scanned.
func (p pipeline) RollbackQuery(ctx context.Context, tx pgx.Tx, query string, args ...any) txledger.Row {
	return p.endWith(ctx, tx, true, query, args)
}

// endWith is a row whose Scan sends query and ROLLBACK in one batch, the
// ROLLBACK first when first is set, and ends tx.
func (p pipeline) endWith(ctx context.Context, tx pgx.Tx, first bool, query string, args []any) txledger.Row {
	return rowFunc(func(dest ...any) error {
		t, ok := tx.(*ptx)
		if !ok || t.c == nil {
			return pgx.ErrTxClosed
		}
		q, err := t.stmt(ctx, query)
		if err != nil {
			_ = t.rollback(ctx)
			return err
		}
		rollback, err := t.stmt(ctx, "rollback")
		if err != nil {
			_ = t.rollback(ctx)
			return err
		}
		b := &pgx.Batch{}
		if first {
			b.Queue(rollback)
		}
		b.Queue(q, args...)
		if !first {
			b.Queue(rollback)
		}
		br := t.Tx.SendBatch(ctx, b)
		var rerr error
		if first {
			_, rerr = br.Exec()
			err = br.QueryRow().Scan(dest...)
		} else {
			err = br.QueryRow().Scan(dest...)
			_, rerr = br.Exec()
		}
		cerr := br.Close()
		if t.c.Conn().PgConn().TxStatus() != 'I' {
			_ = t.rollback(ctx) // the batch failed before its ROLLBACK ran
		}
		t.end()
		if err != nil {
			return err
		}
		return firstErr(rerr, cerr)
	})
}

// Commit commits tx.
func (p pipeline) Commit(ctx context.Context, tx pgx.Tx) error {
	if t, ok := tx.(*ptx); ok {
		return p.commitErr(t.commit(ctx))
	}
	return p.commitErr(tx.Commit(ctx))
}

// Rollback rolls tx back.
func (p pipeline) Rollback(ctx context.Context, tx pgx.Tx) error {
	if t, ok := tx.(*ptx); ok {
		return t.rollback(ctx)
	}
	return tx.Rollback(ctx)
}

// Exec runs query on a connection of the pool, outside any transaction.
func (p pipeline) Exec(ctx context.Context, query string, args ...any) (int64, error) {
	if p.pool == nil {
		return 0, errNilPool
	}
	tag, err := p.pool.Exec(ctx, query, args...)
	return tag.RowsAffected(), err
}

// rowFunc is a txledger.Row whose Scan does the work.
type rowFunc func(dest ...any) error

func (f rowFunc) Scan(dest ...any) error { return f(dest...) }

func firstErr(errs ...error) error {
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}
