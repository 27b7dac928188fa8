package pgdialect_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io/fs"
	"testing"
	"time"

	"github.com/opledger/opledger/internal/pgdialect"
	"github.com/opledger/opledger/internal/testkit/testdb"
)

// kitLockID is the advisory lock the kit's PostgreSQL migrations take
// ("opledger" in ASCII): every version of the kit must use the same one.
const kitLockID int64 = 0x6f706c6564676572

// heldAdvisory counts the advisory locks with the kit's id that backend
// pid holds.
func heldAdvisory(t *testing.T, db *sql.DB, pid int64) int {
	t.Helper()
	var n int
	err := db.QueryRow(`SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND granted AND pid = $1
		AND objsubid = 1 AND ((classid::bigint << 32) | objid::bigint) = $2`, pid, kitLockID).Scan(&n)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

func TestMigrationsFiles(t *testing.T) {
	m := pgdialect.New().Migrations()
	if m.Goose != "postgres" || m.FS == nil || m.Lock == nil {
		t.Fatalf("migrations %+v", m)
	}
	names, err := fs.Glob(m.FS, "*.sql")
	if err != nil || len(names) != 5 || names[0] != "00001_create_operations.sql" || names[1] != "00002_create_outbox.sql" || names[2] != "00003_outbox_dead.sql" || names[3] != "00004_operations_born_at.sql" || names[4] != "00005_operations_partitioned.sql" {
		t.Fatalf("files %v %v", names, err)
	}
	// One advisory lock (the kit's id) for every table; each Migrator gets
	// its own value, which remembers the backend holding the lock.
	if m.Lock("a") == nil || fmt.Sprintf("%T", m.Lock("a")) != fmt.Sprintf("%T", m.Lock("b")) {
		t.Fatal("one advisory lock for every table")
	}
}

// TestAdvisoryLock: the migrations' session lock is a session advisory lock
// with the kit's id, held by the session that took it and released by
// SessionUnlock; releasing it unheld fails; a session waiting for it
// waits on the lock itself, and ends its wait with its context.
func TestAdvisoryLock(t *testing.T) {
	t.Parallel()
	lock := pgdialect.New().Migrations().Lock("ops")
	testdb.ForEachTarget(t, 3, func(t *testing.T, tg testdb.Target) {
		db := tg.Open(t, 3)
		ctx := context.Background()
		conn := func() (*sql.Conn, int64) {
			t.Helper()
			c, err := db.Conn(ctx)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { c.Close() })
			var pid int64
			if err := c.QueryRowContext(ctx, "SELECT pg_backend_pid()").Scan(&pid); err != nil {
				t.Fatal(err)
			}
			return c, pid
		}
		a, apid := conn()
		if err := lock.SessionUnlock(ctx, a); err == nil {
			t.Fatal("SessionUnlock of a lock the session does not hold succeeded")
		}
		if err := lock.SessionLock(ctx, a); err != nil {
			t.Fatal(err)
		}
		if n := heldAdvisory(t, db, apid); n != 1 {
			t.Fatalf("session %d holds %d advisory locks with the kit's id, want 1", apid, n)
		}

		// Another session waits while a holds it (the database shows it
		// waiting on the lock), and gives up with its context; it never got
		// the lock.
		b, bpid := conn()
		// It waits until the database shows it waiting for the lock, and
		// ends with its context once that is cancelled; the 30 s is only a
		// hang guard.
		bctx, cancel := context.WithCancel(ctx)
		defer cancel()
		guard := time.Now().Add(30 * time.Second)
		errc := make(chan error, 1)
		go func() { errc <- lock.SessionLock(bctx, b) }()
		for seen := false; !seen; {
			var n int
			if err := db.QueryRow("SELECT count(*) FROM pg_stat_activity WHERE pid = $1 AND query = 'SELECT pg_advisory_lock($1)' AND wait_event_type = 'Lock'", bpid).Scan(&n); err != nil {
				t.Fatal(err)
			}
			seen = n == 1
			if !seen && time.Now().After(guard) {
				t.Fatal("the second session is not waiting for the advisory lock")
			}
			time.Sleep(5 * time.Millisecond)
		}
		cancel()
		if err := <-errc; !errors.Is(err, context.Canceled) {
			t.Fatalf("SessionLock while another session holds the lock: %v, want the context's cancellation", err)
		}
		if n := heldAdvisory(t, db, bpid); n != 0 {
			t.Fatalf("the session that gave up holds %d kit locks", n)
		}
		if err := lock.SessionUnlock(ctx, a); err != nil {
			t.Fatal(err)
		}
		if n := heldAdvisory(t, db, apid); n != 0 {
			t.Fatalf("session %d still holds the kit's lock after SessionUnlock", apid)
		}
	}, "postgres")
}
