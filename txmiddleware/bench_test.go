package txmiddleware_test

import (
	"context"
	"database/sql"
	"flag"
	"fmt"
	"strconv"
	"testing"
	"time"

	"github.com/opledger/opledger/internal/testkit/testdb"
	"github.com/opledger/opledger/ledger"
	"github.com/opledger/opledger/txmiddleware"
)

const benchWorkers = 16

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

var (
	benchRounds   = flag.Int("bench.rounds", 5, "rounds of BenchmarkOrderRounds")
	benchRoundDur = flag.Duration("bench.round", 2*time.Second, "how long each variant runs per round in BenchmarkOrderRounds")
)

// BenchmarkOrderRounds measures the two orders of a keyed call through
// the Runner on every database, by the project's one benchmark method:
// each variant alone on 16 workers (a pool of 16) for -bench.round, in
// -bench.rounds rounds that alternate the variants, ratios taken within a
// round (testdb.Rounds; pgxledger's BenchmarkPaths measures both APIs on
// PostgreSQL the same way). Variants: "bare" (the business INSERT alone),
// "claim-first" and "claim-at-commit" (the runner, new keys), and their
// replays of a completed key. It reports each variant's median throughput
// and, within each round, its throughput over the bare transaction's
// (x-<name>, medians), and claim at commit's over claim first's.
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
