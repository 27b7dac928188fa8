package ledger_test

import (
	"context"
	"database/sql"
	"math/rand/v2"
	"runtime"
	"sort"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/opledger/opledger/internal/testkit/testdb"
	"github.com/opledger/opledger/ledger"
)

// scaleWorkers is the concurrency of the scale benchmarks' claims.
const scaleWorkers = 16

// BenchmarkScaleClaim compares claims on the scale table (see
// TestScaleLoad) with claims on an empty table, on PostgreSQL and
// MariaDB, 16 workers on 16 connections, each claim in its own
// transaction:
//
//	acquire   Claim of a new key, Complete, COMMIT (the table grows by one entry)
//	replay    Claim of an existing completed entry chosen at random, COMMIT
//
// ns/op is the time per claim of the whole run (throughput: 1e9/ns/op
// claims per second); claims/s is reported too.
//
//	OPLEDGER_SCALE_ROWS=10000000 go test -run '^$' -bench BenchmarkScaleClaim -benchtime 20000x -timeout 1h ./ledger/
func BenchmarkScaleClaim(b *testing.B) {
	rows := scaleRows(b)
	for _, tg := range scaleTargets() {
		b.Run(tg.Name, func(b *testing.B) {
			db, big := scaleTarget(b, tg, scaleWorkers, rows)
			// The "empty" table holds 10,000 generated entries, for the
			// replays: small enough to stay in the database's cache.
			empty := testdb.NewTable(b, db, tg.Dialect)
			const smallRows = 10_000
			loadScale(b, db, tg, empty, smallRows)
			for _, table := range []struct {
				name  string
				table string
				n     int64
			}{{"empty", empty, smallRows}, {"10M", big, rows}} {
				l, err := ledger.New(tg.Dialect, ledger.WithTable(table.table))
				if err != nil {
					b.Fatal(err)
				}
				b.Run("acquire/"+table.name, func(b *testing.B) {
					prefix := "bench-" + strconv.FormatInt(time.Now().UnixNano(), 36) + "-"
					var seq atomic.Int64
					parallel(b, func() error {
						n := seq.Add(1)
						id, err := ledger.NewIdentity("principal:svc-bench", scaleMethods[0], prefix+strconv.FormatInt(n, 10))
						if err != nil {
							return err
						}
						return inTx(db, func(tx *sql.Tx) error {
							c, err := l.Claim(context.Background(), tx, ledger.ClaimRequest{Identity: id, Fingerprint: fp("bench")})
							if err != nil {
								return err
							}
							return l.Complete(context.Background(), tx, c, ledger.Result{Response: benchResponse, TypeName: "pay.v1.TransferReply"})
						})
					})
				})
				b.Run("replay/"+table.name, func(b *testing.B) {
					parallel(b, func() error {
						// The newest 80%: the oldest entries of the scale table
						// expire as time passes (and BenchmarkScaleSweep
						// deletes them).
						i := table.n - rand.Int64N(table.n*8/10)
						if i%1000 == 0 {
							i-- // a pending entry: ErrIncomplete, not a replay
						}
						id, err := ledger.NewIdentity(scaleCaller(i), scaleMethod(i), scaleKey(i))
						if err != nil {
							return err
						}
						return inTx(db, func(tx *sql.Tx) error {
							_, err := l.Claim(context.Background(), tx, ledger.ClaimRequest{Identity: id, Fingerprint: fp("fp-" + strconv.FormatInt(i, 10))})
							return err
						})
					})
				})
			}
		})
	}
}

// parallel runs op b.N times on scaleWorkers goroutines and reports
// claims/s.
func parallel(b *testing.B, op func() error) {
	b.Helper()
	b.SetParallelism((scaleWorkers + runtime.GOMAXPROCS(0) - 1) / runtime.GOMAXPROCS(0))
	b.ResetTimer()
	start := time.Now()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if err := op(); err != nil {
				b.Error(err)
				return
			}
		}
	})
	b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "claims/s")
}

func inTx(db *sql.DB, f func(*sql.Tx) error) error { return testdb.InTx(context.Background(), db, f) }

// BenchmarkScaleSweep sweeps the scale table's entries that expire within
// the next OPLEDGER_SCALE_SWEEP (default 30m; about 208,000 entries of ten
// million) with a clock moved that far ahead, in batches of 1,000, while 8
// workers claim new keys on the same table; it reports the sweep's rows/s
// and the claims' throughput and median latency during the sweep. It runs
// once whatever b.N; it deletes what it sweeps (TestScaleLoad reloads).
//
//	OPLEDGER_SCALE_ROWS=10000000 go test -run '^$' -bench BenchmarkScaleSweep -benchtime 1x -timeout 1h ./ledger/
func BenchmarkScaleSweep(b *testing.B) {
	rows := scaleRows(b)
	ahead := 30 * time.Minute
	for _, tg := range scaleTargets() {
		b.Run(tg.Name, func(b *testing.B) {
			const claimers = 8
			db, table := scaleTarget(b, tg, claimers+1, rows)
			l, err := ledger.New(tg.Dialect, ledger.WithTable(table))
			if err != nil {
				b.Fatal(err)
			}
			sweeper, err := ledger.New(tg.Dialect, ledger.WithTable(table), ledger.WithClock(func() time.Time { return time.Now().Add(ahead) }))
			if err != nil {
				b.Fatal(err)
			}
			var (
				stop  atomic.Bool
				wg    sync.WaitGroup
				mu    sync.Mutex
				lats  []time.Duration
				prefx = "sweepbench-" + strconv.FormatInt(time.Now().UnixNano(), 36) + "-"
				seq   atomic.Int64
			)
			for range claimers {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for !stop.Load() {
						id, err := ledger.NewIdentity("principal:svc-bench", scaleMethods[1], prefx+strconv.FormatInt(seq.Add(1), 10))
						if err != nil {
							b.Error(err)
							return
						}
						t0 := time.Now()
						err = inTx(db, func(tx *sql.Tx) error {
							c, err := l.Claim(context.Background(), tx, ledger.ClaimRequest{Identity: id, Fingerprint: fp("bench")})
							if err != nil {
								return err
							}
							return l.Complete(context.Background(), tx, c, ledger.Result{Response: benchResponse})
						})
						if err != nil {
							b.Error(err)
							return
						}
						mu.Lock()
						lats = append(lats, time.Since(t0))
						mu.Unlock()
					}
				}()
			}
			b.ResetTimer()
			start := time.Now()
			n, err := sweeper.Sweep(context.Background(), db, 1000)
			elapsed := time.Since(start)
			stop.Store(true)
			wg.Wait()
			if err != nil {
				b.Fatal(err)
			}
			sort.Slice(lats, func(i, j int) bool { return lats[i] < lats[j] })
			b.ReportMetric(float64(n), "swept")
			b.ReportMetric(float64(n)/elapsed.Seconds(), "rows/s")
			b.ReportMetric(float64(len(lats))/elapsed.Seconds(), "claims/s")
			if len(lats) > 0 {
				b.ReportMetric(float64(lats[len(lats)/2].Microseconds()), "claim-p50-µs")
				b.ReportMetric(float64(lats[len(lats)*99/100].Microseconds()), "claim-p99-µs")
			}
		})
	}
}
