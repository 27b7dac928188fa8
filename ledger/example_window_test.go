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

	"github.com/opledger/opledger/dialects/sqlite"
	"github.com/opledger/opledger/ledger"
	"github.com/opledger/opledger/migrations"
)

// The window: a ledger with a retention of 24 hours and a clock skew of a
// minute honours a key for 23h59m from its birth. A key born before that
// is refused with ErrKeyExpired, by Claim and by Lookup alike: never run
// again, never "not found". A key that carries no birth of its own gets
// one from the first-sent time its client sends beside it.
func ExampleWithClockSkew() {
	dir, err := os.MkdirTemp("", "ledger-window")
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
	m, err := migrations.New(db, sqlite.New())
	if err != nil {
		log.Fatal(err)
	}
	if _, err := m.Up(ctx); err != nil {
		log.Fatal(err)
	}

	now := time.Date(2026, 12, 6, 12, 0, 0, 0, time.UTC)
	opts := []ledger.Option{
		ledger.WithRetention(24 * time.Hour), // how long a key is remembered from its birth
		ledger.WithClockSkew(time.Minute),    // how far the clients' clocks may be off: the window is 23h59m
	}
	l, err := ledger.New(sqlite.New(), append(opts, ledger.WithClock(func() time.Time { return now }))...)
	if err != nil {
		log.Fatal(err)
	}

	claim := func(name string, id ledger.Identity) {
		tx, err := db.BeginTx(ctx, nil)
		if err != nil {
			log.Fatal(err)
		}
		defer tx.Rollback()
		c, err := l.Claim(ctx, tx, ledger.ClaimRequest{Identity: id, Fingerprint: ledger.FingerprintOf([]byte("100 EUR"))})
		switch {
		case errors.Is(err, ledger.ErrKeyExpired):
			fmt.Printf("%s: refused as expired: do not run it again with this key\n", name)
		case err != nil:
			log.Fatal(err)
		default:
			fmt.Printf("%s: acquired %v\n", name, c.Acquired())
		}
	}
	const method = "/pay.v1.Payments/Transfer"

	// UUIDv7 keys (keyed.NewKey makes them) carry their birth.
	born11, err := ledger.NewIdentity("svc-a", method, "01a24b02-bb80-7000-8000-000000000001") // born 2026-12-06 11:00 UTC
	if err != nil {
		log.Fatal(err)
	}
	claim("a key born an hour ago", born11)
	bornDec4, err := ledger.NewIdentity("svc-a", method, "01a240ec-f200-7000-8000-000000000001") // born 2026-12-04 12:00 UTC
	if err != nil {
		log.Fatal(err)
	}
	claim("a key born two days ago", bornDec4)
	_, err = l.Lookup(ctx, db, bornDec4)
	fmt.Println("its lookup is ErrKeyExpired:", errors.Is(err, ledger.ErrKeyExpired), "ErrNotFound:", errors.Is(err, ledger.ErrNotFound))

	// A random key has no readable birth; the Idempotency-Key-First-Sent
	// header gives it one, which becomes part of its identity.
	random, err := ledger.NewIdentity("svc-b", method, "order-7f3c-retry-safe")
	if err != nil {
		log.Fatal(err)
	}
	_, known := random.Birth()
	fmt.Println("a random key has a birth:", known)
	late, err := random.WithFirstSent(now.Add(-30 * time.Hour))
	if err != nil {
		log.Fatal(err)
	}
	claim("a random key first sent 30 hours ago", late)
	// Output:
	// a key born an hour ago: acquired true
	// a key born two days ago: refused as expired: do not run it again with this key
	// its lookup is ErrKeyExpired: true ErrNotFound: false
	// a random key has a birth: false
	// a random key first sent 30 hours ago: refused as expired: do not run it again with this key
}
