package dialectkit_test

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"testing"
	"time"

	"github.com/opledger/opledger/dialects"
	"github.com/opledger/opledger/internal/dialectkit"
	"github.com/opledger/opledger/internal/pgdialect"
	"github.com/opledger/opledger/internal/sqlitedialect"
	"github.com/opledger/opledger/internal/testkit/testdb"
)

func TestClassString(t *testing.T) {
	for c := dialects.ClassOther; c <= dialects.ClassConnection; c++ {
		if c.String() == "" {
			t.Fatal(c)
		}
	}
	if dialects.Class(99).String() != "class(99)" || dialects.Class(-1).String() != "class(-1)" {
		t.Fatal("out of range")
	}
	if !dialects.ClassDeadlock.Retryable() || !dialects.ClassSerialization.Retryable() || dialects.ClassLockTimeout.Retryable() {
		t.Fatal("Retryable")
	}
}

func TestCheckTableName(t *testing.T) {
	for _, ok := range []string{"a", "_x", "opledger_operations", "T1"} {
		if err := dialectkit.CheckTableName(ok); err != nil {
			t.Errorf("%q: %v", ok, err)
		}
	}
	for _, bad := range []string{"", "1a", "a-b", "a.b", "a b", "x;DROP TABLE y", "é", `a"`, "a`b"} {
		if err := dialectkit.CheckTableName(bad); !errors.Is(err, dialectkit.ErrBadTableName) {
			t.Errorf("%q: %v", bad, err)
		}
	}
}

func TestClassifyConnection(t *testing.T) {
	for _, err := range []error{driver.ErrBadConn, io.ErrUnexpectedEOF, fmt.Errorf("x: %w", driver.ErrBadConn)} {
		if got := dialectkit.ClassifyConnection(err); got != dialects.ClassConnection {
			t.Errorf("%v: %v", err, got)
		}
	}
	for _, err := range []error{nil, errors.New("x"), context.Canceled, context.DeadlineExceeded, sql.ErrNoRows} {
		if got := dialectkit.ClassifyConnection(err); got != dialects.ClassOther {
			t.Errorf("%v: %v", err, got)
		}
	}
}

// TestPostgresClassifiesRealErrors provokes each error on a real server,
// through both drivers.
func TestPostgresClassifiesRealErrors(t *testing.T) {
	t.Parallel()
	d := pgdialect.New()
	forEachPostgres(t, func(t *testing.T, db *sql.DB) {
		ctx := context.Background()
		cases := []struct {
			name string
			sql  string
			want dialects.Class
		}{
			{"unique", "CREATE TEMP TABLE u (k int primary key); INSERT INTO u VALUES (1); INSERT INTO u VALUES (1)", dialects.ClassUniqueViolation},
			{"serialization", "DO $$ BEGIN RAISE EXCEPTION 'x' USING ERRCODE = '40001'; END $$", dialects.ClassSerialization},
			{"deadlock", "DO $$ BEGIN RAISE EXCEPTION 'x' USING ERRCODE = '40P01'; END $$", dialects.ClassDeadlock},
			{"lock timeout", "DO $$ BEGIN RAISE EXCEPTION 'x' USING ERRCODE = '55P03'; END $$", dialects.ClassLockTimeout},
			{"statement timeout", "SET statement_timeout = '10ms'; SELECT pg_sleep(1)", dialects.ClassLockTimeout},
			{"admin shutdown", "DO $$ BEGIN RAISE EXCEPTION 'x' USING ERRCODE = '57P01'; END $$", dialects.ClassConnection},
			{"syntax", "SELEC 1", dialects.ClassOther},
		}
		for _, c := range cases {
			conn, err := db.Conn(ctx)
			if err != nil {
				t.Fatal(err)
			}
			_, err = conn.ExecContext(ctx, c.sql)
			conn.Raw(func(any) error { return driver.ErrBadConn }) // discard the session
			conn.Close()
			if err == nil {
				t.Fatalf("%s: no error", c.name)
			}
			if got := d.Classify(fmt.Errorf("wrapped: %w", err)); got != c.want {
				t.Errorf("%s: %v classified %v, want %v", c.name, err, got, c.want)
			}
		}
		if d.Classify(nil) != dialects.ClassOther {
			t.Fatal("nil")
		}
	})
}

// TestSQLiteClassifiesRealErrors provokes the codes through both SQLite
// drivers: mattn/go-sqlite3 (its sqlite3.Error, read by reflection) and
// modernc.org/sqlite (an error with Code() int).
func TestSQLiteClassifiesRealErrors(t *testing.T) {
	t.Parallel()
	for _, driver := range []string{"sqlite3", "sqlite"} {
		t.Run(driver, func(t *testing.T) {
			t.Parallel()
			d := sqlitedialect.New()
			path := filepath.Join(t.TempDir(), "c.db")
			db, err := sql.Open(driver, sqlitedialect.DSN(path, 100*time.Millisecond))
			if err != nil {
				t.Fatal(err)
			}
			defer db.Close()
			ctx := context.Background()
			mustExec := func(q string) {
				if _, err := db.ExecContext(ctx, q); err != nil {
					t.Fatal(err)
				}
			}
			mustExec("CREATE TABLE pk (a INTEGER, b INTEGER, PRIMARY KEY (a, b)) WITHOUT ROWID")
			mustExec("CREATE TABLE uq (a INTEGER UNIQUE)")
			mustExec("INSERT INTO pk VALUES (1, 1)")
			mustExec("INSERT INTO uq VALUES (1)")
			_, errPK := db.ExecContext(ctx, "INSERT INTO pk VALUES (1, 1)")
			_, errUQ := db.ExecContext(ctx, "INSERT INTO uq VALUES (1)")
			_, errNN := db.ExecContext(ctx, "INSERT INTO pk VALUES (NULL, 1)")
			if got := d.Classify(errPK); got != dialects.ClassUniqueViolation {
				t.Errorf("composite primary key (1555): %v → %v", errPK, got)
			}
			if got := d.Classify(errUQ); got != dialects.ClassUniqueViolation {
				t.Errorf("unique (2067): %v → %v", errUQ, got)
			}
			if got := d.Classify(errNN); got != dialects.ClassOther {
				t.Errorf("not null: %v → %v", errNN, got)
			}

			// BUSY: a second immediate transaction waits the busy timeout, then fails.
			tx, err := db.BeginTx(ctx, nil)
			if err != nil {
				t.Fatal(err)
			}
			defer tx.Rollback()
			_, errBusy := db.BeginTx(ctx, nil)
			if got := d.Classify(errBusy); got != dialects.ClassLockTimeout {
				t.Errorf("busy: %v → %v", errBusy, got)
			}
			tx.Rollback()

			// BUSY_SNAPSHOT: a deferred transaction reads, another commits, it writes.
			deferred, err := sql.Open(driver, "file:"+path+"?_txlock=deferred&_busy_timeout=100")
			if err != nil {
				t.Fatal(err)
			}
			defer deferred.Close()
			dtx, err := deferred.BeginTx(ctx, nil)
			if err != nil {
				t.Fatal(err)
			}
			defer dtx.Rollback()
			var n int
			if err := dtx.QueryRow("SELECT COUNT(*) FROM uq").Scan(&n); err != nil {
				t.Fatal(err)
			}
			mustExec("INSERT INTO uq VALUES (2)")
			_, errSnap := dtx.Exec("INSERT INTO uq VALUES (3)")
			if got := d.Classify(errSnap); got != dialects.ClassSerialization {
				t.Errorf("busy snapshot: %v → %v", errSnap, got)
			}
			if d.Classify(errors.New("plain")) != dialects.ClassOther || d.Classify(nil) != dialects.ClassOther {
				t.Fatal("foreign errors")
			}
		})
	}
}

func TestSQLiteDSN(t *testing.T) {
	got := sqlitedialect.DSN("/tmp/a?b#c.db", 0)
	want := "file:/tmp/a%3fb%23c.db?_busy_timeout=5000&_journal_mode=WAL&_txlock=immediate"
	if got != want {
		t.Fatalf("got %s, want %s", got, want)
	}
	if got := sqlitedialect.DSN("x.db", 250*time.Millisecond); got != "file:x.db?_busy_timeout=250&_journal_mode=WAL&_txlock=immediate" {
		t.Fatal(got)
	}
}

// connClosed mimics pgx's unexported error for a connection that broke
// under a statement.
type connClosed struct{}

func (connClosed) Error() string { return "conn closed" }

func TestPostgresClassifiesBrokenConnections(t *testing.T) {
	d := pgdialect.New()
	for _, err := range []error{driver.ErrBadConn, fmt.Errorf("commit: %w", connClosed{}), io.ErrUnexpectedEOF} {
		if got := d.Classify(err); got != dialects.ClassConnection {
			t.Errorf("%v: %v, want connection failure", err, got)
		}
	}
}

// TestPostgresTerminatedBackendIsConnectionFailure kills a session's
// backend (dialectkit.Sessions.Kill) and classifies what each driver reports
// on its next statement, once PostgreSQL shows the backend gone, and on a
// statement that was waiting for a lock when its backend was killed.
func TestPostgresTerminatedBackendIsConnectionFailure(t *testing.T) {
	t.Parallel()
	d := pgdialect.New()
	forEachPostgres(t, func(t *testing.T, db *sql.DB) {
		ctx := context.Background()
		tx, err := db.BeginTx(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		pid := testdb.SessionID(t, d, tx)
		if err := d.Kill(ctx, db, pid); err != nil {
			t.Fatal(err)
		}
		waitBackendGone(t, db, pid)
		_, err = tx.ExecContext(ctx, "SELECT 1")
		if err == nil {
			err = tx.Commit()
		} else {
			tx.Rollback()
		}
		if got := d.Classify(err); got != dialects.ClassConnection {
			t.Fatalf("next statement: %T %v: %v, want connection failure", err, err, got)
		}

		// A statement in flight: it waits for an advisory lock that holder
		// holds when its backend is killed.
		key := time.Now().UnixNano()
		holder, err := db.BeginTx(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		defer holder.Rollback()
		if _, err := holder.ExecContext(ctx, "SELECT pg_advisory_xact_lock($1)", key); err != nil {
			t.Fatal(err)
		}
		victim, err := db.BeginTx(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		vpid := testdb.SessionID(t, d, victim)
		done := make(chan struct{})
		var inFlight error
		go func() {
			defer close(done)
			_, inFlight = victim.ExecContext(ctx, "SELECT pg_advisory_xact_lock($1)", key)
		}()
		testdb.WaitBlocked(t, db, d, testdb.SessionID(t, d, holder), 1, done)
		if err := d.Kill(ctx, db, vpid); err != nil {
			t.Fatal(err)
		}
		<-done
		victim.Rollback()
		if got := d.Classify(inFlight); got != dialects.ClassConnection {
			t.Fatalf("statement in flight: %T %v: %v, want connection failure", inFlight, inFlight, got)
		}
	})
}

// waitBackendGone waits until pg_stat_activity no longer shows backend
// pid: it has sent its last message and is exiting.
func waitBackendGone(t *testing.T, db *sql.DB, pid int64) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		var n int
		if err := db.QueryRow("SELECT count(*) FROM pg_stat_activity WHERE pid = $1", pid).Scan(&n); err != nil {
			t.Fatal(err)
		}
		if n == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("backend %d still in pg_stat_activity 20s after it was terminated", pid)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// forEachPostgres runs f, in parallel subtests, against PostgreSQL
// through each driver.
func forEachPostgres(t *testing.T, f func(t *testing.T, db *sql.DB)) {
	testdb.ForEachTarget(t, 4, func(t *testing.T, tg testdb.Target) { f(t, tg.Open(t, 4)) }, "postgres")
}
