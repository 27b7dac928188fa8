package ledger_test

import (
	"context"
	"database/sql"
	"flag"
	"fmt"
	"runtime"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/opledger/opledger/internal/testdb"
	"github.com/opledger/opledger/ledger"
)

// benchWorkers is the number of concurrent workers (and pooled
// connections) in the transaction benchmarks, as in the pgbench figures.
const benchWorkers = 16

// BenchmarkTransaction compares, on each database with 16 concurrent
// workers and a pool of 16 connections:
//
//	bare    a transaction with one business INSERT
//	kit     the same plus Claim and Complete through the ledger
//	byhand  the same SQL as kit, written by hand (the design's limit)
//	replay  Claim of an already completed entry (the replay path)
//
// Run: go test -run '^$' -bench BenchmarkTransaction -benchtime 5s ./ledger/
func BenchmarkTransaction(b *testing.B) {
	for _, tg := range testdb.Targets() {
		if tg.Name == "postgres/pq" {
			continue // one PostgreSQL driver is enough for the comparison
		}
		b.Run(tg.Name, func(b *testing.B) {
			db := tg.Open(b, benchWorkers)
			ctx := context.Background()
			var seq atomic.Int64
			var e *benchEnv
			run := func(b *testing.B, op func(n int64) error) {
				b.SetParallelism((benchWorkers + runtime.GOMAXPROCS(0) - 1) / runtime.GOMAXPROCS(0))
				b.ResetTimer()
				b.RunParallel(func(pb *testing.PB) {
					for pb.Next() {
						if err := op(seq.Add(1)); err != nil {
							b.Error(err)
							return
						}
					}
				})
			}
			// Each sub-benchmark gets a fresh, empty table so that one does not
			// pay for the rows another left behind.
			fresh := func(b *testing.B) { e = &benchEnv{newEnv(b, tg.Name, tg.Dialect, db), tg.Family()} }
			b.Run("bare", func(b *testing.B) {
				fresh(b)
				run(b, func(n int64) error {
					return e.tx(ctx, func(tx *sql.Tx) error { return e.WriteBiz(ctx, tx, "acct", int(n)) })
				})
			})
			b.Run("kit", func(b *testing.B) {
				fresh(b)
				run(b, e.kitOp(ctx))
			})
			// The one-statement claim's cost to an acquisition on
			// PostgreSQL: the kit claiming with the plain INSERT and, on
			// conflict only, a separate read.
			if tg.Family() == "postgres" {
				b.Run("kit-split", func(b *testing.B) {
					fresh(b)
					ledger.SplitClaim(e.l)
					run(b, e.kitOp(ctx))
				})
			}
			// The expires_at index's cost on PostgreSQL: the kit on a table
			// whose B-tree is replaced by a BRIN index, and on one without
			// any index on expires_at (the bound of what another index
			// could save; the sweep then scans the table).
			for _, alt := range []string{"brin", "noindex"} {
				if tg.Family() != "postgres" {
					break
				}
				b.Run("kit-"+alt, func(b *testing.B) {
					fresh(b)
					e.replaceExpiresIndex(b, alt)
					run(b, e.kitOp(ctx))
				})
			}
			b.Run("byhand", func(b *testing.B) {
				fresh(b)
				ins, upd := e.handSQL()
				run(b, e.byhandOp(ctx, ins, upd))
			})
			b.Run("replay", func(b *testing.B) {
				fresh(b)
				const existing = 1000
				e.completeKeys(b, ctx, existing)
				run(b, e.replayOp(ctx, existing))
			})
		})
	}
}

var benchResponse = []byte(`{"status":"ok","amount":4711,"account":"acct-42"}`)

type benchEnv struct {
	*env
	family string // the target's database family: the hand-written SQL is the database's own
}

// replayOp is a replay for the n-th operation: Claim of one of the
// existing completed keys "replay-0" to "replay-<existing-1>".
func (e *benchEnv) replayOp(ctx context.Context, existing int64) func(n int64) error {
	return func(n int64) error {
		id, err := ledger.NewIdentity("svc-a", method, "replay-"+strconv.FormatInt(n%existing, 10))
		if err != nil {
			return err
		}
		return e.tx(ctx, func(tx *sql.Tx) error {
			c, err := e.l.Claim(ctx, tx, ledger.ClaimRequest{Identity: id, Fingerprint: fp("x")})
			if err == nil && c.Outcome != ledger.Replay {
				err = fmt.Errorf("want replay, got %v", c.Outcome)
			}
			return err
		})
	}
}

// kitOp is the kit's happy path for the n-th operation: Claim of a new
// key, the business INSERT and Complete, in one transaction.
func (e *benchEnv) kitOp(ctx context.Context) func(n int64) error {
	return func(n int64) error {
		id, err := ledger.NewIdentity("svc-a", method, "kit-"+strconv.FormatInt(n, 10))
		if err != nil {
			return err
		}
		return e.tx(ctx, func(tx *sql.Tx) error {
			c, err := e.l.Claim(ctx, tx, ledger.ClaimRequest{Identity: id, Fingerprint: fp("x")})
			if err != nil {
				return err
			}
			if err := e.WriteBiz(ctx, tx, "acct", int(n)); err != nil {
				return err
			}
			return e.l.Complete(ctx, tx, c, ledger.Result{Response: benchResponse, TypeName: "pay.v1.TransferResponse"})
		})
	}
}

func (e *benchEnv) tx(ctx context.Context, f func(*sql.Tx) error) error {
	tx, err := e.DB.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	if err := f(tx); err != nil {
		tx.Rollback()
		return err
	}
	return tx.Commit()
}

// handSQL is the claim and completion written by hand, as a user would
// without the kit.
func (e *benchEnv) handSQL() (insert, update string) {
	t := e.Dialect.QuoteIdent(e.Table)
	p := e.Ph
	insert = "INSERT INTO " + t + " (id, caller, method, request_fp, created_at, expires_at) VALUES (" +
		p(1) + ", " + p(2) + ", " + p(3) + ", " + p(4) + ", " + p(5) + ", " + p(6) + ")"
	if e.family != "mysql" {
		insert += " ON CONFLICT (id) DO NOTHING"
	}
	update = "UPDATE " + t + " SET code = " + p(1) + ", response = " + p(2) + ", response_type = " + p(3) +
		", completed_at = " + p(4) + " WHERE id = " + p(5)
	return insert, update
}

// replaceExpiresIndex drops the PostgreSQL table's expires_at B-tree and,
// for alt "brin", creates a BRIN index on expires_at in its place.
func (e *benchEnv) replaceExpiresIndex(b *testing.B, alt string) {
	b.Helper()
	idx := e.Dialect.QuoteIdent(e.Table + "_expires_idx")
	if _, err := e.DB.Exec("DROP INDEX " + idx); err != nil {
		b.Fatal(err)
	}
	if alt == "brin" {
		if _, err := e.DB.Exec("CREATE INDEX " + idx + " ON " + e.Dialect.QuoteIdent(e.Table) + " USING brin (expires_at)"); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkInterleaved runs, on each database, 16 workers on a pool of 16
// connections that cycle through the variants one operation at a time, so
// that a change of load on this noisy machine hits every variant alike, and
// reports each variant's mean latency and its throughput relative to the
// bare transaction's (bare mean latency / variant mean latency: at a fixed
// number of workers, throughput is inversely proportional to mean
// latency). The variants are those of BenchmarkTransaction; on PostgreSQL
// also the kit on a table whose expires_at B-tree is a BRIN index
// (kit-brin) or missing (kit-noindex). Not on SQLite: with one writer at a
// time and a busy handler that is not fair, interleaved latencies there
// measure the lock's queue, not the variants (BenchmarkTransaction does).
//
// Run: go test -run '^$' -bench BenchmarkInterleaved -benchtime 20000x ./ledger/
func BenchmarkInterleaved(b *testing.B) {
	for _, tg := range testdb.Targets() {
		if tg.Name == "postgres/pq" || tg.Family() == "sqlite" {
			continue
		}
		b.Run(tg.Name, func(b *testing.B) {
			db := tg.Open(b, benchWorkers)
			ctx := context.Background()
			e := &benchEnv{newEnv(b, tg.Name, tg.Dialect, db), tg.Family()}
			const existing = 1000
			e.completeKeys(b, ctx, existing)
			variants := []benchVariant{
				{name: "bare", op: func(n int64) error {
					return e.tx(ctx, func(tx *sql.Tx) error { return e.WriteBiz(ctx, tx, "acct", int(n)) })
				}},
				{name: "kit", op: e.kitOp(ctx)},
				{name: "replay", op: e.replayOp(ctx, existing)},
			}
			if tg.Family() == "postgres" {
				for _, alt := range []string{"brin", "noindex"} {
					ae := &benchEnv{newEnv(b, tg.Name, tg.Dialect, db), tg.Family()}
					ae.replaceExpiresIndex(b, alt)
					variants = append(variants, benchVariant{name: "kit-" + alt, op: ae.kitOp(ctx)})
				}
			}
			runInterleaved(b, variants)
		})
	}
}

// benchVariant is one operation of an interleaved benchmark, with its
// accumulated latency.
type benchVariant struct {
	name  string
	op    func(n int64) error
	total atomic.Int64 // nanoseconds
	count atomic.Int64
}

// runInterleaved runs b.N operations on 16 workers, the i-th operation
// being variant i mod len(variants), and reports every variant's mean
// latency (µs-<name>) and its throughput relative to the first variant's
// (x-<name>).
func runInterleaved(b *testing.B, variants []benchVariant) {
	var seq atomic.Int64
	b.SetParallelism((benchWorkers + runtime.GOMAXPROCS(0) - 1) / runtime.GOMAXPROCS(0))
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			n := seq.Add(1)
			v := &variants[n%int64(len(variants))]
			start := time.Now()
			if err := v.op(n); err != nil {
				b.Error(v.name, ": ", err)
				return
			}
			v.total.Add(int64(time.Since(start)))
			v.count.Add(1)
		}
	})
	b.StopTimer()
	mean := func(v *benchVariant) float64 {
		if c := v.count.Load(); c > 0 {
			return float64(v.total.Load()) / float64(c)
		}
		return 0
	}
	base := mean(&variants[0])
	for i := range variants {
		m := mean(&variants[i])
		b.ReportMetric(m/1e3, "µs-"+variants[i].name)
		if m > 0 && i > 0 {
			b.ReportMetric(base/m, "x-"+variants[i].name)
		}
	}
}

var (
	benchRounds   = flag.Int("bench.rounds", 5, "rounds of BenchmarkRounds")
	benchRoundDur = flag.Duration("bench.round", 2*time.Second, "how long each variant runs per round in BenchmarkRounds")
)

// BenchmarkRounds measures the variants of BenchmarkTransaction, plus
// "record" (the business INSERT, then Record of the completed entry: claim
// at commit), each alone on 16 workers for -bench.round, in -bench.rounds
// rounds that alternate the variants, and reports each variant's median
// throughput, its median throughput relative to the bare transaction's
// within a round (x-<name>), and record's relative to kit's (claim at
// commit over claim first). Ratios within a round compare runs seconds
// apart, which on a noisy machine is what makes them comparable; the
// pgbench figures in docs/benchmarks.md are taken the same way.
//
// Run: go test -run '^$' -bench BenchmarkRounds -benchtime 1x ./ledger/ [-bench.rounds 5 -bench.round 2s]
func BenchmarkRounds(b *testing.B) {
	for _, tg := range testdb.Targets() {
		if tg.Name == "postgres/pq" || tg.Name == "sqlite/modernc" {
			continue // one driver per database is enough for the comparison
		}
		b.Run(tg.Name, func(b *testing.B) {
			db := tg.Open(b, benchWorkers)
			ctx := context.Background()
			fresh := func() *benchEnv { return &benchEnv{newEnv(b, tg.Name, tg.Dialect, db), tg.Family()} }
			bare, kit, byhand, record, replay := fresh(), fresh(), fresh(), fresh(), fresh()
			const existing = 1000
			replay.completeKeys(b, ctx, existing)
			ins, upd := byhand.handSQL()
			variants := []testdb.RoundVariant{
				{Name: "bare", Op: func(n int64) error {
					return bare.tx(ctx, func(tx *sql.Tx) error { return bare.WriteBiz(ctx, tx, "acct", int(n)) })
				}},
				{Name: "kit", Op: kit.kitOp(ctx)},
				{Name: "byhand", Op: byhand.byhandOp(ctx, ins, upd)},
				{Name: "record", Op: record.recordOp(ctx)},
				{Name: "replay", Op: replay.replayOp(ctx, existing)},
			}
			if tg.Family() == "postgres" {
				// The one-statement claim's price and gain: the kit claiming
				// with the plain INSERT and, on conflict, a separate read.
				split, rsplit, noidx := fresh(), fresh(), fresh()
				ledger.SplitClaim(split.l)
				ledger.SplitClaim(rsplit.l)
				rsplit.completeKeys(b, ctx, existing)
				// What the expires_at B-tree costs a recorded entry.
				noidx.replaceExpiresIndex(b, "noindex")
				variants = append(variants, testdb.RoundVariant{Name: "kit-split", Op: split.kitOp(ctx)},
					testdb.RoundVariant{Name: "replay-split", Op: rsplit.replayOp(ctx, existing)},
					testdb.RoundVariant{Name: "record-noindex", Op: noidx.recordOp(ctx)})
			}
			// The floor of any form of the happy path: two statements that
			// do nothing, where the claim and the completion would be.
			floor := fresh()
			variants = append(variants, testdb.RoundVariant{Name: "floor", Op: func(n int64) error {
				var v int64
				return floor.tx(ctx, func(tx *sql.Tx) error {
					if err := tx.QueryRowContext(ctx, "SELECT "+floor.Ph(1)+" + 0", n).Scan(&v); err != nil {
						return err
					}
					if err := floor.WriteBiz(ctx, tx, "acct", int(n)); err != nil {
						return err
					}
					return tx.QueryRowContext(ctx, "SELECT "+floor.Ph(1)+" + 0", n).Scan(&v)
				})
			}})
			for range b.N {
				tput := testdb.Rounds(b, *benchRounds, benchWorkers, *benchRoundDur, variants)
				if b.Failed() {
					return
				}
				testdb.ReportRounds(b, variants, tput, 0, [2]string{"record", "kit"}, [2]string{"kit", "byhand"})
			}
		})
	}
}

// completeKeys claims and completes the keys "replay-0" to
// "replay-<n-1>", for replayOp.
func (e *benchEnv) completeKeys(b *testing.B, ctx context.Context, n int) {
	b.Helper()
	for i := 0; i < n; i++ {
		id := testdb.ID(b, "svc-a", method, "replay-"+strconv.Itoa(i))
		err := e.tx(ctx, func(tx *sql.Tx) error {
			c, err := e.l.Claim(ctx, tx, ledger.ClaimRequest{Identity: id, Fingerprint: fp("x")})
			if err != nil {
				return err
			}
			return e.l.Complete(ctx, tx, c, ledger.Result{Response: benchResponse})
		})
		if err != nil {
			b.Fatal(err)
		}
	}
}

// byhandOp is the kit's happy path written by hand (the statements of
// handSQL) for the n-th operation.
func (e *benchEnv) byhandOp(ctx context.Context, ins, upd string) func(n int64) error {
	return func(n int64) error {
		id, err := ledger.NewIdentity("svc-a", method, "hand-"+strconv.FormatInt(n, 10))
		if err != nil {
			return err
		}
		key := id.ID()
		f := fp("x")
		return e.tx(ctx, func(tx *sql.Tx) error {
			now := time.Now()
			if _, err := tx.ExecContext(ctx, ins, key[:], "svc-a", method, f[:], now.UnixMicro(), now.Add(24*time.Hour).UnixMicro()); err != nil {
				return err
			}
			if err := e.WriteBiz(ctx, tx, "acct", int(n)); err != nil {
				return err
			}
			_, err := tx.ExecContext(ctx, upd, 0, benchResponse, "pay.v1.TransferResponse", now.UnixMicro(), key[:])
			return err
		})
	}
}

// recordOp is claim at commit for the n-th operation: the business INSERT,
// then Record of the completed entry, in one transaction.
func (e *benchEnv) recordOp(ctx context.Context) func(n int64) error {
	return func(n int64) error {
		id, err := ledger.NewIdentity("svc-a", method, "rec-"+strconv.FormatInt(n, 10))
		if err != nil {
			return err
		}
		return e.tx(ctx, func(tx *sql.Tx) error {
			if err := e.WriteBiz(ctx, tx, "acct", int(n)); err != nil {
				return err
			}
			c, err := e.l.Record(ctx, tx, ledger.ClaimRequest{Identity: id, Fingerprint: fp("x")},
				ledger.Result{Response: benchResponse, TypeName: "pay.v1.TransferResponse"})
			if err == nil && !c.Recorded() {
				err = fmt.Errorf("want recorded, got %v", c.Outcome)
			}
			return err
		})
	}
}
