package migrations_test

import (
	"context"
	"database/sql"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/opledger/opledger/internal/migrationfs"
	"github.com/opledger/opledger/internal/testkit/testdb"
	"github.com/opledger/opledger/migrations"
)

// kitLockID is the advisory lock the kit's PostgreSQL migrations take
// ("opledger" in ASCII), the same in every version of the kit.
const kitLockID int64 = 0x6f706c6564676572

// pool opens a pool of one connection and returns it with its backend pid:
// the session a Migrator on it migrates on.
func pool(t *testing.T, tg testdb.Target) (*sql.DB, int64) {
	t.Helper()
	db := tg.Open(t, 1)
	var pid int64
	if err := db.QueryRow("SELECT pg_backend_pid()").Scan(&pid); err != nil {
		t.Fatal(err)
	}
	return db, pid
}

// kitLocksHeld counts the advisory locks with the kit's id that the
// backends pids hold.
func kitLocksHeld(t *testing.T, db *sql.DB, pids ...int64) int {
	t.Helper()
	total := 0
	for _, pid := range pids {
		var n int
		err := db.QueryRow(`SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND objsubid = 1
			AND ((classid::bigint << 32) | objid::bigint) = $1 AND pid = $2`, kitLockID, pid).Scan(&n)
		if err != nil {
			t.Fatal(err)
		}
		total += n
	}
	return total
}

// waitTrying waits until PostgreSQL shows backend pid waiting for the
// advisory lock (pg_advisory_lock, wait event type Lock), or fails when
// done receives first.
func waitTrying(t *testing.T, db *sql.DB, pid int64, done <-chan struct{}) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		var n int
		if err := db.QueryRow("SELECT count(*) FROM pg_stat_activity WHERE pid = $1 AND query = 'SELECT pg_advisory_lock($1)' AND wait_event_type = 'Lock'", pid).Scan(&n); err != nil {
			t.Fatal(err)
		}
		if n == 1 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("backend %d is not waiting for the migration lock after 20s", pid)
		}
		select {
		case <-done:
			t.Fatal("an Up that should wait for the migration lock returned")
		case <-time.After(5 * time.Millisecond):
		}
	}
}

// TestPostgresAdvisoryLock: two Migrators of one table, each on its own
// session, Up at once while another session holds the kit's advisory lock:
// both wait (PostgreSQL shows each trying the lock), both succeed once it
// is released, exactly one applies the migration, and neither session
// holds the lock afterwards. An Up that cannot get the lock ends with its
// context and creates nothing. The drivers run one after the other: the
// lock is one for the whole server.
func TestPostgresAdvisoryLock(t *testing.T) {
	testdb.Parallel(t, "postgres", 4)
	for _, tg := range testdb.Targets() {
		if tg.Family() != "postgres" {
			continue
		}
		t.Run(tg.Name, func(t *testing.T) {
			ctx := context.Background()
			d := tg.Dialect
			db := tg.Open(t, 2)
			table := uniqueTable("opl_adv_")
			cleanup, err := migrations.New(db, d, migrations.WithTable(table))
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() {
				cleanup.Down(context.Background())
				db.Exec("DROP TABLE IF EXISTS " + d.QuoteIdent(migrationfs.VersionTable(table)))
			})

			holder, err := db.Conn(ctx)
			if err != nil {
				t.Fatal(err)
			}
			defer holder.Close()
			var hpid int64
			if err := holder.QueryRowContext(ctx, "SELECT pg_backend_pid()").Scan(&hpid); err != nil {
				t.Fatal(err)
			}
			if _, err := holder.ExecContext(ctx, "SELECT pg_advisory_lock($1)", kitLockID); err != nil {
				t.Fatal(err)
			}
			unlocked := false
			unlock := func() {
				if unlocked {
					return
				}
				unlocked = true
				var ok bool
				if err := holder.QueryRowContext(ctx, "SELECT pg_advisory_unlock($1)", kitLockID).Scan(&ok); err != nil || !ok {
					t.Fatalf("unlock: %v %v", ok, err)
				}
			}
			defer unlock()

			// An Up that cannot get the lock ends with its context.
			cdb, _ := pool(t, tg)
			cm, err := migrations.New(cdb, d, migrations.WithTable(table))
			if err != nil {
				t.Fatal(err)
			}
			cctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
			defer cancel()
			start := time.Now()
			if _, err := cm.Up(cctx); !errors.Is(err, context.DeadlineExceeded) || time.Since(start) > 5*time.Second {
				t.Fatalf("Up under a held lock: %v after %v, want the context's deadline", err, time.Since(start))
			}
			var exists bool
			if err := db.QueryRow("SELECT to_regclass($1) IS NOT NULL", table).Scan(&exists); err != nil || exists {
				t.Fatalf("table created without the lock: %v %v", exists, err)
			}

			type upResult struct {
				n   int
				err error
			}
			results := make(chan upResult, 2)
			done := make(chan struct{})
			var once sync.Once
			var pids []int64
			for range 2 {
				p, pid := pool(t, tg)
				pids = append(pids, pid)
				m, err := migrations.New(p, d, migrations.WithTable(table))
				if err != nil {
					t.Fatal(err)
				}
				go func() {
					rs, err := m.Up(ctx)
					once.Do(func() { close(done) })
					results <- upResult{len(rs), err}
				}()
			}
			for _, pid := range pids {
				waitTrying(t, db, pid, done)
			}
			unlock()
			total := 0
			for range 2 {
				r := <-results
				if r.err != nil {
					t.Fatalf("Up after the lock was released: %v", r.err)
				}
				total += r.n
			}
			if total != 5 { // 00001 to 00005, each applied once
				t.Fatalf("two Ups applied %d migrations in all, want 5", total)
			}
			if n := kitLocksHeld(t, db, append(pids, hpid)...); n != 0 {
				t.Fatalf("%d advisory locks with the kit's id still held by the migrating sessions", n)
			}
		})
	}
}
