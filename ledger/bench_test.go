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
				run(b, func(n int64) error {
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
				})
			})
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
					run(b, func(n int64) error {
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
					})
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
				run(b, func(n int64) error {
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
				})
			})
		})
	}
}

var benchResponse = []byte(`{"status":"ok","amount":4711,"account":"acct-42"}`)

type benchEnv struct {
	*env
	family string // the target's database family: the hand-written SQL is the database's own
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
