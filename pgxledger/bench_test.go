package pgxledger_test

import (
	"context"
	"database/sql"
	"flag"
	"fmt"
	"regexp"
	"strconv"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/opledger/opledger/dialects"
	"github.com/opledger/opledger/internal/dialectkit"
	"github.com/opledger/opledger/internal/pgdialect"
	"github.com/opledger/opledger/internal/testkit/testdb"
	"github.com/opledger/opledger/ledger"
	"github.com/opledger/opledger/pgxledger"
	"github.com/opledger/opledger/txmiddleware"
)

var (
	benchRounds   = flag.Int("bench.rounds", 5, "rounds of BenchmarkPaths")
	benchRoundDur = flag.Duration("bench.round", 2*time.Second, "how long each variant runs per round in BenchmarkPaths")
	benchPaths    = flag.String("bench.paths", "", "a regular expression: BenchmarkPaths runs only the variants it matches (and sql-bare)")
)

// benchWorkers is the number of concurrent workers, and of pooled
// connections of each API, as in the pgbench figures (-c 16).
const benchWorkers = 16

var benchResponse = []byte(`{"status":"ok","amount":4711,"account":"acct-42"}`)

const benchMethod, benchType = "/pay.v1.Payments/Create", "pay.v1.CreateResponse"

// BenchmarkPaths measures every path of a keyed unit on PostgreSQL, on
// database/sql (pgx's stdlib driver) and on pgx natively, each beside the
// same SQL written by hand in Go with the same driver, by the project's
// one method: every variant alone on 16 workers (a pool of 16 per API)
// for -bench.round, in -bench.rounds rounds, each running the variants in
// an order of its own with the variants a target compares next to each
// other (pathVariants); ratios are taken within a round and the median
// over the rounds reported (testdb.Rounds). Each variant writes its own
// ledger and business tables. The work is one business INSERT.
//
//	sql-bare         BEGIN, the business INSERT, COMMIT
//	sql-byhand       BEGIN, the claim INSERT, the business INSERT, the completing UPDATE, COMMIT (the kit's SQL, by hand)
//	sql-kit          the same through ledger.Store's Claim and Complete
//	sql-kit-cte      the same with ledger.WithOneStatementClaim (the claim's one-statement form)
//	sql-runner       the same through txmiddleware.Runner
//	sql-byhand-at    BEGIN, the business INSERT, the completed entry's INSERT, COMMIT (claim at commit, by hand)
//	sql-kit-at       the same through Store.Record
//	sql-runner-at    the same through the Runner (WithClaimAtCommit)
//	sql-replay       the Runner replaying one of 1,000 completed keys
//	pgx-bare         BEGIN, the business INSERT, COMMIT, on pgx
//	pgx-byhand       as sql-byhand, on pgx
//	pgx-kit          as sql-kit, through pgxledger.Store on the caller's pgx.Tx
//	pgx-byhand-at    as sql-byhand-at, on pgx
//	pgx-kit-at       as sql-kit-at, through pgxledger.Store
//	pgx-byhand-pipe  {BEGIN, claim}, the business INSERT, {completion, COMMIT} by hand with pgx batches (the kit's SQL)
//	pgx-kit-pipe     the same through BeginClaim and CompleteCommit
//	pgx-runner       the same through pgxledger.Runner
//	pgx-byhand-pipe-at  BEGIN, the business INSERT, {record, COMMIT} by hand
//	pgx-kit-pipe-at  the same through Begin and RecordCommit
//	pgx-runner-at    the same through the Runner (WithClaimAtCommit)
//	pgx-replay       the pgx Runner replaying one of 1,000 completed keys
//
// It reports each variant's median throughput (ops/s-<name>), its ratio
// to sql-bare (x-<name>) and the ratios the targets are about
// (<a>/<b>): the kit against the same SQL by hand on every path, and pgx
// pipelined against database/sql in each order.
//
//	OPLEDGER_TEST_POSTGRES_DSN=… go test -run '^$' -bench BenchmarkPaths -benchtime 1x ./pgxledger/ \
//	    [-bench.rounds 5 -bench.round 2s] [-bench.paths 'pgx-(bare|runner)']
func BenchmarkPaths(b *testing.B) {
	var want *regexp.Regexp
	if *benchPaths != "" {
		var err error
		if want, err = regexp.Compile(*benchPaths); err != nil {
			b.Fatalf("-bench.paths: %v", err)
		}
	}
	testdb.Reserve(b, "postgres", 2*benchWorkers+2)
	db := stdlibTarget().Open(b, benchWorkers)
	pool := testdb.OpenPgx(b, testdb.PgxConfig(b, "", benchWorkers, nil))
	ctx := context.Background()

	var variants []testdb.RoundVariant
	for _, v := range pathVariants(b) {
		if want != nil && v.name != "sql-bare" && !want.MatchString(v.name) {
			continue
		}
		e := newBenchEnv(b, ctx, db, pool)
		variants = append(variants, testdb.RoundVariant{Name: v.name, Op: v.op(e), Group: v.group})
	}
	var pairs [][2]string
	for _, p := range [][2]string{
		{"sql-kit", "sql-byhand"}, {"sql-runner", "sql-byhand"}, {"sql-kit-cte", "sql-kit"},
		{"sql-kit-at", "sql-byhand-at"}, {"sql-runner-at", "sql-byhand-at"},
		{"pgx-kit", "pgx-byhand"}, {"pgx-kit-at", "pgx-byhand-at"},
		{"pgx-kit-pipe", "pgx-byhand-pipe"}, {"pgx-runner", "pgx-byhand-pipe"},
		{"pgx-kit-pipe-at", "pgx-byhand-pipe-at"}, {"pgx-runner-at", "pgx-byhand-pipe-at"},
		{"pgx-runner", "sql-runner"}, {"pgx-runner-at", "sql-runner-at"},
		{"pgx-byhand-pipe", "pgx-byhand"}, {"pgx-bare", "sql-bare"},
	} {
		if has(variants, p[0]) && has(variants, p[1]) {
			pairs = append(pairs, p)
		}
	}
	for range b.N {
		tput := testdb.Rounds(b, *benchRounds, benchWorkers, *benchRoundDur, variants)
		if b.Failed() {
			return
		}
		testdb.ReportRounds(b, variants, tput, 0, pairs...)
	}
}

// stdlibTarget is the PostgreSQL target through pgx's database/sql driver,
// the database/sql side of the benchmarks' pairs.
func stdlibTarget() testdb.Target {
	pg := testdb.Targets()[0]
	for _, tg := range testdb.Targets() {
		if tg.Name == "postgres/pgx" {
			pg = tg
		}
	}
	return pg
}

// pathVariant is one variant of BenchmarkPaths: op makes its operation on
// a benchEnv of its own. The variants of a group run one after another in
// every round (testdb.RoundVariant's Group): each target's pair is in one.
type pathVariant struct {
	name, group string
	op          func(e *benchEnv) func(n int64) error
}

// pathVariants is every variant of BenchmarkPaths, in its doc's order.
// The groups: the bare transactions; claim first on database/sql and
// pipelined on pgx (the kit and the runners against the hand-written SQL,
// and the runners of pgx against those of database/sql); the same at
// commit; the plain paths on pgx; the replays. sql-kit-cte, measured
// against sql-kit for no target, runs on its own.
func pathVariants(b *testing.B) []pathVariant {
	runner := func(atCommit bool) func(e *benchEnv) func(int64) error {
		return func(e *benchEnv) func(int64) error { return e.sqlRunner(b, atCommit) }
	}
	pgxRunner := func(atCommit bool) func(e *benchEnv) func(int64) error {
		return func(e *benchEnv) func(int64) error { return e.pgxRunner(b, atCommit) }
	}
	return []pathVariant{
		{"sql-bare", "bare", (*benchEnv).sqlBare},
		{"sql-byhand", "first", (*benchEnv).sqlByhand},
		{"sql-kit", "first", (*benchEnv).sqlKit},
		{"sql-kit-cte", "", (*benchEnv).sqlKitCTE},
		{"sql-runner", "first", runner(false)},
		{"sql-byhand-at", "at", (*benchEnv).sqlByhandAt},
		{"sql-kit-at", "at", (*benchEnv).sqlKitAt},
		{"sql-runner-at", "at", runner(true)},
		{"sql-replay", "replay", func(e *benchEnv) func(int64) error { return e.sqlReplay(b) }},
		{"pgx-bare", "bare", (*benchEnv).pgxBare},
		{"pgx-byhand", "pgx-plain", (*benchEnv).pgxByhand},
		{"pgx-kit", "pgx-plain", (*benchEnv).pgxKit},
		{"pgx-byhand-at", "pgx-plain", (*benchEnv).pgxByhandAt},
		{"pgx-kit-at", "pgx-plain", (*benchEnv).pgxKitAt},
		{"pgx-byhand-pipe", "first", (*benchEnv).pgxByhandPipe},
		{"pgx-kit-pipe", "first", (*benchEnv).pgxKitPipe},
		{"pgx-runner", "first", pgxRunner(false)},
		{"pgx-byhand-pipe-at", "at", (*benchEnv).pgxByhandPipeAt},
		{"pgx-kit-pipe-at", "at", (*benchEnv).pgxKitPipeAt},
		{"pgx-runner-at", "at", pgxRunner(true)},
		{"pgx-replay", "replay", func(e *benchEnv) func(int64) error { return e.pgxReplay(b) }},
	}
}

func has(vs []testdb.RoundVariant, name string) bool {
	for _, v := range vs {
		if v.Name == name {
			return true
		}
	}
	return false
}

// benchEnv is one variant's tables, on both APIs.
type benchEnv struct {
	ctx   context.Context
	db    *sql.DB
	pool  *pgxpool.Pool
	table string
	biz   string // the business INSERT
	q     dialects.Queries
	rq    dialectkit.RecordQueries
	pq    dialectkit.PipelineQueries
}

func newBenchEnv(b *testing.B, ctx context.Context, db *sql.DB, pool *pgxpool.Pool) *benchEnv {
	b.Helper()
	d := pgdialect.New()
	te := testdb.NewEnv(b, "postgres", d, db)
	pq, _ := d.PipelineQueries(te.Table, 0)
	return &benchEnv{ctx: ctx, db: db, pool: pool, table: te.Table, q: d.Queries(te.Table), rq: d.RecordQueries(te.Table), pq: pq,
		biz: "INSERT INTO " + te.Biz + " (k, worker) VALUES ($1, $2)"}
}

// unit is the n-th operation's identity and times.
func unit(prefix string, n int64) (id ledger.Identity, key [32]byte, created, expires int64) {
	id, err := ledger.NewIdentity("svc-a", benchMethod, prefix+strconv.FormatInt(n, 10))
	if err != nil {
		panic(err)
	}
	now := time.Now()
	return id, id.ID(), now.UnixMicro(), now.Add(24 * time.Hour).UnixMicro()
}

var benchFP = ledger.FingerprintOf([]byte("x"))

func benchReq(id ledger.Identity) ledger.ClaimRequest {
	return ledger.ClaimRequest{Identity: id, Fingerprint: benchFP}
}

func benchResult() ledger.Result { return ledger.Result{Response: benchResponse, TypeName: benchType} }

func (e *benchEnv) sqlTx(f func(*sql.Tx) error) error { return testdb.InTx(e.ctx, e.db, f) }

func (e *benchEnv) pgxTx(f func(pgx.Tx) error) error {
	tx, err := e.pool.Begin(e.ctx)
	if err != nil {
		return err
	}
	if err := f(tx); err != nil {
		tx.Rollback(e.ctx)
		return err
	}
	return tx.Commit(e.ctx)
}

func (e *benchEnv) sqlBare() func(int64) error {
	return func(n int64) error {
		return e.sqlTx(func(tx *sql.Tx) error { _, err := tx.ExecContext(e.ctx, e.biz, "acct", n); return err })
	}
}

func (e *benchEnv) sqlByhand() func(int64) error {
	return func(n int64) error {
		_, key, created, expires := unit("h-", n)
		return e.sqlTx(func(tx *sql.Tx) error {
			if _, err := tx.ExecContext(e.ctx, e.q.Insert, key[:], "svc-a", benchMethod, benchFP[:], created, expires); err != nil {
				return err
			}
			if _, err := tx.ExecContext(e.ctx, e.biz, "acct", n); err != nil {
				return err
			}
			_, err := tx.ExecContext(e.ctx, e.q.Complete, 0, benchResponse, benchType, created, key[:])
			return err
		})
	}
}

func (e *benchEnv) store(opts ...ledger.Option) *ledger.Store {
	s, err := ledger.New(pgdialect.New(), append([]ledger.Option{ledger.WithTable(e.table)}, opts...)...)
	if err != nil {
		panic(err) // the table name and options are the benchmark's own
	}
	return s
}

func (e *benchEnv) sqlKitWith(s *ledger.Store) func(int64) error {
	return func(n int64) error {
		id, _, _, _ := unit("k-", n)
		return e.sqlTx(func(tx *sql.Tx) error {
			c, err := s.Claim(e.ctx, tx, benchReq(id))
			if err != nil {
				return err
			}
			if !c.Acquired() {
				return fmt.Errorf("want acquired, got %v", c.Outcome)
			}
			if _, err := tx.ExecContext(e.ctx, e.biz, "acct", n); err != nil {
				return err
			}
			return s.Complete(e.ctx, tx, c, benchResult())
		})
	}
}

func (e *benchEnv) sqlKit() func(int64) error { return e.sqlKitWith(e.store()) }

func (e *benchEnv) sqlKitCTE() func(int64) error {
	return e.sqlKitWith(e.store(ledger.WithOneStatementClaim()))
}

func (e *benchEnv) sqlByhandAt() func(int64) error {
	return func(n int64) error {
		_, key, created, expires := unit("ha-", n)
		return e.sqlTx(func(tx *sql.Tx) error {
			if _, err := tx.ExecContext(e.ctx, e.biz, "acct", n); err != nil {
				return err
			}
			_, err := tx.ExecContext(e.ctx, e.rq.Insert, key[:], "svc-a", benchMethod, benchFP[:], 0, benchResponse, benchType, created, created, expires)
			return err
		})
	}
}

func (e *benchEnv) sqlKitAt() func(int64) error {
	s := e.store()
	return func(n int64) error {
		id, _, _, _ := unit("ka-", n)
		return e.sqlTx(func(tx *sql.Tx) error {
			if _, err := tx.ExecContext(e.ctx, e.biz, "acct", n); err != nil {
				return err
			}
			c, err := s.Record(e.ctx, tx, benchReq(id), benchResult())
			if err == nil && !c.Recorded() {
				err = fmt.Errorf("want recorded, got %v", c.Outcome)
			}
			return err
		})
	}
}

func (e *benchEnv) sqlRunnerOf(b *testing.B, atCommit bool) *txmiddleware.Runner {
	var opts []txmiddleware.Option
	if atCommit {
		opts = append(opts, txmiddleware.WithClaimAtCommit())
	}
	r, err := txmiddleware.New(e.db, e.store(), opts...)
	if err != nil {
		b.Fatal(err)
	}
	return r
}

func (e *benchEnv) sqlWork(n int64) txmiddleware.Work {
	return func(ctx context.Context, tx *sql.Tx) (ledger.Result, error) {
		_, err := tx.ExecContext(ctx, e.biz, "acct", n)
		return benchResult(), err
	}
}

func (e *benchEnv) sqlRunner(b *testing.B, atCommit bool) func(int64) error {
	r := e.sqlRunnerOf(b, atCommit)
	return func(n int64) error {
		id, _, _, _ := unit("r-", n)
		out, err := r.Run(e.ctx, benchReq(id), e.sqlWork(n))
		if err == nil && !out.Executed {
			err = fmt.Errorf("want executed: %+v", out)
		}
		return err
	}
}

// replays is the number of completed keys a replay variant replays.
const replayKeys = 1000

func (e *benchEnv) sqlReplay(b *testing.B) func(int64) error {
	r := e.sqlRunnerOf(b, false)
	for i := range int64(replayKeys) {
		id, _, _, _ := unit("rp-", i)
		if _, err := r.Run(e.ctx, benchReq(id), e.sqlWork(i)); err != nil {
			b.Fatal(err)
		}
	}
	return func(n int64) error {
		id, _, _, _ := unit("rp-", n%replayKeys)
		out, err := r.Run(e.ctx, benchReq(id), e.sqlWork(n))
		if err == nil && !out.Replayed {
			err = fmt.Errorf("want a replay: %+v", out)
		}
		return err
	}
}

func (e *benchEnv) pgxBare() func(int64) error {
	return func(n int64) error {
		return e.pgxTx(func(tx pgx.Tx) error { _, err := tx.Exec(e.ctx, e.biz, "acct", n); return err })
	}
}

func (e *benchEnv) pgxByhand() func(int64) error {
	return func(n int64) error {
		_, key, created, expires := unit("h-", n)
		return e.pgxTx(func(tx pgx.Tx) error {
			if _, err := tx.Exec(e.ctx, e.q.Insert, key[:], "svc-a", benchMethod, benchFP[:], created, expires); err != nil {
				return err
			}
			if _, err := tx.Exec(e.ctx, e.biz, "acct", n); err != nil {
				return err
			}
			_, err := tx.Exec(e.ctx, e.q.Complete, 0, benchResponse, benchType, created, key[:])
			return err
		})
	}
}

func (e *benchEnv) pgxStore() *pgxledger.Store {
	s, err := pgxledger.New(ledger.WithTable(e.table))
	if err != nil {
		panic(err) // the table name is the benchmark's own
	}
	return s
}

func (e *benchEnv) pgxKit() func(int64) error {
	s := e.pgxStore()
	return func(n int64) error {
		id, _, _, _ := unit("k-", n)
		return e.pgxTx(func(tx pgx.Tx) error {
			c, err := s.Claim(e.ctx, tx, benchReq(id))
			if err != nil {
				return err
			}
			if !c.Acquired() {
				return fmt.Errorf("want acquired, got %v", c.Outcome)
			}
			if _, err := tx.Exec(e.ctx, e.biz, "acct", n); err != nil {
				return err
			}
			return s.Complete(e.ctx, tx, c, benchResult())
		})
	}
}

func (e *benchEnv) pgxByhandAt() func(int64) error {
	return func(n int64) error {
		_, key, created, expires := unit("ha-", n)
		return e.pgxTx(func(tx pgx.Tx) error {
			if _, err := tx.Exec(e.ctx, e.biz, "acct", n); err != nil {
				return err
			}
			_, err := tx.Exec(e.ctx, e.rq.Insert, key[:], "svc-a", benchMethod, benchFP[:], 0, benchResponse, benchType, created, created, expires)
			return err
		})
	}
}

func (e *benchEnv) pgxKitAt() func(int64) error {
	s := e.pgxStore()
	return func(n int64) error {
		id, _, _, _ := unit("ka-", n)
		return e.pgxTx(func(tx pgx.Tx) error {
			if _, err := tx.Exec(e.ctx, e.biz, "acct", n); err != nil {
				return err
			}
			c, err := s.Record(e.ctx, tx, benchReq(id), benchResult())
			if err == nil && !c.Recorded() {
				err = fmt.Errorf("want recorded, got %v", c.Outcome)
			}
			return err
		})
	}
}

// pipelined runs f on a connection of the pool that a batch began a
// transaction on, with BEGIN and first sent together, and returns it
// once f has ended the transaction: what a careful user writes by hand.
func (e *benchEnv) pipelined(first func(*pgx.Batch), f func(c *pgxpool.Conn, tx pgx.Tx) error) error {
	c, err := e.pool.Acquire(e.ctx)
	if err != nil {
		return err
	}
	defer c.Release()
	b := &pgx.Batch{}
	var tx pgx.Tx
	if first == nil {
		if tx, err = c.Conn().Begin(e.ctx); err != nil {
			return err
		}
	} else {
		b.BeginTx(pgx.TxOptions{})
		first(b)
		br := c.Conn().SendBatch(e.ctx, b)
		tx = br.Tx()
		if err := br.Close(); err != nil {
			return err
		}
	}
	if err := f(c, tx); err != nil {
		if c.Conn().PgConn().TxStatus() != 'I' {
			tx.Rollback(e.ctx)
		}
		return err
	}
	return nil
}

// commitWith sends query and COMMIT in one batch on c.
func (e *benchEnv) commitWith(c *pgxpool.Conn, query string, args ...any) error {
	b := &pgx.Batch{}
	b.Queue(query, args...)
	b.Queue("commit")
	return c.Conn().SendBatch(e.ctx, b).Close()
}

func (e *benchEnv) pgxByhandPipe() func(int64) error {
	return func(n int64) error {
		_, key, created, expires := unit("hp-", n)
		return e.pipelined(func(b *pgx.Batch) {
			b.Queue(e.q.Insert, key[:], "svc-a", benchMethod, benchFP[:], created, expires)
		}, func(c *pgxpool.Conn, tx pgx.Tx) error {
			if _, err := tx.Exec(e.ctx, e.biz, "acct", n); err != nil {
				return err
			}
			return e.commitWith(c, e.pq.Complete, 0, benchResponse, benchType, created, key[:])
		})
	}
}

func (e *benchEnv) pgxKitPipe() func(int64) error {
	s := e.pgxStore()
	return func(n int64) error {
		id, _, _, _ := unit("kp-", n)
		tx, c, err := s.BeginClaim(e.ctx, e.pool, pgx.TxOptions{}, benchReq(id))
		if err != nil {
			return err
		}
		if !c.Acquired() {
			return fmt.Errorf("want acquired, got %v", c.Outcome)
		}
		if _, err := tx.Exec(e.ctx, e.biz, "acct", n); err != nil {
			tx.Rollback(e.ctx)
			return err
		}
		return s.CompleteCommit(e.ctx, tx, c, benchResult())
	}
}

func (e *benchEnv) pgxByhandPipeAt() func(int64) error {
	return func(n int64) error {
		_, key, created, expires := unit("hpa-", n)
		return e.pipelined(nil, func(c *pgxpool.Conn, tx pgx.Tx) error {
			if _, err := tx.Exec(e.ctx, e.biz, "acct", n); err != nil {
				return err
			}
			return e.commitWith(c, e.pq.Record, key[:], "svc-a", benchMethod, benchFP[:], 0, benchResponse, benchType, created, created, expires)
		})
	}
}

func (e *benchEnv) pgxKitPipeAt() func(int64) error {
	s := e.pgxStore()
	return func(n int64) error {
		id, _, _, _ := unit("kpa-", n)
		tx, err := s.Begin(e.ctx, e.pool, pgx.TxOptions{})
		if err != nil {
			return err
		}
		if _, err := tx.Exec(e.ctx, e.biz, "acct", n); err != nil {
			tx.Rollback(e.ctx)
			return err
		}
		c, err := s.RecordCommit(e.ctx, tx, benchReq(id), benchResult())
		if err == nil && !c.Recorded() {
			err = fmt.Errorf("want recorded, got %v", c.Outcome)
		}
		return err
	}
}

func (e *benchEnv) pgxRunnerOf(b *testing.B, atCommit bool) *pgxledger.Runner {
	var opts []txmiddleware.Option
	if atCommit {
		opts = append(opts, txmiddleware.WithClaimAtCommit())
	}
	r, err := pgxledger.NewRunner(e.pool, e.pgxStore(), opts...)
	if err != nil {
		b.Fatal(err)
	}
	return r
}

func (e *benchEnv) pgxWork(n int64) pgxledger.Work {
	return func(ctx context.Context, tx pgx.Tx) (ledger.Result, error) {
		_, err := tx.Exec(ctx, e.biz, "acct", n)
		return benchResult(), err
	}
}

func (e *benchEnv) pgxRunner(b *testing.B, atCommit bool) func(int64) error {
	r := e.pgxRunnerOf(b, atCommit)
	return func(n int64) error {
		id, _, _, _ := unit("r-", n)
		out, err := r.Run(e.ctx, benchReq(id), e.pgxWork(n))
		if err == nil && !out.Executed {
			err = fmt.Errorf("want executed: %+v", out)
		}
		return err
	}
}

func (e *benchEnv) pgxReplay(b *testing.B) func(int64) error {
	r := e.pgxRunnerOf(b, false)
	for i := range int64(replayKeys) {
		id, _, _, _ := unit("rp-", i)
		if _, err := r.Run(e.ctx, benchReq(id), e.pgxWork(i)); err != nil {
			b.Fatal(err)
		}
	}
	return func(n int64) error {
		id, _, _, _ := unit("rp-", n%replayKeys)
		out, err := r.Run(e.ctx, benchReq(id), e.pgxWork(n))
		if err == nil && !out.Replayed {
			err = fmt.Errorf("want a replay: %+v", out)
		}
		return err
	}
}
