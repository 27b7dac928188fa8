package mysqldialect_test

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/opledger/opledger/internal/mysqldialect"
	"github.com/opledger/opledger/internal/testkit/testdb"
)

// TestMigrationLock: the session lock of the MySQL migrations is the named
// lock "opledger:<table>", held by the session that took it; a second
// session waits for it (the server shows it in GET_LOCK) and gets it once
// the first releases it; releasing a lock the session does not hold fails;
// and a wait ends with its context. On TiDB, whose IS_USED_LOCK answers 1
// for any holder and whose process list shows no "User lock" wait, the
// lock is checked as held, not by whom, and the waits are not checked.
func TestMigrationLock(t *testing.T) {
	d, db, table := migrationLockTest(t, "opl_mlock_")
	ctx := context.Background()
	name := "opledger:" + table
	lock := d.Migrations().Lock(table)
	owner := func() sql.NullInt64 {
		t.Helper()
		var id sql.NullInt64
		if err := db.QueryRowContext(ctx, "SELECT IS_USED_LOCK(?)", name).Scan(&id); err != nil {
			t.Fatal(err)
		}
		return id
	}
	conn := func() (*sql.Conn, int64) {
		t.Helper()
		c, err := db.Conn(ctx)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		return c, testdb.ConnSessionID(t, d, c)
	}

	a, aid := conn()
	if err := lock.SessionUnlock(ctx, a); err == nil {
		t.Fatal("SessionUnlock of a lock nobody holds succeeded")
	}
	if err := lock.SessionLock(ctx, a); err != nil {
		t.Fatal(err)
	}
	if id := owner(); !id.Valid || (id.Int64 != aid && !d.TiDB()) || id.Int64 == 0 {
		t.Fatalf("IS_USED_LOCK(%q) = %v, want session %d", name, id, aid)
	}
	if d.TiDB() {
		if err := lock.SessionUnlock(ctx, a); err != nil {
			t.Fatal(err)
		}
		if id := owner(); id.Valid {
			t.Fatalf("lock still held (%d) after the unlock", id.Int64)
		}
	}
	testdb.SkipOnTiDB(t, d, "the waits for the lock are checked in the process list's \"User lock\" state and by IS_USED_LOCK's connection id")

	// A second session waits for it, as the server shows.
	bc, bid := conn()
	done := make(chan struct{})
	var berr error
	go func() {
		defer close(done)
		berr = lock.SessionLock(ctx, bc)
	}()
	testdb.WaitUserLock(t, db, bid, done)
	if err := lock.SessionUnlock(ctx, a); err != nil {
		t.Fatal(err)
	}
	<-done
	if berr != nil {
		t.Fatalf("second session after the first released: %v", berr)
	}
	if id := owner(); !id.Valid || id.Int64 != bid {
		t.Fatalf("IS_USED_LOCK(%q) = %v, want session %d", name, id, bid)
	}
	if err := lock.SessionUnlock(ctx, a); err == nil {
		t.Fatal("SessionUnlock by a session that no longer holds the lock succeeded")
	}

	// A wait ends with its context, with the context's error.
	c, cid := conn()
	cctx, cancel := context.WithTimeout(ctx, 500*time.Millisecond)
	defer cancel()
	start := time.Now()
	err := lock.SessionLock(cctx, c)
	if took := time.Since(start); !errors.Is(err, context.DeadlineExceeded) || took > 5*time.Second {
		t.Fatalf("SessionLock under a held lock: %v after %v, want the context's deadline", err, took)
	}
	if id := owner(); !id.Valid || id.Int64 != bid {
		t.Fatalf("after the timed-out wait of session %d, IS_USED_LOCK = %v, want %d", cid, id, bid)
	}
	// The driver closed the abandoned session; its last GET_LOCK (a wait of
	// at most one second) ends on the server, and the server drops it.
	gone := time.Now()
	for n := 1; n > 0; {
		if err := db.QueryRowContext(ctx, "SELECT COUNT(*) FROM information_schema.PROCESSLIST WHERE ID = ?", cid).Scan(&n); err != nil {
			t.Fatal(err)
		}
		if time.Since(gone) > 20*time.Second {
			t.Fatalf("the abandoned session %d is still on the server after 20s", cid)
		}
		time.Sleep(5 * time.Millisecond)
	}
	if took := time.Since(gone); took > 5*time.Second {
		t.Fatalf("the abandoned session's wait went on for %v, want about a second at most", took)
	}
	if err := lock.SessionUnlock(ctx, bc); err != nil {
		t.Fatal(err)
	}
	if id := owner(); id.Valid {
		t.Fatalf("lock still held by %d after the unlock", id.Int64)
	}
}

// TestMigrationLockAcrossDDL: sessions that take the migration lock in
// turn, each running DDL while the others wait for it (as concurrent
// migrations do), each release it exactly once: SessionUnlock succeeds,
// a second SessionUnlock finds it no longer held (it was not taken
// twice), and the lock is free at the end. On TiDB, which plans a
// prepared statement again after another session's DDL and folds
// GET_LOCK and RELEASE_LOCK while planning, the lock's statements as
// prepared statements ran twice: RELEASE_LOCK released the lock and
// answered 0.
func TestMigrationLockAcrossDDL(t *testing.T) {
	d, db, table := migrationLockTest(t, "opl_mlockddl_")
	ctx := context.Background()
	scratch := d.QuoteIdent(table)
	t.Cleanup(func() { db.Exec("DROP TABLE IF EXISTS " + scratch) })
	lock := d.Migrations().Lock(table)
	const sessions, rounds = 4, 3
	errs := make(chan error, sessions)
	for range sessions {
		go func() {
			errs <- func() error {
				c, err := db.Conn(ctx)
				if err != nil {
					return err
				}
				defer c.Close()
				for round := range rounds {
					if err := lock.SessionLock(ctx, c); err != nil {
						return err
					}
					for _, ddl := range []string{"DROP TABLE IF EXISTS " + scratch, "CREATE TABLE " + scratch + " (a INT PRIMARY KEY)"} {
						if _, err := c.ExecContext(ctx, ddl); err != nil {
							return err
						}
					}
					if err := lock.SessionUnlock(ctx, c); err != nil {
						return fmt.Errorf("round %d: %w", round, err)
					}
					if err := lock.SessionUnlock(ctx, c); err == nil {
						return fmt.Errorf("round %d: the lock was still held after its release (taken twice)", round)
					}
				}
				return nil
			}()
		}()
	}
	var all []error
	for range sessions {
		all = append(all, <-errs)
	}
	if err := errors.Join(all...); err != nil {
		t.Fatal(err)
	}
	var id sql.NullInt64
	if err := db.QueryRowContext(ctx, "SELECT IS_USED_LOCK(?)", "opledger:"+table).Scan(&id); err != nil || id.Valid {
		t.Fatalf("after every session released it, IS_USED_LOCK = %v, %v; want NULL", id, err)
	}
}

// migrationLockTest starts a migration lock test on the MySQL target: its
// dialect, a pool of four connections and a new table name that begins
// with prefix.
func migrationLockTest(t *testing.T, prefix string) (mysqldialect.Dialect, *sql.DB, string) {
	t.Helper()
	testdb.Parallel(t, "mysql", 4)
	var b [4]byte
	_, _ = rand.Read(b[:])
	return testdb.MySQLDialect(t), testdb.OpenMySQL(nil)(t, 4), prefix + hex.EncodeToString(b[:])
}
