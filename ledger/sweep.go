package ledger

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/opledger/opledger/dialects"
	"github.com/opledger/opledger/internal/dialectkit"
	"github.com/opledger/opledger/internal/ledgerkit"
	"github.com/opledger/opledger/internal/options"
)

// Execer is what Sweep deletes through: *sql.DB and *sql.Conn satisfy it,
// and so does *sql.Tx.
type Execer interface {
	ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
}

// beginner is what Sweep begins each batch's transaction on: *sql.DB and
// *sql.Conn.
type beginner interface {
	BeginTx(ctx context.Context, opts *sql.TxOptions) (*sql.Tx, error)
}

// rowQuerier is what Sweep reads through, when db has it: *sql.DB,
// *sql.Conn and *sql.Tx.
type rowQuerier interface {
	QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error)
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
}

// WithSweepLockWait bounds how long each of Sweep's statements waits for
// an entry (or, on SQLite, the database) that another open transaction
// holds, to about d (rounded up as dialects.LockWaiter rounds it: whole
// seconds on MySQL and TiDB). Each batch then runs in a transaction begun
// with the dialect's LockWaiter, so Sweep needs a *sql.DB. Without it a
// statement waits as long as the database lets it (InnoDB's
// innodb_lock_wait_timeout, 50 s by default; SQLite's busy_timeout).
// Either way a held entry is skipped, not a failure of the batch: see
// Sweep. d must be positive, and the dialect must implement
// dialects.LockWaiter.
func WithSweepLockWait(d time.Duration) Option {
	return Option{options.New("WithSweepLockWait", func(c *config) error {
		if d <= 0 {
			return errors.New("sweep lock wait must be positive")
		}
		c.sweepWait = d
		return nil
	})}
}

// HeldError is Sweep's report that it left expired entries behind because
// other open transactions held them: a claim taking an entry over, another
// sweep deleting it, or (SQLite) a writer holding the database. Sweep
// deleted every other expired entry it could reach; what it left waits for
// the next run (an entry taken over is not expired any more by then). It
// matches ErrInProgress.
type HeldError struct {
	// Held is how many expired entries were still there after the sweep
	// (counted then, so an approximation when claims and other sweeps
	// run alongside).
	Held int64
	// Err is the lock timeout that stopped the sweep, when one did: on
	// SQLite (whose one writer holds the whole database) and for a
	// dialect that cannot go on entry by entry (dialects.Queries'
	// SweepScan); nil when the sweep skipped the held entries one by one
	// (MySQL, TiDB) or the database skips them itself (PostgreSQL's SKIP
	// LOCKED).
	Err error
}

// Error says how many entries were left and why.
func (e *HeldError) Error() string {
	what := "entries"
	if e.Held == 1 {
		what = "entry"
	}
	msg := fmt.Sprintf("ledger: sweep: %d expired %s left for the next sweep: other open transactions hold them", e.Held, what)
	if e.Err != nil {
		msg += " (" + e.Err.Error() + ")"
	}
	return msg
}

// Unwrap returns the lock timeout that stopped the sweep, if any.
func (e *HeldError) Unwrap() error { return e.Err }

// Is reports whether target is ErrInProgress.
func (e *HeldError) Is(target error) bool { return target == ErrInProgress }

// Sweep deletes expired entries, at most batch per statement, until a
// batch comes back short. It returns how many it deleted. Each batch
// commits on its own, so no lock is held for longer than one batch: pass a
// *sql.DB or a *sql.Conn. For a dialect that implements
// dialectkit.TxChecker (MySQL, TiDB) each batch is an explicit transaction,
// begun on db, checked, and committed (TiDB runs an autocommit DELETE
// optimistically, which ignores the lock wait bound); for the others it
// is one autocommit statement. With WithSweepLockWait every batch is a
// transaction whose lock waits end after the bound. Given a *sql.Tx, the
// batches run inside it, and nothing commits until the caller does.
//
// An expired entry that another open transaction holds (a claim taking it
// over) does not fail the sweep. PostgreSQL skips it (SKIP LOCKED). On
// MySQL and TiDB a batch that waits past the bound goes on entry by entry
// (dialects.Queries' SweepScan and SweepOne): each other entry is deleted,
// the held one waits the bound once more and is skipped. On SQLite a
// writer holds the whole database: the sweep stops at the first batch
// that waits past the bound. Whatever was left held, Sweep returns with
// the entries it deleted and a *HeldError (matching ErrInProgress) that
// counts the expired entries still there.
//
// On a table partitioned by the key's birth (PostgreSQL, MySQL and
// MariaDB: the migrations partition a new table), given a *sql.DB or a
// *sql.Conn, Sweep drops each bucket of births whole once its end plus
// the retention plus the clock skew has passed (every key it can hold is
// then refused as expired), creates the buckets of the coming births
// ahead of time, and deletes as above only in the partitions of keys
// without a known birth and of births without a bucket; an expired entry
// of a key with a birth stays until its bucket is dropped. The entries of
// a dropped bucket count in the total as the database's catalog
// estimates them. See docs/operations.md.
func (s *Store) Sweep(ctx context.Context, db Execer, batch int) (int64, error) {
	if db == nil {
		return 0, invalid("tx", "database must not be nil")
	}
	if batch <= 0 {
		return 0, invalid("option", "batch must be positive")
	}
	if _, ok := db.(*sql.DB); s.core.sweepWait > 0 && !ok {
		return 0, invalid("tx", "WithSweepLockWait needs Sweep on a *sql.DB (each batch begins a bounded transaction)")
	}
	if pt, ok := s.core.d.(dialectkit.Partitioner); ok {
		if pdb, ok := partitionDB(db); ok {
			if n, handled, err := s.sweepPartitioned(ctx, pt, pdb, batch); handled {
				return n, err
			}
		}
	}
	return s.deleteSweep(ctx, db, batch, &s.core.q)
}

// deleteSweep is Sweep's DELETE, in batches, with q's Sweep (and, after a
// held entry, SweepScan and SweepOne one by one): of the whole table, or of
// one partition of a partitioned table (dialectkit.Partitioner's
// SweepQueries).
func (s *Store) deleteSweep(ctx context.Context, db Execer, batch int, q *dialects.Queries) (int64, error) {
	var (
		total    int64
		cutoff   time.Time
		skipped  = map[string]bool{} // entries held past the bound, by id
		oneByOne bool
	)
	for {
		if err := ctx.Err(); err != nil {
			return total, err
		}
		cutoff = s.core.now()
		if !oneByOne {
			n, err := s.sweepBatch(ctx, q, db, batch, cutoff)
			total += n
			switch {
			case err == nil && n < int64(batch):
				return total, s.held(ctx, q, db, cutoff, nil, len(skipped))
			case err == nil:
				continue
			case !errors.Is(err, ErrInProgress) || ctx.Err() != nil:
				return total, err
			case q.SweepScan == "" || q.SweepOne == "":
				return total, s.held(ctx, q, db, cutoff, err, 0)
			}
			// A held entry: go on one by one for the rest of this sweep (a
			// batch would meet the same entry again).
			oneByOne = true
		}
		n, more, err := s.sweepEach(ctx, q, db, batch, cutoff, skipped)
		total += n
		if err != nil {
			return total, err
		}
		if !more {
			return total, s.held(ctx, q, db, cutoff, nil, len(skipped))
		}
	}
}

// partitionDB returns db as the handle a dialectkit.Partitioner runs on,
// when it is a *sql.DB or a *sql.Conn (partitions are never created or
// dropped inside a caller's transaction).
func partitionDB(db Execer) (dialectkit.DB, bool) {
	switch h := db.(type) {
	case *sql.DB:
		return h, true
	case *sql.Conn:
		return h, true
	}
	return nil, false
}

// held is Sweep's report (see [txStore.held]), counting through db when
// it can read.
func (s *Store) held(ctx context.Context, q *dialects.Queries, db Execer, cutoff time.Time, stop error, skipped int) error {
	var queryRow func(ctx context.Context, query string, args ...any) ledgerkit.Row
	if q, ok := db.(rowQuerier); ok {
		queryRow = func(ctx context.Context, query string, args ...any) ledgerkit.Row {
			return q.QueryRowContext(ctx, query, args...)
		}
	}
	return s.core.held(ctx, q, queryRow, cutoff, stop, skipped)
}

// held is a sweep's report: a *HeldError when expired entries are left at
// cutoff (counted with the dialect's CountExpired when it has one and
// queryRow is not nil, else the skipped count), stop when nothing tells,
// else nil.
func (s *txStore[TX]) held(ctx context.Context, q *dialects.Queries, queryRow func(ctx context.Context, query string, args ...any) ledgerkit.Row, cutoff time.Time, stop error, skipped int) error {
	n := int64(skipped)
	counted := queryRow != nil && q.CountExpired != ""
	if counted {
		if err := queryRow(ctx, q.CountExpired, micros(cutoff)).Scan(&n); err != nil {
			return s.fail(ctx, "sweep", err)
		}
	}
	switch {
	case n > 0:
		return &HeldError{Held: n, Err: stop}
	case q.CountExpired == "":
		return stop
	}
	return nil
}

// SweepWith deletes expired entries with exec, a function that runs a
// statement outside the caller's transactions and returns the rows it
// deleted, at most batch per statement, until a batch comes back short,
// and returns how many it deleted: what [Store.Sweep] does on a dialect
// without dialectkit.TxChecker whose Sweep statement skips held entries
// (PostgreSQL's SKIP LOCKED). Package pgxledger's Sweep is built on it.
// exec bounds each statement's lock waits to [txStore.SweepLockWait]
// when that is set (the store cannot: the transaction is exec's). When
// queryRow is not nil and the dialect can count expired entries
// (dialects.Queries' CountExpired), the entries left because other
// transactions held them are reported as Store.Sweep reports them: a
// *HeldError, matching ErrInProgress; a batch that waited past the bound
// (ErrInProgress) stops the sweep with such a report too. It does not go
// on entry by entry (dialects.Queries' SweepScan), which only
// [Store.Sweep] does.
//
// When parts is not nil and the dialect is a dialectkit.Partitioner, a
// table partitioned by born_at is swept as Store.Sweep sweeps it (see
// [txStore.sweepPartitioned]): its buckets are dropped and created
// through parts (a *sql.DB or a *sql.Conn on the same database, which
// runs statements outside any transaction), and exec and queryRow delete
// and count only in the partitions of keys without a known birth or a
// bucket. With parts nil, or on a table not partitioned that way, exec
// deletes in the whole table.
func (s *txStore[TX]) SweepWith(ctx context.Context, exec func(ctx context.Context, query string, args ...any) (int64, error), queryRow func(ctx context.Context, query string, args ...any) ledgerkit.Row, parts dialectkit.DB, batch int) (int64, error) {
	if exec == nil {
		return 0, invalid("tx", "database must not be nil")
	}
	if batch <= 0 {
		return 0, invalid("option", "batch must be positive")
	}
	if pt, ok := s.d.(dialectkit.Partitioner); ok && parts != nil {
		n, handled, err := s.sweepPartitioned(ctx, pt, parts, func(ctx context.Context, q *dialects.Queries) (int64, error) {
			return s.sweepWith(ctx, q, exec, queryRow, batch)
		})
		if handled {
			return n, err
		}
	}
	return s.sweepWith(ctx, &s.q, exec, queryRow, batch)
}

// sweepWith is SweepWith's DELETE, in batches, with q's Sweep: of the
// whole table, or of one partition of a partitioned table.
func (s *txStore[TX]) sweepWith(ctx context.Context, q *dialects.Queries, exec func(ctx context.Context, query string, args ...any) (int64, error), queryRow func(ctx context.Context, query string, args ...any) ledgerkit.Row, batch int) (int64, error) {
	var total int64
	for {
		if err := ctx.Err(); err != nil {
			return total, err
		}
		cutoff := s.now()
		n, err := exec(ctx, q.Sweep, micros(cutoff), batch)
		if err != nil {
			err = s.fail(ctx, "sweep", err)
			if !errors.Is(err, ErrInProgress) || ctx.Err() != nil {
				return total, err
			}
			return total, s.held(ctx, q, queryRow, cutoff, err, 0)
		}
		total += n
		if n < int64(batch) {
			return total, s.held(ctx, q, queryRow, cutoff, nil, 0)
		}
	}
}

// sweepTx begins one of Sweep's transactions on db: bounded by the sweep's
// lock wait when it has one (db is then a *sql.DB), else plain. release
// is never nil.
func (s *Store) sweepTx(ctx context.Context, b beginner) (*sql.Tx, func(), error) {
	if s.core.sweepWait > 0 {
		tx, release, err := s.core.waiter.BeginBounded(ctx, b.(*sql.DB), nil, s.core.sweepWait)
		if err != nil {
			return nil, func() {}, s.core.fail(ctx, "sweep", err)
		}
		return tx, release, nil
	}
	tx, err := b.BeginTx(ctx, nil)
	if err != nil {
		return nil, func() {}, s.core.fail(ctx, "sweep", err)
	}
	return tx, func() {}, nil
}

// sweepBatch deletes one batch: in a transaction of its own when the
// sweep has a lock wait or the dialect a TxChecker and db can begin one,
// else in one statement.
func (s *Store) sweepBatch(ctx context.Context, q *dialects.Queries, db Execer, batch int, cutoff time.Time) (int64, error) {
	b, ok := db.(beginner)
	if !ok || (s.checker == nil && s.core.sweepWait == 0) {
		if tx, isTx := db.(*sql.Tx); isTx {
			if err := s.check(ctx, "sweep", tx); err != nil {
				return 0, err
			}
		}
		return s.sweepExec(ctx, q, db, batch, cutoff)
	}
	tx, release, err := s.sweepTx(ctx, b)
	defer release()
	if err != nil {
		return 0, err
	}
	defer tx.Rollback()
	if err := s.check(ctx, "sweep", tx); err != nil {
		return 0, err
	}
	n, err := s.sweepExec(ctx, q, tx, batch, cutoff)
	if err != nil {
		return 0, err
	}
	if err := tx.Commit(); err != nil {
		return 0, s.core.fail(ctx, "sweep", err)
	}
	return n, nil
}

func (s *Store) sweepExec(ctx context.Context, q *dialects.Queries, db Execer, batch int, cutoff time.Time) (int64, error) {
	res, err := db.ExecContext(ctx, q.Sweep, micros(cutoff), batch)
	if err != nil {
		return 0, s.core.fail(ctx, "sweep", err)
	}
	n, err := res.RowsAffected()
	if err != nil {
		return 0, s.core.fail(ctx, "sweep", err)
	}
	return n, nil
}

// sweepEach deletes up to batch expired entries one by one (SweepScan,
// then SweepOne each, in one transaction), skipping those in skipped and
// adding to it those that wait past the bound or lose a deadlock. It
// reports whether more entries may be left to sweep.
func (s *Store) sweepEach(ctx context.Context, q *dialects.Queries, db Execer, batch int, cutoff time.Time, skipped map[string]bool) (n int64, more bool, err error) {
	rq, ok := db.(rowQuerier)
	if !ok {
		return 0, false, invalid("tx", "the sweep cannot read through this database handle")
	}
	limit := batch + len(skipped)
	ids, listed, err := s.sweepScan(ctx, q, rq, limit, cutoff, skipped)
	if err != nil || len(ids) == 0 {
		return 0, false, err
	}
	more = listed == limit || len(ids) > batch
	ids = ids[:min(len(ids), batch)]
	var tx *sql.Tx
	if b, ok := db.(beginner); ok {
		t, release, err := s.sweepTx(ctx, b)
		defer release()
		if err != nil {
			return 0, false, err
		}
		defer t.Rollback()
		tx = t
	} else if tx, ok = db.(*sql.Tx); !ok {
		return 0, false, invalid("tx", "the sweep cannot begin a transaction on this database handle")
	}
	if err := s.check(ctx, "sweep", tx); err != nil {
		return 0, false, err
	}
	n, progress, again, err := s.sweepIDs(ctx, q, tx, ids, cutoff, skipped)
	if err != nil || again {
		return 0, again, err
	}
	if _, own := db.(beginner); own {
		if err := tx.Commit(); err != nil {
			return 0, false, s.core.fail(ctx, "sweep", err)
		}
	}
	// A pass that deleted and skipped nothing met only entries that others
	// deleted or took over meanwhile: the scan will not bring new ones.
	return n, more && progress, nil
}

// sweepIDs deletes each of ids in tx if it is still expired, adding to
// skipped those that wait past the bound or lose a deadlock. progress
// says it deleted or skipped one; again, that a deadlock or write conflict
// rolled tx back, so that the caller sweeps the rest again.
func (s *Store) sweepIDs(ctx context.Context, q *dialects.Queries, tx *sql.Tx, ids [][]byte, cutoff time.Time, skipped map[string]bool) (n int64, progress, again bool, err error) {
	for _, id := range ids {
		res, err := tx.ExecContext(ctx, q.SweepOne, id, micros(cutoff))
		if err == nil {
			k, _ := res.RowsAffected()
			n += k
			progress = progress || k > 0
			continue
		}
		err = s.core.fail(ctx, "sweep", err)
		switch {
		case ctx.Err() != nil:
			return 0, false, false, err
		case errors.Is(err, ErrInProgress):
			// Only the statement rolled back (InnoDB with
			// innodb_rollback_on_timeout=OFF, its default; TiDB).
			skipped[string(id)] = true
			progress = true
		case errors.Is(err, ErrRetryable):
			// A deadlock or write conflict rolled the whole transaction
			// back: skip the entry, and sweep the rest again.
			skipped[string(id)] = true
			return 0, false, true, nil
		default:
			return 0, false, false, err
		}
	}
	return n, progress, false, nil
}

// sweepScan lists at most limit expired entries, oldest first, and
// returns their ids but those in skip, and how many it listed.
func (s *Store) sweepScan(ctx context.Context, q *dialects.Queries, rq rowQuerier, limit int, cutoff time.Time, skip map[string]bool) (ids [][]byte, listed int, err error) {
	rows, err := rq.QueryContext(ctx, q.SweepScan, micros(cutoff), limit)
	if err != nil {
		return nil, 0, s.core.fail(ctx, "sweep", err)
	}
	defer rows.Close()
	for rows.Next() {
		var id []byte
		if err := rows.Scan(&id); err != nil {
			return nil, 0, s.core.fail(ctx, "sweep", err)
		}
		listed++
		if !skip[string(id)] {
			ids = append(ids, id)
		}
	}
	if err := rows.Err(); err != nil {
		return nil, 0, s.core.fail(ctx, "sweep", err)
	}
	return ids, listed, nil
}
