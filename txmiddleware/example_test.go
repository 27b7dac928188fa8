package txmiddleware_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log"
	"os"
	"path/filepath"
	"time"

	_ "github.com/mattn/go-sqlite3"

	"github.com/opledger/opledger/dialects/sqlite"
	"github.com/opledger/opledger/ledger"
	"github.com/opledger/opledger/migrations"
	"github.com/opledger/opledger/txmiddleware"
)

// rejected is the application's final error: a definite "no" to the
// request, which a retry must get again rather than run the work again.
type rejected struct{ reason string }

func (r rejected) Error() string { return r.reason }

// rejectedCodec tells the runner that a rejected error is final and how
// to store it: code 3 with the reason as the response. Decode rebuilds
// the error when a retry replays it. Any other error is not final: the
// transaction rolls back and nothing is recorded.
type rejectedCodec struct{}

func (rejectedCodec) Encode(err error) (ledger.Result, bool) {
	var r rejected
	if !errors.As(err, &r) {
		return ledger.Result{}, false
	}
	return ledger.Result{Code: 3, Response: []byte(r.reason), TypeName: "example.Rejected"}, true
}

func (rejectedCodec) Decode(res ledger.Result) error {
	return rejected{reason: string(res.Response)}
}

// A transfer keyed by the client's idempotency key: the first call runs
// the work, a retry with the same key replays its result, and a final
// error (a rejected error, as rejectedCodec decides) is recorded and
// replayed like a result.
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
	runner, err := txmiddleware.New(db, store,
		txmiddleware.WithErrorCodec(rejectedCodec{}),
		txmiddleware.WithLockWait(2*time.Second))
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
				return ledger.Result{}, rejected{"amount must be positive"}
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
		var rej rejected
		switch {
		case errors.As(err, &rej):
			fmt.Printf("%s: %s (replayed %v)\n", key, rej.reason, out.Replayed)
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
