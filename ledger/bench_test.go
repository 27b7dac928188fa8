package ledger_test

import (
	"context"
	"database/sql"
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
				run(b, func(n int64) error {
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
				})
			})
			b.Run("replay", func(b *testing.B) {
				fresh(b)
				const existing = 1000
				for i := 0; i < existing; i++ {
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
			for i := 0; i < existing; i++ {
				id := testdb.ID(b, "svc-a", method, "replay-"+strconv.Itoa(i))
				if err := e.tx(ctx, func(tx *sql.Tx) error {
					c, err := e.l.Claim(ctx, tx, ledger.ClaimRequest{Identity: id, Fingerprint: fp("x")})
					if err != nil {
						return err
					}
					return e.l.Complete(ctx, tx, c, ledger.Result{Response: benchResponse})
				}); err != nil {
					b.Fatal(err)
				}
			}
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
