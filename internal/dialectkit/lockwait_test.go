package dialectkit_test

import (
	"context"
	"database/sql"
	"errors"
	"path/filepath"
	"testing"
	"time"

	"github.com/opledger/opledger/dialects"
	"github.com/opledger/opledger/internal/dialectkit"
	"github.com/opledger/opledger/internal/sqlitedialect"
	"github.com/opledger/opledger/internal/testkit/testdb"
)

// TestBeginOnConn: the procedure for session-scoped bounds, on SQLite. The
// setting and the transaction share one connection; release runs restore
// on it and returns it to the pool, or closes it when restore fails or the
// setting could not be made; a BEGIN that fails releases at once.
func TestBeginOnConn(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "boc.db")
	db := openSQLite(t, path, 1)
	ctx := context.Background()
	busy := func(q interface {
		QueryRowContext(context.Context, string, ...any) *sql.Row
	}) int64 {
		t.Helper()
		var ms int64
		if err := q.QueryRowContext(ctx, "PRAGMA busy_timeout").Scan(&ms); err != nil {
			t.Fatal(err)
		}
		return ms
	}
	open := func() int { return db.Stats().OpenConnections }
	before := busy(db)

	if _, _, err := dialectkit.BeginOnConn(ctx, nil, nil, func(context.Context, *sql.Conn) (func(context.Context) error, error) { return nil, nil }); err == nil {
		t.Fatal("nil database accepted")
	}
	if _, _, err := dialectkit.BeginOnConn(ctx, db, nil, nil); err == nil {
		t.Fatal("nil setting accepted")
	}

	// A setting that succeeds: the transaction runs on the connection
	// it was made on, and release restores it there.
	var setOn, restoredOn *sql.Conn
	set := func(ctx context.Context, conn *sql.Conn) (func(context.Context) error, error) {
		setOn = conn
		if _, err := conn.ExecContext(ctx, "PRAGMA busy_timeout = 1234"); err != nil {
			return nil, err
		}
		return func(rctx context.Context) error {
			restoredOn = conn
			if rctx.Err() != nil {
				return rctx.Err()
			}
			if _, ok := rctx.Deadline(); !ok {
				return errors.New("restore without a deadline")
			}
			_, err := conn.ExecContext(rctx, "PRAGMA busy_timeout = 4321")
			return err
		}, nil
	}
	cctx, cancel := context.WithCancel(ctx)
	tx, release, err := dialectkit.BeginOnConn(cctx, db, nil, set)
	if err != nil || release == nil {
		t.Fatalf("BeginOnConn: %v (release %v)", err, release != nil)
	}
	if got := busy(tx); got != 1234 {
		t.Fatalf("busy_timeout in the transaction %d, want 1234 (set on its connection)", got)
	}
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
	cancel() // restore runs all the same, with a context of its own
	release()
	if restoredOn == nil || restoredOn != setOn {
		t.Fatal("restore did not run on the connection the setting was made on")
	}
	if open() != 1 || busy(db) != 4321 {
		t.Fatalf("after release: %d open connections, busy_timeout %d; want the one connection back, restored to 4321", open(), busy(db))
	}

	// A restore that fails: the connection is closed, not pooled.
	failing := func(ctx context.Context, conn *sql.Conn) (func(context.Context) error, error) {
		if _, err := conn.ExecContext(ctx, "PRAGMA busy_timeout = 1234"); err != nil {
			return nil, err
		}
		return func(context.Context) error { return errors.New("cannot restore") }, nil
	}
	tx, release, err = dialectkit.BeginOnConn(ctx, db, nil, failing)
	if err != nil {
		t.Fatal(err)
	}
	tx.Rollback()
	release()
	if n := open(); n != 0 {
		t.Fatalf("%d open connections after a failed restore, want the connection discarded", n)
	}
	if got := busy(db); got != before {
		t.Fatalf("a new connection has busy_timeout %d, want the DSN's %d", got, before)
	}

	// A setting that fails: its error, and the connection discarded.
	errSet := errors.New("cannot set")
	if _, _, err := dialectkit.BeginOnConn(ctx, db, nil, func(context.Context, *sql.Conn) (func(context.Context) error, error) {
		return nil, errSet
	}); !errors.Is(err, errSet) {
		t.Fatalf("failing setting: %v", err)
	}
	if n := open(); n != 0 {
		t.Fatalf("%d open connections after a failed setting, want the connection discarded", n)
	}

	// A BEGIN that fails (another pool holds the write lock, and the
	// setting bounds the wait): no transaction, and restore has run.
	holder, err := openSQLite(t, path, 1).BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer holder.Rollback()
	restored := false
	tx, release, err = dialectkit.BeginOnConn(ctx, db, nil, func(ctx context.Context, conn *sql.Conn) (func(context.Context) error, error) {
		if _, err := conn.ExecContext(ctx, "PRAGMA busy_timeout = 50"); err != nil {
			return nil, err
		}
		return func(rctx context.Context) error {
			_, err := conn.ExecContext(rctx, "PRAGMA busy_timeout = 4321")
			restored = err == nil
			return err
		}, nil
	})
	if sqlitedialect.New().Classify(err) != dialects.ClassLockTimeout || tx != nil || release != nil {
		t.Fatalf("BEGIN behind a held write lock: tx %v, release %v, %v", tx != nil, release != nil, err)
	}
	if !restored || open() != 1 || busy(db) != 4321 {
		t.Fatalf("after a failed BEGIN: restored %v, %d open connections; want restored and pooled", restored, open())
	}
}

func openSQLite(t *testing.T, path string, conns int) *sql.DB {
	t.Helper()
	db, err := sql.Open("sqlite3", sqlitedialect.DSN(path, 5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	db.SetMaxOpenConns(conns)
	db.SetMaxIdleConns(conns)
	t.Cleanup(func() { db.Close() })
	return db
}

// TestBeginBoundedRejectsBadBounds: every LockWaiter of the kit refuses a
// bound that is not positive, and a nil database, with an error.
func TestBeginBoundedRejectsBadBounds(t *testing.T) {
	for _, tg := range testdb.Targets() {
		lw := tg.Dialect.(dialects.LockWaiter)
		for _, d := range []time.Duration{0, -time.Second} {
			if _, _, err := lw.BeginBounded(context.Background(), nil, nil, d); err == nil {
				t.Errorf("%s: bound %v accepted", tg.Name, d)
			}
		}
		if _, _, err := lw.BeginBounded(context.Background(), nil, nil, time.Second); err == nil {
			t.Errorf("%s: nil database accepted", tg.Name)
		}
	}
	if _, ok := any(sqlitedialect.New()).(dialects.LockWaiter); !ok {
		t.Fatal("sqlite is not a LockWaiter")
	}
}
