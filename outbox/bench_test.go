package outbox_test

import (
	"context"
	"database/sql"
	"strconv"
	"testing"

	"github.com/opledger/opledger/internal/testkit/testdb"
	"github.com/opledger/opledger/ledger"
	"github.com/opledger/opledger/outbox"
)

type nopPublisher struct{}

func (nopPublisher) Publish(context.Context, outbox.Envelope) error { return nil }

// BenchmarkRelay: b.N committed messages on 16 keys, then one relay drains
// them to a publisher that acknowledges at once: the relay's own cost per
// message (read, key check, delete, commit), batches of 100.
func BenchmarkRelay(b *testing.B) {
	for _, tg := range testdb.Targets() {
		if tg.Name == "postgres/pgx" || tg.Name == "sqlite/modernc" {
			continue
		}
		b.Run(tg.Name, func(b *testing.B) {
			e := newEnvB(b, testdb.NewEnv(b, tg.Name, tg.Dialect, tg.Open(b, 4)))
			ctx := context.Background()
			for i := range b.N {
				if _, err := e.runner.Run(ctx, claim(b, "bench-"+strconv.Itoa(i)), func(ctx context.Context, tx *sql.Tx) (ledger.Result, error) {
					_, err := e.ob.Enqueue(ctx, tx, msg("k"+strconv.Itoa(i%16)))
					return ledger.Result{}, err
				}); err != nil {
					b.Fatal(err)
				}
			}
			r, err := outbox.NewRelay(e.DB, e.ob, nopPublisher{})
			if err != nil {
				b.Fatal(err)
			}
			b.ResetTimer()
			if err := r.Drain(ctx); err != nil {
				b.Fatal(err)
			}
			b.StopTimer()
			if got := r.Stats().Published; got != int64(b.N) {
				b.Fatalf("published %d of %d", got, b.N)
			}
		})
	}
}
