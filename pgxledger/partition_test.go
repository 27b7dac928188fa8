package pgxledger_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/opledger/opledger/dialects/postgres"
	"github.com/opledger/opledger/internal/dialectkit"
	"github.com/opledger/opledger/internal/keybirth"
	"github.com/opledger/opledger/internal/testkit/testdb"
	"github.com/opledger/opledger/ledger"
	"github.com/opledger/opledger/pgxledger"
)

// clock is a settable clock for a store.
type clock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *clock) Now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.now }

func (c *clock) Add(d time.Duration) { c.mu.Lock(); c.now = c.now.Add(d); c.mu.Unlock() }

// twoEntries returns a Store on e's table (retention an hour, clock skew
// a minute) with an injected clock an hour into today (UTC), whenever the
// test runs (so that a few hours on, today's bucket is not yet droppable),
// after claiming and completing through it a key born then (born) and a
// key without a birth.
func (e *env) twoEntries(t *testing.T) (*pgxledger.Store, *clock, ledger.Identity) {
	t.Helper()
	c := &clock{now: time.Now().UTC().Truncate(24 * time.Hour).Add(time.Hour)}
	s, err := pgxledger.New(ledger.WithTable(e.table), ledger.WithRetention(time.Hour), ledger.WithClockSkew(time.Minute), ledger.WithClock(c.Now))
	if err != nil {
		t.Fatal(err)
	}
	born := testdb.ID(t, "svc-a", "/pay.v1.Payments/Create", keybirth.New(c.Now()))
	e.claimDone(t, s, ledger.ClaimRequest{Identity: born, Fingerprint: ledger.FingerprintOf([]byte("born"))})
	e.claimDone(t, s, req(t, "no-birth"))
	return s, c, born
}

// claimDone claims and completes req through s on e's pool, claim first
// and pipelined.
func (e *env) claimDone(t *testing.T, s *pgxledger.Store, r ledger.ClaimRequest) {
	t.Helper()
	ctx := context.Background()
	tx, c, err := s.BeginClaim(ctx, e.pool, pgx.TxOptions{}, r)
	if err != nil || !c.Acquired() {
		t.Fatalf("claim: %+v %v", c, err)
	}
	if err := s.CompleteCommit(ctx, tx, c, result("done")); err != nil {
		t.Fatal(err)
	}
}

// TestSweepPartitioned: on a table partitioned by birth (migration
// 00005), Sweep on the pool does what ledger.Store's does, with an
// injected clock: before a bucket's end plus the retention plus the skew
// it keeps the bucket (an expired key of a birth stays, refused) and
// deletes the expired entry of a key without a birth in born0; past it,
// it drops the bucket whole, counting its entry, and creates the buckets
// of the coming births (a claim born then lands in one); the pool stays
// open with no connection left acquired.
func TestSweepPartitioned(t *testing.T) {
	testdb.Parallel(t, "postgres", 2)
	e := newEnv(t, 2)
	d := postgres.New()
	if !testdb.Partitioned(t, e.db, d, e.table) {
		t.Fatalf("the migrations' table %s is not partitioned by birth", e.table)
	}
	ctx := context.Background()
	s, c, born := e.twoEntries(t)
	birth, _ := born.Birth()
	here, ok := dialectkit.BucketOf(testdb.Partitions(t, e.db, d, e.table), birth)
	if !ok {
		t.Fatalf("no bucket holds the births of now")
	}
	rowsOf := func(id ledger.Identity) int {
		return e.count(t, "SELECT COUNT(*) FROM "+d.QuoteIdent(e.table)+" WHERE id = $1", idBytes(id))
	}

	// Past both entries' expiry, before the bucket's drop time: born0's
	// entry is deleted, the bucket kept.
	c.Add(2 * time.Hour)
	if n, err := s.Sweep(ctx, e.pool, 10); err != nil || n != 1 {
		t.Fatalf("sweep before the bucket's drop time: %d %v, want 1 entry", n, err)
	}
	if rowsOf(req(t, "no-birth").Identity) != 0 || rowsOf(born) != 1 {
		t.Fatalf("after the first sweep: %d rows of the key without a birth, %d of the born key; want 0 and 1", rowsOf(req(t, "no-birth").Identity), rowsOf(born))
	}

	// Three days on: the bucket is dropped, the coming ones created.
	c.Add(72 * time.Hour)
	ahead := c.Now().Add(23 * time.Hour)
	if _, ok := dialectkit.BucketOf(testdb.Partitions(t, e.db, d, e.table), ahead); ok {
		t.Fatalf("a bucket of the births of %v exists before the sweep", ahead)
	}
	n, err := s.Sweep(ctx, e.pool, 10)
	if err != nil || n < 1 {
		t.Fatalf("sweep past the bucket's drop time: %d %v, want its entry counted", n, err)
	}
	parts := testdb.Partitions(t, e.db, d, e.table)
	for _, p := range parts {
		if p.Name == here.Name {
			t.Fatalf("bucket %s still there after its drop time: %+v", here.Name, parts)
		}
	}
	if rowsOf(born) != 0 {
		t.Fatalf("the born key's entry is still there")
	}
	for _, at := range []time.Time{c.Now(), ahead} {
		if _, ok := dialectkit.BucketOf(parts, at); !ok {
			t.Fatalf("no bucket of the births of %v after the sweep: %+v", at, parts)
		}
	}
	fresh := testdb.ID(t, "svc-a", "/pay.v1.Payments/Create", keybirth.New(c.Now()))
	e.claimDone(t, s, ledger.ClaimRequest{Identity: fresh, Fingerprint: ledger.FingerprintOf([]byte("fresh"))})
	if n := e.pool.Stat().AcquiredConns(); n != 0 {
		t.Fatalf("%d connections of the pool acquired after the sweeps, want 0", n)
	}
	if err := e.pool.Ping(ctx); err != nil {
		t.Fatalf("the pool after the sweeps: %v", err)
	}
}

// TestSweepPartitionedHandles: a Sweep on a partitioned table through a
// *pgxpool.Conn or a *pgx.Conn, which cannot lend themselves to
// database/sql, is refused with ErrInvalid and touches nothing; in a
// pgx.Tx it deletes the expired entries in every partition and creates
// or drops none, as ledger.Store's Sweep in a *sql.Tx. On a table that is
// not partitioned a connection sweeps as before.
func TestSweepPartitionedHandles(t *testing.T) {
	testdb.Parallel(t, "postgres", 3)
	e := newEnv(t, 2)
	d := postgres.New()
	ctx := context.Background()
	s, c, _ := e.twoEntries(t)
	c.Add(72 * time.Hour) // past the bucket's drop time, and a bucket ahead missing
	before := testdb.Partitions(t, e.db, d, e.table)

	pc, err := e.pool.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if n, err := s.Sweep(ctx, pc, 10); !errors.Is(err, ledger.ErrInvalid) || n != 0 {
		t.Errorf("sweep on a *pgxpool.Conn: %d %v, want ErrInvalid", n, err)
	}
	conn, err := pgx.ConnectConfig(ctx, e.pool.Config().ConnConfig.Copy())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close(context.Background()) })
	if n, err := s.Sweep(ctx, conn, 10); !errors.Is(err, ledger.ErrInvalid) || n != 0 {
		t.Errorf("sweep on a *pgx.Conn: %d %v, want ErrInvalid", n, err)
	}
	if got := testdb.Partitions(t, e.db, d, e.table); len(got) != len(before) || e.ledgerRows(t) != 2 {
		t.Fatalf("a refused sweep changed the table: %d partitions (was %d), %d rows", len(got), len(before), e.ledgerRows(t))
	}

	tx, err := pc.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if n, err := s.Sweep(ctx, tx, 10); err != nil || n != 2 {
		t.Fatalf("sweep in a pgx.Tx: %d %v, want both expired entries deleted", n, err)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	pc.Release()
	if got := testdb.Partitions(t, e.db, d, e.table); len(got) != len(before) || e.ledgerRows(t) != 0 {
		t.Fatalf("after the sweep in a pgx.Tx: %d partitions (was %d: none created or dropped), %d rows (want 0)", len(got), len(before), e.ledgerRows(t))
	}

	// A table that is not partitioned, swept through a connection.
	plain := e.table + "_plain"
	if _, err := e.db.Exec("CREATE TABLE " + d.QuoteIdent(plain) + " (LIKE " + d.QuoteIdent(e.table) + " INCLUDING ALL)"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.db.Exec("DROP TABLE " + d.QuoteIdent(plain)) })
	ps, err := pgxledger.New(ledger.WithTable(plain), ledger.WithRetention(time.Hour), ledger.WithClockSkew(time.Minute), ledger.WithClock(c.Now))
	if err != nil {
		t.Fatal(err)
	}
	e.claimDone(t, ps, req(t, "plain"))
	c.Add(2 * time.Hour)
	if n, err := ps.Sweep(ctx, conn, 10); err != nil || n != 1 {
		t.Fatalf("sweep of a table not partitioned on a *pgx.Conn: %d %v, want 1", n, err)
	}
}

// TestCompletionsWaitOnNoOtherBucket: under generic plans (what pgx's
// cached prepared statements run after five executions), a claim and its
// completion, pipelined or one statement at a time, lock the key's bucket
// alone: with another bucket locked exclusively (as a drop's detach or a
// drop does), both finish well within a lock timeout. Without the hour of
// the key's birth in the completion, its generic plan would lock every
// partition and wait. The pipelined completion of an hour is prepared by
// pgx's statement cache, not under a name of the Store's.
func TestCompletionsWaitOnNoOtherBucket(t *testing.T) {
	testdb.Parallel(t, "postgres", 2)
	cfg := testdb.PgxConfig(t, "", 1, nil)
	cfg.ConnConfig.RuntimeParams["plan_cache_mode"] = "force_generic_plan"
	cfg.ConnConfig.RuntimeParams["lock_timeout"] = "2s"
	e := newEnvOn(t, testdb.OpenPgx(t, cfg), nil)
	d := postgres.New()
	ctx := context.Background()
	here, ok := dialectkit.BucketOf(testdb.Partitions(t, e.db, d, e.table), time.Now())
	if !ok {
		t.Fatalf("no bucket holds the births of now")
	}
	var other string
	for _, p := range testdb.Partitions(t, e.db, d, e.table) {
		if p.Kind == dialectkit.Bucket && p.Name != here.Name {
			other = p.Name
			break
		}
	}
	if other == "" {
		t.Fatalf("one bucket only: want another to lock")
	}
	locker := testdb.OpenPgx(t, testdb.PgxConfig(t, "", 1, nil))
	held, err := locker.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer held.Rollback(ctx)
	if _, err := held.Exec(ctx, "LOCK TABLE "+d.QuoteIdent(other)+" IN ACCESS EXCLUSIVE MODE"); err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		r := ledger.ClaimRequest{
			Identity:    testdb.ID(t, "svc-a", "/pay.v1.Payments/Create", keybirth.New(time.Now())),
			Fingerprint: ledger.FingerprintOf([]byte("pipelined")),
		}
		e.claimDone(t, e.s, r)

		r.Identity = testdb.ID(t, "svc-a", "/pay.v1.Payments/Create", keybirth.New(time.Now()))
		tx, err := e.pool.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		c, err := e.s.Claim(ctx, tx, r)
		if err == nil && c.Acquired() {
			err = e.s.Complete(ctx, tx, c, result("done"))
		}
		if err != nil || !c.Acquired() {
			_ = tx.Rollback(ctx)
			t.Fatalf("round %d: one statement at a time, with bucket %s locked: %+v %v", i, other, c, err)
		}
		if err := tx.Commit(ctx); err != nil {
			t.Fatal(err)
		}
	}
	// The pipelined completion of an hour is in pgx's statement cache
	// (which bounds them), not under a name of the Store's, on the pool's
	// one connection.
	var named, cached int
	if err := e.pool.QueryRow(ctx, `SELECT count(*) FILTER (WHERE name LIKE 'opledger\_%'), count(*) FILTER (WHERE name LIKE 'stmtcache\_%')
		FROM pg_prepared_statements WHERE statement LIKE 'WITH done AS (%born\_at >= %'`).Scan(&named, &cached); err != nil {
		t.Fatal(err)
	}
	if named != 0 || cached == 0 {
		t.Errorf("the pipelined completion of this hour: prepared under %d names of the Store's and %d of pgx's cache, want none and one (two across an hour)", named, cached)
	}
}
