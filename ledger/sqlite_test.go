package ledger_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/opledger/opledger/dialects/sqlite"
	"github.com/opledger/opledger/internal/dialectkit"
	"github.com/opledger/opledger/internal/testkit/testdb"
	"github.com/opledger/opledger/ledger"
)

// sqliteDrivers are the SQLite drivers the SQLite tests run through:
// mattn/go-sqlite3 (cgo) and modernc.org/sqlite (pure Go). Both read the
// dialect's DSN and the URI parameters used here.
var sqliteDrivers = []string{"sqlite3", "sqlite"}

// forEachSQLiteDriver runs f in a parallel subtest per SQLite driver.
func forEachSQLiteDriver(t *testing.T, f func(t *testing.T, driver string)) {
	t.Helper()
	for _, drv := range sqliteDrivers {
		t.Run(drv, func(t *testing.T) {
			t.Parallel()
			f(t, drv)
		})
	}
}

func openSQLiteFile(t *testing.T, driver, dsn string, conns int) *sql.DB {
	t.Helper()
	db, err := sql.Open(driver, dsn)
	if err != nil {
		t.Fatal(err)
	}
	db.SetMaxOpenConns(conns)
	db.SetMaxIdleConns(conns)
	t.Cleanup(func() {
		if n := db.Stats().InUse; n != 0 {
			t.Errorf("%d connections in use at the end", n)
		}
		db.Close()
	})
	return db
}

// A deferred SQLite transaction that reads before writing fails at once
// with BUSY/BUSY_SNAPSHOT; with the kit's DSN (WAL, busy timeout,
// immediate transactions) 16 pooled connections that read before every
// claim see no BUSY error at all.
func TestSQLitePriorReadNoBusy(t *testing.T) {
	t.Parallel()
	forEachSQLiteDriver(t, func(t *testing.T, driver string) {
		path := filepath.Join(t.TempDir(), "prior.db")
		db := openSQLiteFile(t, driver, sqlite.DSN(path, 10*time.Second), 16)
		e := newEnv(t, "sqlite", sqlite.New(), db)
		ctx := context.Background()
		const workers, perWorker = 16, 60
		var busy, other atomic.Int64
		var wg sync.WaitGroup
		for w := 0; w < workers; w++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := 0; i < perWorker; i++ {
					key := fmt.Sprintf("prior-%d", i) // every worker races on the same keys
					err := func() error {
						tx, err := db.BeginTx(ctx, nil)
						if err != nil {
							return err
						}
						defer tx.Rollback()
						var n int
						if err := tx.QueryRow("SELECT COUNT(*) FROM " + e.Biz).Scan(&n); err != nil {
							return err
						}
						c, err := e.l.Claim(ctx, tx, ledger.ClaimRequest{Identity: testdb.ID(t, "c", method, key), Fingerprint: fp(key)})
						if err != nil {
							return err
						}
						if c.Acquired() {
							if err := e.WriteBiz(ctx, tx, key, w); err != nil {
								return err
							}
							if err := e.l.Complete(ctx, tx, c, ledger.Result{Response: []byte(key)}); err != nil {
								return err
							}
						}
						return tx.Commit()
					}()
					switch {
					case err == nil:
					case e.Dialect.Classify(err) != 0:
						busy.Add(1)
					default:
						other.Add(1)
						t.Error(err)
					}
				}
			}()
		}
		wg.Wait()
		if busy.Load() != 0 || other.Load() != 0 {
			t.Fatalf("%d busy errors, %d other errors; want none", busy.Load(), other.Load())
		}
		for i := 0; i < perWorker; i++ {
			if n := e.BizRows(t, fmt.Sprintf("prior-%d", i)); n != 1 {
				t.Fatalf("key %d: %d business rows", i, n)
			}
		}
	})
}

// The same reads with plain deferred transactions do hit BUSY: this is the
// fact the DSN exists for, and the dialect classifies it.
func TestSQLiteDeferredPriorReadIsBusy(t *testing.T) {
	t.Parallel()
	forEachSQLiteDriver(t, func(t *testing.T, driver string) {
		path := filepath.Join(t.TempDir(), "deferred.db")
		good := openSQLiteFile(t, driver, sqlite.DSN(path, time.Second), 2)
		e := newEnv(t, "sqlite", sqlite.New(), good)
		deferred := openSQLiteFile(t, driver, "file:"+path+"?_journal_mode=WAL&_busy_timeout=2000&_txlock=deferred", 2)
		ctx := context.Background()
		b, err := deferred.BeginTx(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		defer b.Rollback()
		var n int
		if err := b.QueryRow("SELECT COUNT(*) FROM " + e.Biz).Scan(&n); err != nil {
			t.Fatal(err)
		}
		if _, err := claimOnce(t, e, e.l, testdb.ID(t, "c", method, "k1"), fp("1"), "r"); err != nil {
			t.Fatal(err)
		}
		_, err = e.l.Claim(ctx, b, ledger.ClaimRequest{Identity: testdb.ID(t, "c", method, "k2"), Fingerprint: fp("2")})
		// SQLITE_BUSY_SNAPSHOT (517), which SQLite returns without calling
		// the busy handler: the claim did not wait out the busy timeout
		// (that would be SQLITE_BUSY, 5).
		if code := dialectkit.StatusCodeOf(sqlite.New(), err); !errors.Is(err, ledger.ErrRetryable) || code != "517" {
			t.Fatalf("claim after a stale read in a deferred transaction: %v (code %q), want a retryable BUSY_SNAPSHOT (517)", err, code)
		}
	})
}

// A holder keeps its write transaction open: a claimant whose claim is the
// first statement of a deferred transaction waits the busy timeout, then
// gets ErrInProgress.
func TestSQLiteInProgress(t *testing.T) {
	t.Parallel()
	forEachSQLiteDriver(t, func(t *testing.T, driver string) {
		path := filepath.Join(t.TempDir(), "inprogress.db")
		good := openSQLiteFile(t, driver, sqlite.DSN(path, time.Second), 2)
		e := newEnv(t, "sqlite", sqlite.New(), good)
		short := openSQLiteFile(t, driver, "file:"+path+"?_journal_mode=WAL&_busy_timeout=500&_txlock=deferred", 1)
		ctx := context.Background()
		id := testdb.ID(t, "c", method, "held")
		a, err := good.BeginTx(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		defer a.Rollback()
		if _, err := e.l.Claim(ctx, a, ledger.ClaimRequest{Identity: id, Fingerprint: fp("h")}); err != nil {
			t.Fatal(err)
		}
		b, err := short.BeginTx(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		defer b.Rollback()
		// The busy timeout (500 ms) ends the wait with SQLITE_BUSY (5); the
		// context's 10 s is only a hang guard.
		cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		_, err = e.l.Claim(cctx, b, ledger.ClaimRequest{Identity: id, Fingerprint: fp("h")})
		if code := dialectkit.StatusCodeOf(sqlite.New(), err); !errors.Is(err, ledger.ErrInProgress) || code != "5" || cctx.Err() != nil {
			t.Fatalf("claim: %v (code %q, context %v), want ErrInProgress from SQLITE_BUSY (5) within the hang guard", err, code, cctx.Err())
		}
	})
}
