package ledger_test

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
)

// benchWorkers is the number of concurrent workers (and pooled
// connections) in the transaction benchmarks, as in the pgbench figures.
const benchWorkers = 16

var (
	benchRounds   = flag.Int("bench.rounds", 5, "rounds of BenchmarkRounds")
	benchRoundDur = flag.Duration("bench.round", 2*time.Second, "how long each variant runs per round in BenchmarkRounds")
)

var benchResponse = []byte(`{"status":"ok","amount":4711,"account":"acct-42"}`)

// BenchmarkRounds measures the ledger in a transaction on every database
// by the project's one benchmark method: each variant alone on 16
// workers (a pool of 16) for -bench.round, in -bench.rounds rounds that
// alternate the variants, ratios taken within a round and their median
// reported (testdb.Rounds; pgxledger's BenchmarkPaths measures every path
// of both APIs on PostgreSQL the same way). Each variant writes its own
// tables.
//
//	bare    BEGIN, one business INSERT, COMMIT
//	byhand  the kit's claim and completion around it, written by hand (the dialect's own SQL)
//	kit     the same through Claim and Complete
//	record  the business INSERT, then Record of the completed entry (claim at commit)
//	replay  Claim of one of 1,000 completed keys
//	kit-cte on PostgreSQL, the kit with ledger.WithOneStatementClaim
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
			fresh := func(opts ...ledger.Option) *benchEnv {
				e := newEnv(b, tg.Name, tg.Dialect, db)
				if len(opts) > 0 {
					l, err := ledger.New(tg.Dialect, append([]ledger.Option{ledger.WithTable(e.Table)}, opts...)...)
					if err != nil {
						b.Fatal(err)
					}
					e.l = l
				}
				return &benchEnv{e}
			}
			bare, kit, byhand, record, replay := fresh(), fresh(), fresh(), fresh(), fresh()
			const existing = 1000
			replay.completeKeys(b, ctx, existing)
			variants := []testdb.RoundVariant{
				{Name: "bare", Op: func(n int64) error {
					return bare.tx(ctx, func(tx *sql.Tx) error { return bare.WriteBiz(ctx, tx, "acct", int(n)) })
				}},
				{Name: "kit", Op: kit.kitOp(ctx)},
				{Name: "byhand", Op: byhand.byhandOp(ctx)},
				{Name: "record", Op: record.recordOp(ctx)},
				{Name: "replay", Op: replay.replayOp(ctx, existing)},
			}
			if tg.Family() == "postgres" {
				variants = append(variants, testdb.RoundVariant{Name: "kit-cte", Op: fresh(ledger.WithOneStatementClaim()).kitOp(ctx)})
			}
			for range b.N {
				tput := testdb.Rounds(b, *benchRounds, benchWorkers, *benchRoundDur, variants)
				if b.Failed() {
					return
				}
				pairs := [][2]string{{"kit", "byhand"}, {"record", "kit"}}
				if tg.Family() == "postgres" {
					pairs = append(pairs, [2]string{"kit-cte", "kit"})
				}
				testdb.ReportRounds(b, variants, tput, 0, pairs...)
			}
		})
	}
}

type benchEnv struct{ *env }

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
	return testdb.InTx(ctx, e.DB, f)
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

// byhandOp is the kit's happy path written by hand, with the dialect's
// own claim insert and completing update, for the n-th operation.
func (e *benchEnv) byhandOp(ctx context.Context) func(n int64) error {
	q := e.Dialect.Queries(e.Table)
	return func(n int64) error {
		id, err := ledger.NewIdentity("svc-a", method, "hand-"+strconv.FormatInt(n, 10))
		if err != nil {
			return err
		}
		key := id.ID()
		f := fp("x")
		return e.tx(ctx, func(tx *sql.Tx) error {
			now := time.Now()
			if _, err := tx.ExecContext(ctx, q.Insert, key[:], "svc-a", method, f[:], now.UnixMicro(), now.Add(24*time.Hour).UnixMicro()); err != nil {
				return err
			}
			if err := e.WriteBiz(ctx, tx, "acct", int(n)); err != nil {
				return err
			}
			_, err := tx.ExecContext(ctx, q.Complete, 0, benchResponse, "pay.v1.TransferResponse", now.UnixMicro(), key[:])
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
