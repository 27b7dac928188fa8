package txmiddleware_test

import (
	"context"
	"database/sql"
	"fmt"
	"log"
	"os"
	"path/filepath"
	"time"

	_ "github.com/mattn/go-sqlite3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/opledger/opledger/dialects/sqlite"
	"github.com/opledger/opledger/ledger"
	"github.com/opledger/opledger/migrations"
	"github.com/opledger/opledger/txmiddleware"
)

// A transfer keyed by the client's idempotency key: the first call runs
// the work, a retry with the same key replays its result, and a final
// error is recorded and replayed like a result.
func Example() {
	dir, err := os.MkdirTemp("", "txmiddleware-example")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)
	db, err := sql.Open("sqlite3", sqlite.DSN(filepath.Join(dir, "app.db"), 5*time.Second))
	if err != nil {
		log.Fatal(err)
	}
	defer db.Close()
	ctx := context.Background()
	d := sqlite.New()
	m, err := migrations.New(db, d)
	if err != nil {
		log.Fatal(err)
	}
	if _, err := m.Up(ctx); err != nil {
		log.Fatal(err)
	}
	if _, err := db.Exec(`CREATE TABLE transfers (id INTEGER PRIMARY KEY, amount INTEGER NOT NULL)`); err != nil {
		log.Fatal(err)
	}
	store, err := ledger.New(d)
	if err != nil {
		log.Fatal(err)
	}
	runner, err := txmiddleware.New(db, store, d, txmiddleware.WithLockWait(2*time.Second))
	if err != nil {
		log.Fatal(err)
	}

	transfer := func(key string, amount int) {
		id, err := ledger.NewIdentity("tenant-a", "/pay.v1.Payments/Transfer", key)
		if err != nil {
			log.Fatal(err)
		}
		req := ledger.ClaimRequest{Identity: id, Fingerprint: ledger.FingerprintOf(fmt.Append(nil, amount))}
		out, err := runner.Run(ctx, req, func(ctx context.Context, tx *sql.Tx) (ledger.Result, error) {
			if amount <= 0 {
				return ledger.Result{}, status.Error(codes.InvalidArgument, "amount must be positive")
			}
			res, err := tx.ExecContext(ctx, `INSERT INTO transfers (amount) VALUES (?)`, amount)
			if err != nil {
				return ledger.Result{}, err
			}
			n, err := res.LastInsertId()
			if err != nil {
				return ledger.Result{}, err
			}
			return ledger.Result{Response: fmt.Appendf(nil, "transfer #%d", n), TypeName: "example.Receipt"}, nil
		})
		switch {
		case status.Code(err) == codes.InvalidArgument:
			fmt.Printf("%s: %v (replayed %v)\n", key, status.Convert(err).Message(), out.Replayed)
		case err != nil:
			log.Fatal(err)
		default:
			fmt.Printf("%s: %s (replayed %v)\n", key, out.Result.Response, out.Replayed)
		}
	}
	transfer("key-1", 25)
	transfer("key-1", 25) // the client retried
	transfer("key-2", -5)
	transfer("key-2", -5)
	transfer("key-3", 10)

	// Output:
	// key-1: transfer #1 (replayed false)
	// key-1: transfer #1 (replayed true)
	// key-2: amount must be positive (replayed false)
	// key-2: amount must be positive (replayed true)
	// key-3: transfer #2 (replayed false)
}
