package pgxledger

import (
	"context"
	"crypto/sha256"
	"database/sql"
	"encoding/hex"
	"fmt"
	"reflect"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/pgx/v5/stdlib"

	"github.com/opledger/opledger/dialects/postgres"
	"github.com/opledger/opledger/internal/dialectkit"
	"github.com/opledger/opledger/internal/pgdialect"
	"github.com/opledger/opledger/internal/pgxkit"
	"github.com/opledger/opledger/internal/txledger"
	"github.com/opledger/opledger/ledger"
)

// Querier is what Lookup reads through: *pgxpool.Pool, *pgxpool.Conn,
// *pgx.Conn and pgx.Tx all satisfy it.
type Querier interface {
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// Execer is what Sweep deletes through: *pgxpool.Pool, *pgxpool.Conn and
// *pgx.Conn (each batch an autocommit statement), or a pgx.Tx (the
// batches commit with it). On a table partitioned by birth, Sweep creates
// and drops the buckets through a *pgxpool.Pool only (see
// [Store.Sweep]).
type Execer interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
}

var (
	_ Querier = (*pgxpool.Pool)(nil)
	_ Querier = (*pgx.Conn)(nil)
	_ Querier = pgx.Tx(nil)
	_ Execer  = (*pgxpool.Pool)(nil)

	_ txledger.TxRecorder[pgx.Tx] = (*Store)(nil)

	_ beginner = (*pgxpool.Pool)(nil)
	_ beginner = (*pgxpool.Conn)(nil)
	_ beginner = (*pgx.Conn)(nil)
)

// Store is the operation ledger on pgx, with the PostgreSQL dialect: the
// same ledger as [ledger.Store] (the same implementation, table,
// migrations, SQL and outcomes) for code that holds a pgx.Tx. Claim,
// Complete and Record run in the caller's transaction, one statement
// each; BeginClaim, CompleteCommit and RecordCommit send the claim with
// BEGIN and the completion or the record with COMMIT, one round trip each.
// A Store holds no connection and is safe for concurrent use.
type Store struct {
	core *txledger.Store[pgx.Tx]
	// closed is an ended transaction: what a transaction the Store ended
	// without pgx knowing (a COMMIT sent in a batch) turns into.
	closed pgx.Tx
	// names maps the SQL of a pipelined statement to the name it is
	// prepared under.
	names sync.Map // string → string
	// always are the pipelined statements prepared on a connection before
	// its first pipelined transaction, as they may be needed when the
	// transaction is aborted (the entry's read-back, COMMIT and ROLLBACK),
	// when nothing but a ROLLBACK can be prepared.
	always []string
	// hourly starts the pipelined completion, up to where the hour of the
	// key's birth ends its WHERE (see dialectkit.BirthQueries.PruneByHour):
	// a text per hour, which goes to pgx's own statement cache, bounded
	// and deallocating what it evicts, instead of a name of the Store's.
	hourly string
	// prepares records, per pool, whether its connections cache prepared
	// statements (pgx.QueryExecModeCacheStatement, the default).
	prepares sync.Map // *pgxpool.Pool → bool
}

// prepared reports whether pool's connections cache prepared statements:
// the pipelined statements are then prepared under names of the Store's
// own, which a failed batch does not evict from pgx's statement cache
// (a conflicting record fails by design). In any other mode (exec,
// behind a pooler) they are sent as text.
func (s *Store) prepared(pool *pgxpool.Pool) bool {
	if v, ok := s.prepares.Load(pool); ok {
		return v.(bool)
	}
	v := pool.Config().ConnConfig.DefaultQueryExecMode == pgx.QueryExecModeCacheStatement
	s.prepares.Store(pool, v)
	return v
}

// name is the name the pipelined statement query is prepared under.
func (s *Store) name(query string) string {
	if v, ok := s.names.Load(query); ok {
		return v.(string)
	}
	sum := sha256.Sum256([]byte(query))
	word, _, _ := strings.Cut(strings.TrimSpace(query), " ")
	v, _ := s.names.LoadOrStore(query, "opledger_"+strings.ToLower(word)+"_"+hex.EncodeToString(sum[:12]))
	return v.(string)
}

func init() {
	pgxkit.StoreBegin = func(s any, ctx context.Context, pool *pgxpool.Pool, opts pgx.TxOptions) (pgx.Tx, error) {
		return s.(*Store).begin(ctx, pool, opts)
	}
	pgxkit.StoreRecordCommit = func(s any, ctx context.Context, tx pgx.Tx, req ledger.ClaimRequest, r ledger.Result) (*ledger.Claim, error) {
		return s.(*Store).recordCommit(ctx, tx, req, r)
	}
}

// New returns a Store with the ledger's options (table, retention, result
// size limit, clock, telemetry). Bad options match ledger.ErrInvalid.
func New(opts ...ledger.Option) (*Store, error) {
	core, err := txledger.New[pgx.Tx](postgres.New(), pgxkit.Driver{}, opts...)
	if err != nil {
		return nil, err
	}
	b := &pgx.Batch{}
	b.BeginTx(pgx.TxOptions{})
	d := pgdialect.New()
	s := &Store{
		core:   core,
		closed: pgx.FailedBatchResults(b, pgx.ErrTxClosed).Tx(),
		always: []string{d.BirthQueries(core.Table()).Select, "commit", "rollback"},
	}
	if pq, ok := d.PipelineQueries(core.Table(), 0); ok && d.BirthQueries(core.Table()).PruneByHour && pq.CompleteHour > 0 {
		s.hourly = pq.Complete[:pq.CompleteHour]
	}
	return s, nil
}

// Claim claims req.Identity inside tx, the caller's transaction, in one
// statement (the plain insert; on a conflict only, the entry read back):
// the outcomes of [ledger.Store.Claim]. pgx.Tx is an interface that only
// transactions implement (neither *pgxpool.Pool nor *pgx.Conn nor
// *pgxpool.Conn does), so the claim cannot run outside one.
func (s *Store) Claim(ctx context.Context, tx pgx.Tx, req ledger.ClaimRequest) (*ledger.Claim, error) {
	return s.core.Claim(ctx, tx, req)
}

// Complete records r as the result of c in tx, which must be the
// transaction that acquired c: the outcomes of [ledger.Store.Complete].
func (s *Store) Complete(ctx context.Context, tx pgx.Tx, c *ledger.Claim, r ledger.Result) error {
	return s.core.Complete(ctx, tx, c, r)
}

// Record inserts req's identity already completed with r inside tx, as
// the last statement before COMMIT (claim at commit): the outcomes of
// [ledger.Store.Record].
func (s *Store) Record(ctx context.Context, tx pgx.Tx, req ledger.ClaimRequest, r ledger.Result) (*ledger.Claim, error) {
	return s.core.Record(ctx, tx, req, r)
}

// Lookup reads the committed entry for id through q (a pool, a
// connection or a transaction) without claiming or locking it: the
// outcomes of [ledger.Store.Lookup].
func (s *Store) Lookup(ctx context.Context, q Querier, id ledger.Identity) (*ledger.Entry, error) {
	if isNil(q) {
		return s.core.LookupWith(ctx, nil, id)
	}
	return s.core.LookupWith(ctx, func(ctx context.Context, query string, args ...any) txledger.Row {
		return q.QueryRow(ctx, query, args...)
	}, id)
}

// Sweep deletes expired entries through db, at most batch per statement,
// until a batch comes back short, and returns how many it deleted. On a
// pool or a connection each batch is an autocommit statement, so no lock
// is held for longer than one batch; given a pgx.Tx, the batches run in
// it and commit with it. It skips rows another transaction has locked
// (a claim taking an expired entry over) and then, as
// [ledger.Store.Sweep] does, returns with the entries it deleted and a
// *ledger.HeldError (matching ledger.ErrInProgress) counting the expired
// entries still there. With ledger.WithSweepLockWait each batch is a
// transaction of its own whose lock waits end after the bound (SET LOCAL
// lock_timeout), so db must be able to begin one outside the caller's
// transactions: a *pgxpool.Pool, *pgxpool.Conn or *pgx.Conn, not a
// pgx.Tx.
//
// On a table partitioned by the key's birth (the migrations partition a
// new table), given a *pgxpool.Pool, Sweep does what [ledger.Store.Sweep]
// does there, by the same code: it drops each bucket of births whole once
// its end plus the retention plus the clock skew has passed, creates the
// buckets of the coming births ahead of time, and deletes as above only
// in the partitions of keys without a known birth and of births without
// a bucket; the entries of a dropped bucket count in the total as the
// catalog estimates them. It changes the partitions through a
// database/sql handle over the pool (stdlib.OpenDBFromPool: its
// statements take the pool's connections, outside any transaction, and
// it is closed before Sweep returns, leaving the pool open). Given a
// pgx.Tx it deletes expired entries in every partition, as
// ledger.Store's Sweep does in a *sql.Tx, and creates and drops none.
// Given a *pgx.Conn or a *pgxpool.Conn, which cannot lend themselves to
// database/sql, a partitioned table is refused with an error matching
// ledger.ErrInvalid (it costs one query to tell): pass the pool.
func (s *Store) Sweep(ctx context.Context, db Execer, batch int) (int64, error) {
	if isNil(db) {
		return s.core.SweepWith(ctx, nil, nil, nil, batch)
	}
	exec, err := s.sweepExec(db)
	if err != nil {
		return 0, err
	}
	var queryRow func(ctx context.Context, query string, args ...any) txledger.Row
	if q, ok := db.(Querier); ok {
		queryRow = func(ctx context.Context, query string, args ...any) txledger.Row {
			return q.QueryRow(ctx, query, args...)
		}
	}
	var parts *sql.DB
	if batch > 0 { // else SweepWith refuses it, touching nothing
		if parts, err = s.partitionDB(ctx, db); err != nil {
			return 0, err
		}
	}
	if parts == nil {
		return s.core.SweepWith(ctx, exec, queryRow, nil, batch)
	}
	defer parts.Close()
	return s.core.SweepWith(ctx, exec, queryRow, parts, batch)
}

// sweepExec returns the function Sweep deletes a batch with on db: one
// statement, or, with ledger.WithSweepLockWait, a transaction of its own
// begun on db that bounds its lock waits (db must then be a pool or a
// connection).
func (s *Store) sweepExec(db Execer) (func(ctx context.Context, query string, args ...any) (int64, error), error) {
	wait := s.core.SweepLockWait()
	if wait <= 0 {
		return func(ctx context.Context, query string, args ...any) (int64, error) {
			tag, err := db.Exec(ctx, query, args...)
			return tag.RowsAffected(), err
		}, nil
	}
	b, ok := db.(beginner)
	if _, isTx := db.(pgx.Tx); !ok || isTx {
		return nil, fmt.Errorf("pgxledger: sweep: WithSweepLockWait needs Sweep on a pool or a connection (each batch begins a bounded transaction): %w", ledger.ErrInvalid)
	}
	// lock_timeout's unit, rounded up.
	set := "SET LOCAL lock_timeout = " + strconv.FormatInt(int64((wait+time.Millisecond-1)/time.Millisecond), 10)
	return func(ctx context.Context, query string, args ...any) (n int64, err error) {
		err = pgx.BeginFunc(ctx, b, func(tx pgx.Tx) error {
			if _, err := tx.Exec(ctx, set); err != nil {
				return err
			}
			tag, err := tx.Exec(ctx, query, args...)
			n = tag.RowsAffected()
			return err
		})
		return n, err
	}, nil
}

// partitionedSQL tells whether the table ($1, its quoted name) is
// partitioned.
const partitionedSQL = `SELECT EXISTS (SELECT 1 FROM pg_partitioned_table WHERE partrelid = to_regclass($1))`

// partitionDB returns the database/sql handle Sweep creates and drops a
// partitioned table's buckets through (the caller closes it): for a pool,
// a *sql.DB over it, whose Close closes none of the pool's connections
// and leaves the pool open. It returns nil for a pgx.Tx (the sweep deletes
// in the whole table, as ledger.Store's does in a *sql.Tx) and for
// another handle on a table that is not partitioned; another handle (a
// *pgx.Conn, a *pgxpool.Conn) on a partitioned table is an error matching
// ledger.ErrInvalid.
func (s *Store) partitionDB(ctx context.Context, db Execer) (*sql.DB, error) {
	switch h := db.(type) {
	case *pgxpool.Pool:
		return stdlib.OpenDBFromPool(h), nil
	case pgx.Tx:
		return nil, nil
	}
	q, ok := db.(Querier)
	if !ok {
		return nil, nil
	}
	var partitioned bool
	if err := q.QueryRow(ctx, partitionedSQL, s.core.Dialect().QuoteIdent(s.core.Table())).Scan(&partitioned); err != nil {
		if cerr := ctx.Err(); cerr != nil {
			return nil, fmt.Errorf("ledger: sweep: %w (%w)", cerr, err)
		}
		return nil, txledger.NewDBError(s.core.Dialect(), "sweep", err)
	}
	if partitioned {
		return nil, fmt.Errorf("pgxledger: sweep: the ledger's table %s is partitioned by birth, and its partitions are created and dropped through a *pgxpool.Pool (a %T cannot lend itself to database/sql): pass the pool: %w", s.core.Table(), db, ledger.ErrInvalid)
	}
	return nil, nil
}

// beginner is what a bounded Sweep begins each batch's transaction on:
// *pgxpool.Pool, *pgxpool.Conn and *pgx.Conn.
type beginner interface {
	Begin(ctx context.Context) (pgx.Tx, error)
}

// begin begins a transaction on a connection of pool with opts, like
// pool.BeginTx, whose recordCommit (or CompleteCommit) then costs one
// round trip: claim at commit's first step. Commit and Rollback end it as
// usual. (The Runner's claim at commit does this; tests reach it through
// export_test.go.)
func (s *Store) begin(ctx context.Context, pool *pgxpool.Pool, opts pgx.TxOptions) (pgx.Tx, error) {
	if pool == nil {
		return nil, errNilPool
	}
	tx, err := s.pipeline(pool, opts, false).Begin(ctx)
	if err != nil {
		// It prepares the Store's statements on a connection's first
		// pipelined transaction: behind a transaction pooler another
		// client's may be there already (42P05).
		return nil, dialectkit.Explain(s.core.Dialect(), err)
	}
	return tx, nil
}

// BeginClaim begins a transaction on a connection of pool with opts and
// claims req.Identity in it, BEGIN and the claim in one round trip. It has
// the outcomes of [ledger.Store.Claim]: on Acquired the
// transaction is open (run the work in it, then CompleteCommit); a replay
// is found, and the transaction rolled back, in a second round trip; on
// any other outcome nothing is left open. The lock-wait bound
// (req.LockWait) is set inside the claim's statement.
func (s *Store) BeginClaim(ctx context.Context, pool *pgxpool.Pool, opts pgx.TxOptions, req ledger.ClaimRequest) (pgx.Tx, *ledger.Claim, error) {
	if pool == nil {
		return nil, nil, errNilPool
	}
	tx, c, err := s.core.BeginClaim(ctx, txledger.AnyPipeline[pgx.Tx](s.pipeline(pool, opts, false)), req)
	return tx, c, err
}

// CompleteCommit records r as the result of c in tx and commits tx, the
// completion and COMMIT in one round trip when tx came from BeginClaim
// (two otherwise). It has the outcomes of [ledger.Store.Complete]
// and ends tx in every case: a completion
// that fails, or completes no pending entry, aborts the transaction so
// that the COMMIT sent with it does not run, and is reported as that
// failure (nothing committed); a connection lost after the COMMIT was
// sent, or a context that ended while it was in flight, is an error
// matching txmiddleware.ErrCommitUnknown.
func (s *Store) CompleteCommit(ctx context.Context, tx pgx.Tx, c *ledger.Claim, r ledger.Result) error {
	return s.core.CompleteCommit(ctx, txledger.AnyPipeline[pgx.Tx](s.pipelineOf(tx)), tx, c, r)
}

// recordCommit inserts req's identity already completed with r in tx, in
// which the work ran, and commits tx, the record and COMMIT in one round
// trip when tx came from begin or BeginClaim (two otherwise). It has the
// outcomes of [ledger.Store.Record] and ends tx in every case: a
// record that conflicts aborts the transaction, so that the work's writes
// do not commit, and the stored entry is read in one more round trip (a
// replay, ErrKeyReused or ErrIncomplete); an expired entry is deleted and
// an error matching ledger.ErrRetryable asks for the unit to run again.
func (s *Store) recordCommit(ctx context.Context, tx pgx.Tx, req ledger.ClaimRequest, r ledger.Result) (*ledger.Claim, error) {
	return s.core.RecordCommit(ctx, txledger.AnyPipeline[pgx.Tx](s.pipelineOf(tx)), tx, req, r)
}

// isNil reports whether v is nil or holds a nil pointer (a nil
// *pgxpool.Pool in a Querier).
func isNil(v any) bool {
	if v == nil {
		return true
	}
	rv := reflect.ValueOf(v)
	return rv.Kind() == reflect.Pointer && rv.IsNil()
}
