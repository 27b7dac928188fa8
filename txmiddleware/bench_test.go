package txmiddleware_test

import (
	"context"
	"database/sql"
	"flag"
	"fmt"
	"runtime"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/opledger/opledger/dialects"
	"github.com/opledger/opledger/internal/testdb"
	"github.com/opledger/opledger/ledger"
	"github.com/opledger/opledger/txmiddleware"
)

const benchWorkers = 16

// BenchmarkRunner compares the runner with a hand-written transaction
// doing the same claim, business insert and completion, with 16 parallel
// workers on a pool of 16 connections. "acquire" uses a new key per
// operation; "replay" claims one completed key over and over. "runner"
// has an ErrorCodec; "runner-no-codec" has none, so it records no error
// (neither takes a savepoint: they send the same statements on success).
//
//	OPLEDGER_TEST_POSTGRES_DSN=… go test -run '^$' -bench BenchmarkRunner -benchtime 3s ./txmiddleware/
func BenchmarkRunner(b *testing.B) {
	for _, tg := range testdb.Targets() {
		b.Run(tg.Name, func(b *testing.B) {
			db := tg.Open(b, benchWorkers)
			e := withStore(b, testdb.NewEnv(b, tg.Name, tg.Dialect, db))
			variants := []variant{
				{"hand", e.handWritten},
				{"runner", e.viaRunner(e.runner(b))},
				{"runner-no-codec", e.viaRunner(e.noCodecRunner(b))},
			}
			if _, ok := e.Dialect.(dialects.LockWaiter); ok {
				variants = append(variants, variant{"runner-lockwait", e.viaRunner(e.runner(b, txmiddleware.WithLockWait(10*time.Second)))})
			}
			var seq atomic.Int64
			for _, v := range variants {
				b.Run("acquire/"+v.name, func(b *testing.B) {
					parallel(b, func(ctx context.Context) error {
						key := fmt.Sprintf("bench-%d", seq.Add(1))
						return v.run(ctx, req(b, key), key)
					})
				})
			}
			replayKey := "bench-replay"
			if err := e.handWritten(context.Background(), req(b, replayKey), replayKey); err != nil {
				b.Fatal(err)
			}
			for _, v := range variants {
				b.Run("replay/"+v.name, func(b *testing.B) {
					r := req(b, replayKey)
					parallel(b, func(ctx context.Context) error { return v.run(ctx, r, replayKey) })
				})
			}
		})
	}
}

type variant struct {
	name string
	run  func(ctx context.Context, req ledger.ClaimRequest, key string) error
}

// parallel runs op on benchWorkers goroutines (GOMAXPROCS permitting an
// exact multiple) and reports operations per second.
func parallel(b *testing.B, op func(ctx context.Context) error) {
	procs := runtime.GOMAXPROCS(0)
	b.SetParallelism((benchWorkers + procs - 1) / procs)
	ctx := context.Background()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if err := op(ctx); err != nil {
				b.Error(err)
				return
			}
		}
	})
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "ops/s")
}

// handWritten is what a careful user writes without the runner.
func (e *env) handWritten(ctx context.Context, req ledger.ClaimRequest, key string) error {
	for attempt := 0; attempt < 10; attempt++ {
		err := func() error {
			tx, err := e.DB.BeginTx(ctx, nil)
			if err != nil {
				return err
			}
			defer tx.Rollback()
			c, err := e.l.Claim(ctx, tx, req)
			if err != nil {
				return err
			}
			if !c.Acquired() {
				return nil // replay: the stored result is c.Result
			}
			if err := e.WriteBiz(ctx, tx, key, 1); err != nil {
				return err
			}
			if err := e.l.Complete(ctx, tx, c, ledger.Result{Response: []byte("done " + key), TypeName: "pay.v1.TransferResponse"}); err != nil {
				return err
			}
			return tx.Commit()
		}()
		if err == nil || !e.Dialect.Classify(err).Retryable() {
			return err
		}
	}
	return fmt.Errorf("too many retries")
}

func (e *env) viaRunner(r *txmiddleware.Runner) func(context.Context, ledger.ClaimRequest, string) error {
	return func(ctx context.Context, req ledger.ClaimRequest, key string) error {
		_, err := r.Run(ctx, req, func(ctx context.Context, tx *sql.Tx) (ledger.Result, error) {
			if err := e.WriteBiz(ctx, tx, key, 1); err != nil {
				return ledger.Result{}, err
			}
			return ledger.Result{Response: []byte("done " + key), TypeName: "pay.v1.TransferResponse"}, nil
		})
		return err
	}
}

// BenchmarkExtraStatements measures, on one connection with no
// concurrency, what a savepoint would cost (the runner takes none since
// final errors are recorded in a fresh transaction; kept for comparison)
// against a plain statement, and the bounded begin of WithLockWait
// (PostgreSQL's SET LOCAL; MySQL's SET SESSION and its restore, SQLite's
// busy_timeout pragmas, on a connection of their own), against a plain
// begin; both begins end with a rollback.
func BenchmarkExtraStatements(b *testing.B) {
	for _, tg := range testdb.Targets() {
		b.Run(tg.Name, func(b *testing.B) {
			db := tg.Open(b, 1)
			ctx := context.Background()
			inTx := func(b *testing.B, stmt string, args ...any) {
				tx, err := db.BeginTx(ctx, nil)
				if err != nil {
					b.Fatal(err)
				}
				defer func() { tx.Rollback() }()
				b.ResetTimer()
				for i := range b.N {
					if i%1000 == 999 { // bound the savepoint stack
						b.StopTimer()
						tx.Rollback()
						if tx, err = db.BeginTx(ctx, nil); err != nil {
							b.Fatal(err)
						}
						b.StartTimer()
					}
					if _, err := tx.ExecContext(ctx, stmt, args...); err != nil {
						b.Fatal(err)
					}
				}
			}
			b.Run("select-1", func(b *testing.B) { inTx(b, "SELECT 1") })
			b.Run("savepoint", func(b *testing.B) { inTx(b, "SAVEPOINT opledger_work") })
			b.Run("begin", func(b *testing.B) {
				for range b.N {
					tx, err := db.BeginTx(ctx, nil)
					if err != nil {
						b.Fatal(err)
					}
					if err := tx.Rollback(); err != nil {
						b.Fatal(err)
					}
				}
			})
			lw, ok := tg.Dialect.(dialects.LockWaiter)
			if !ok {
				return
			}
			b.Run("begin-bounded", func(b *testing.B) {
				for range b.N {
					tx, release, err := lw.BeginBounded(ctx, db, nil, time.Second)
					if err != nil {
						b.Fatal(err)
					}
					err = tx.Rollback()
					release()
					if err != nil {
						b.Fatal(err)
					}
				}
			})
		})
	}
}

// BenchmarkRunnerInterleaved compares the same variants as
// BenchmarkRunner on a machine whose load is not under control: 16
// workers share the phase's operations, b.N per variant, each worker
// cycling through the variants one operation at a time and timing every
// operation, so that load from elsewhere falls on all variants alike. It
// reports each variant's median latency and its ratio to the
// hand-written transaction's (above 1 is slower). A few thousand
// operations per variant give stable medians:
//
//	go test -run '^$' -bench BenchmarkRunnerInterleaved -benchtime 5000x ./txmiddleware/
func BenchmarkRunnerInterleaved(b *testing.B) {
	for _, tg := range testdb.Targets() {
		b.Run(tg.Name, func(b *testing.B) {
			db := tg.Open(b, benchWorkers)
			e := withStore(b, testdb.NewEnv(b, tg.Name, tg.Dialect, db))
			variants := []variant{
				{"hand", e.handWritten},
				{"runner", e.viaRunner(e.runner(b))},
			}
			if _, ok := e.Dialect.(dialects.LockWaiter); ok {
				variants = append(variants, variant{"lockwait", e.viaRunner(e.runner(b, txmiddleware.WithLockWait(10*time.Second)))})
			}
			replayKey := "bench-replay"
			if err := e.handWritten(context.Background(), req(b, replayKey), replayKey); err != nil {
				b.Fatal(err)
			}
			replayReq := req(b, replayKey)
			var seq atomic.Int64
			b.ResetTimer()
			for _, phase := range []string{"acquire", "replay"} {
				lat := interleave(b, variants, phase, replayReq, replayKey, "il", &seq, false)
				if b.Failed() {
					return
				}
				// The median, not the mean: under contention SQLite's busy
				// handler lets a few waiters starve for seconds, and those
				// land on any variant at random.
				median := make([]float64, len(variants))
				for i := range variants {
					slices.Sort(lat[i])
					median[i] = float64(lat[i][len(lat[i])/2].Nanoseconds()) / 1e3
				}
				for i, v := range variants {
					b.ReportMetric(median[i], phase+"-"+v.name+"-p50-µs")
					if i > 0 {
						b.ReportMetric(median[i]/median[0], phase+"-"+v.name+"/hand")
					}
				}
			}
		})
	}
}

// BenchmarkOrders compares, interleaved like BenchmarkRunnerInterleaved
// (16 workers cycling through the variants one operation at a time), a
// bare transaction doing only the business insert (BEGIN, INSERT,
// COMMIT) with the runner claim first (BEGIN, claim, INSERT, complete,
// COMMIT) and claim at commit (BEGIN, INSERT, record, COMMIT), on new keys
// ("acquire") and on one completed key ("replay": claim first reads the
// stored result and rolls back; claim at commit runs the insert, then
// conflicts, reads and rolls back). It reports each variant's median
// latency and its throughput relative to the bare transaction's (mean
// latency of the bare transaction ÷ the variant's: with every worker
// cycling through the variants, the operations per second of each are in
// that ratio; above 1 is faster), and claim at commit's relative to claim
// first's:
//
//	go test -run '^$' -bench BenchmarkOrders -benchtime 3000x ./txmiddleware/
func BenchmarkOrders(b *testing.B) {
	for _, tg := range testdb.Targets() {
		b.Run(tg.Name, func(b *testing.B) {
			db := tg.Open(b, benchWorkers)
			e := withStore(b, testdb.NewEnv(b, tg.Name, tg.Dialect, db))
			first, atCommit := e.runner(b), e.runner(b, txmiddleware.WithClaimAtCommit())
			variants := []variant{
				{"bare", e.bare},
				{"claim-first", e.viaRunner(first)},
				{"claim-at-commit", e.viaRunner(atCommit)},
			}
			replayKey := "orders-replay"
			if err := e.viaRunner(first)(context.Background(), req(b, replayKey), replayKey); err != nil {
				b.Fatal(err)
			}
			replayReq := req(b, replayKey)
			var seq atomic.Int64
			b.ResetTimer()
			for _, phase := range []string{"acquire", "replay"} {
				lat := interleave(b, variants, phase, replayReq, replayKey, "ord", &seq, true)
				if b.Failed() {
					return
				}
				median, mean := make([]float64, len(variants)), make([]float64, len(variants))
				for i := range variants {
					slices.Sort(lat[i])
					median[i] = float64(lat[i][len(lat[i])/2].Nanoseconds()) / 1e3
					var sum time.Duration
					for _, d := range lat[i] {
						sum += d
					}
					mean[i] = float64(sum.Nanoseconds()) / 1e3 / float64(len(lat[i]))
				}
				for i, v := range variants {
					b.ReportMetric(median[i], phase+"-"+v.name+"-p50-µs")
					if i > 0 {
						b.ReportMetric(mean[0]/mean[i], phase+"-"+v.name+"-xbare")
					}
				}
				b.ReportMetric(mean[1]/mean[2], phase+"-at-commit/claim-first")
			}
		})
	}
}

// bare is the business insert alone in a transaction: what a keyed call
// costs over nothing. It ignores req (it has no ledger).
func (e *env) bare(ctx context.Context, _ ledger.ClaimRequest, key string) error {
	for attempt := 0; attempt < 10; attempt++ {
		err := func() error {
			tx, err := e.DB.BeginTx(ctx, nil)
			if err != nil {
				return err
			}
			defer tx.Rollback()
			if err := e.WriteBiz(ctx, tx, key, 1); err != nil {
				return err
			}
			return tx.Commit()
		}()
		if err == nil || !e.Dialect.Classify(err).Retryable() {
			return err
		}
	}
	return fmt.Errorf("too many retries")
}

// interleave runs b.N operations of each variant on benchWorkers workers
// that cycle through the variants one operation at a time, and returns
// every operation's latency by variant. In the "replay" phase the
// variants replay replayReq, except the first when freshFirst is set (a
// variant without a ledger, which cannot replay); otherwise each
// operation gets a new key, prefix-n.
func interleave(b *testing.B, variants []variant, phase string, replayReq ledger.ClaimRequest, replayKey, prefix string,
	seq *atomic.Int64, freshFirst bool) [][]time.Duration {
	var mu sync.Mutex
	lat := make([][]time.Duration, len(variants))
	total := int64(b.N * len(variants))
	var next atomic.Int64 // operations of the phase handed out
	ctx := context.Background()
	var wg sync.WaitGroup
	for range benchWorkers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			mine := make([][]time.Duration, len(variants))
			for n := next.Add(1) - 1; n < total; n = next.Add(1) - 1 {
				i := int(n % int64(len(variants)))
				r, key := replayReq, replayKey
				if phase == "acquire" || (freshFirst && i == 0) {
					key = fmt.Sprintf("%s-%d", prefix, seq.Add(1))
					r = req(b, key)
				}
				t0 := time.Now()
				if err := variants[i].run(ctx, r, key); err != nil {
					b.Error(err)
					return
				}
				mine[i] = append(mine[i], time.Since(t0))
			}
			mu.Lock()
			for i := range variants {
				lat[i] = append(lat[i], mine[i]...)
			}
			mu.Unlock()
		}()
	}
	wg.Wait()
	return lat
}

var (
	benchRounds   = flag.Int("bench.rounds", 5, "rounds of BenchmarkOrderRounds")
	benchRoundDur = flag.Duration("bench.round", 2*time.Second, "how long each variant runs per round in BenchmarkOrderRounds")
)

// BenchmarkOrderRounds measures the two orders of a keyed call by
// throughput: each variant alone on 16 workers (a pool of 16) for
// -bench.round, in -bench.rounds rounds that alternate the variants, as
// the pgbench figures in docs/benchmarks.md are taken. Variants: "bare"
// (the business INSERT alone), "claim-first" and "claim-at-commit" (the
// runner, new keys), and their replays of a completed key. It reports each
// variant's median throughput and, within each round, its throughput over
// the bare transaction's (x-<name>, medians), and claim at commit's over
// claim first's. BenchmarkOrders measures the same variants interleaved
// operation by operation, which shares every commit's flush among them and
// so narrows the ratios.
//
//	go test -run '^$' -bench BenchmarkOrderRounds -benchtime 1x ./txmiddleware/ [-bench.rounds 5 -bench.round 2s]
func BenchmarkOrderRounds(b *testing.B) {
	for _, tg := range testdb.Targets() {
		if tg.Name == "sqlite/modernc" {
			continue // one SQLite driver is enough for the comparison
		}
		b.Run(tg.Name, func(b *testing.B) {
			db := tg.Open(b, benchWorkers)
			e := withStore(b, testdb.NewEnv(b, tg.Name, tg.Dialect, db))
			first, atCommit := e.viaRunner(e.runner(b)), e.viaRunner(e.runner(b, txmiddleware.WithClaimAtCommit()))
			ctx := context.Background()
			replayKey := "rounds-replay"
			if err := first(ctx, req(b, replayKey), replayKey); err != nil {
				b.Fatal(err)
			}
			replayReq := req(b, replayKey)
			fresh := func(prefix string, run func(context.Context, ledger.ClaimRequest, string) error) func(int64) error {
				return func(n int64) error {
					key := prefix + strconv.FormatInt(n, 10)
					return run(ctx, req(b, key), key)
				}
			}
			replay := func(run func(context.Context, ledger.ClaimRequest, string) error) func(int64) error {
				return func(int64) error { return run(ctx, replayReq, replayKey) }
			}
			variants := []testdb.RoundVariant{
				{Name: "bare", Op: fresh("bare-", e.bare)},
				{Name: "claim-first", Op: fresh("first-", first)},
				{Name: "claim-at-commit", Op: fresh("commit-", atCommit)},
				{Name: "claim-first-replay", Op: replay(first)},
				{Name: "claim-at-commit-replay", Op: replay(atCommit)},
			}
			for range b.N {
				tput := testdb.Rounds(b, *benchRounds, benchWorkers, *benchRoundDur, variants)
				if b.Failed() {
					return
				}
				testdb.ReportRounds(b, variants, tput, 0,
					[2]string{"claim-at-commit", "claim-first"}, [2]string{"claim-at-commit-replay", "claim-first-replay"})
			}
		})
	}
}
