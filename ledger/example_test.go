package ledger_test

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
)

// transfer runs one keyed transfer in the caller's own transaction: the
// claim and the business write commit (or roll back) together. A retry
// with the same key replays the stored response instead of writing again.
func transfer(ctx context.Context, db *sql.DB, l *ledger.Store, caller, key string, amount int) (string, error) {
	id, err := ledger.NewIdentity(caller, "/pay.v1.Payments/Transfer", key)
	if err != nil {
		return "", err // ErrInvalid: bad caller, method or key
	}
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return "", err
	}
	defer tx.Rollback()

	c, err := l.Claim(ctx, tx, ledger.ClaimRequest{Identity: id, Fingerprint: ledger.FingerprintOf(fmt.Append(nil, amount))})
	if err != nil {
		return "", err // ErrKeyReused, ErrInProgress, ErrRetryable (retry the whole transaction), …
	}
	if !c.Acquired() {
		return string(c.Result.Response), nil // a replay: the transfer already happened; do nothing
	}
	res, err := tx.ExecContext(ctx, "INSERT INTO transfers (amount) VALUES (?)", amount)
	if err != nil {
		return "", err
	}
	n, err := res.LastInsertId()
	if err != nil {
		return "", err
	}
	resp := fmt.Sprintf("transfer #%d of %d", n, amount)
	if err := l.Complete(ctx, tx, c, ledger.Result{Response: []byte(resp), TypeName: "example.Receipt"}); err != nil {
		return "", err
	}
	return resp, tx.Commit()
}

// A keyed mutation claimed inside the caller's own transaction, on SQLite:
// the first call writes, a retry with the same key replays, and the same
// key with another request is ErrKeyReused.
func Example() {
	dir, err := os.MkdirTemp("", "ledger-example")
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
	m, err := migrations.New(db, d) // the ledger's table, "opledger_operations"
	if err != nil {
		log.Fatal(err)
	}
	if _, err := m.Up(ctx); err != nil {
		log.Fatal(err)
	}
	if _, err := db.Exec("CREATE TABLE transfers (id INTEGER PRIMARY KEY, amount INTEGER NOT NULL)"); err != nil {
		log.Fatal(err)
	}
	l, err := ledger.New(d) // 24h retention
	if err != nil {
		log.Fatal(err)
	}

	fmt.Println(transfer(ctx, db, l, "tenant-a", "key-1", 25))
	fmt.Println(transfer(ctx, db, l, "tenant-a", "key-1", 25)) // the client retried
	_, err = transfer(ctx, db, l, "tenant-a", "key-1", 30)     // the same key for another request
	fmt.Println(errors.Is(err, ledger.ErrKeyReused))
	fmt.Println(transfer(ctx, db, l, "tenant-b", "key-1", 25)) // another caller's key-1
	// Output:
	// transfer #1 of 25 <nil>
	// transfer #1 of 25 <nil>
	// true
	// transfer #2 of 25 <nil>
}
