package txmiddleware_test

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/opledger/opledger/dialects/mysql"
	"github.com/opledger/opledger/dialects/sqlite"
	"github.com/opledger/opledger/internal/testdb"
	"github.com/opledger/opledger/txmiddleware"
)

// A counting wrapper around a database/sql driver: it counts the
// statements a connection runs (each Exec or Query, however the driver
// runs it: a prepared statement counts once) plus BEGIN, COMMIT and
// ROLLBACK. Preparing and closing a statement is not counted.

type countConnector struct {
	open func(ctx context.Context) (driver.Conn, error)
	drv  driver.Driver
	n    *atomic.Int64
}

func (c countConnector) Connect(ctx context.Context) (driver.Conn, error) {
	conn, err := c.open(ctx)
	if err != nil {
		return nil, err
	}
	return &countConn{Conn: conn, n: c.n}, nil
}

func (c countConnector) Driver() driver.Driver { return c.drv }

type countConn struct {
	driver.Conn
	n *atomic.Int64
}

func (c *countConn) ExecContext(ctx context.Context, q string, args []driver.NamedValue) (driver.Result, error) {
	e, ok := c.Conn.(driver.ExecerContext)
	if !ok {
		return nil, driver.ErrSkip
	}
	r, err := e.ExecContext(ctx, q, args)
	if !errors.Is(err, driver.ErrSkip) {
		c.n.Add(1)
	}
	return r, err
}

func (c *countConn) QueryContext(ctx context.Context, q string, args []driver.NamedValue) (driver.Rows, error) {
	qc, ok := c.Conn.(driver.QueryerContext)
	if !ok {
		return nil, driver.ErrSkip
	}
	r, err := qc.QueryContext(ctx, q, args)
	if !errors.Is(err, driver.ErrSkip) {
		c.n.Add(1)
	}
	return r, err
}

func (c *countConn) PrepareContext(ctx context.Context, q string) (driver.Stmt, error) {
	var (
		s   driver.Stmt
		err error
	)
	if p, ok := c.Conn.(driver.ConnPrepareContext); ok {
		s, err = p.PrepareContext(ctx, q)
	} else {
		s, err = c.Conn.Prepare(q)
	}
	if err != nil {
		return nil, err
	}
	return &countStmt{Stmt: s, n: c.n}, nil
}

func (c *countConn) BeginTx(ctx context.Context, opts driver.TxOptions) (driver.Tx, error) {
	b, ok := c.Conn.(driver.ConnBeginTx)
	if !ok {
		return nil, errors.New("count: the driver has no BeginTx")
	}
	tx, err := b.BeginTx(ctx, opts)
	if err != nil {
		return nil, err
	}
	c.n.Add(1)
	return countTx{Tx: tx, n: c.n}, nil
}

func (c *countConn) CheckNamedValue(v *driver.NamedValue) error {
	if ch, ok := c.Conn.(driver.NamedValueChecker); ok {
		return ch.CheckNamedValue(v)
	}
	return driver.ErrSkip
}

func (c *countConn) ResetSession(ctx context.Context) error {
	if r, ok := c.Conn.(driver.SessionResetter); ok {
		return r.ResetSession(ctx)
	}
	return nil
}

func (c *countConn) IsValid() bool {
	if v, ok := c.Conn.(driver.Validator); ok {
		return v.IsValid()
	}
	return true
}

type countTx struct {
	driver.Tx
	n *atomic.Int64
}

func (t countTx) Commit() error   { t.n.Add(1); return t.Tx.Commit() }
func (t countTx) Rollback() error { t.n.Add(1); return t.Tx.Rollback() }

type countStmt struct {
	driver.Stmt
	n *atomic.Int64
}

func (s *countStmt) ExecContext(ctx context.Context, args []driver.NamedValue) (driver.Result, error) {
	s.n.Add(1)
	if e, ok := s.Stmt.(driver.StmtExecContext); ok {
		return e.ExecContext(ctx, args)
	}
	return nil, errors.New("count: the statement has no ExecContext")
}

func (s *countStmt) QueryContext(ctx context.Context, args []driver.NamedValue) (driver.Rows, error) {
	s.n.Add(1)
	if q, ok := s.Stmt.(driver.StmtQueryContext); ok {
		return q.QueryContext(ctx, args)
	}
	return nil, errors.New("count: the statement has no QueryContext")
}

func (s *countStmt) CheckNamedValue(v *driver.NamedValue) error {
	if ch, ok := s.Stmt.(driver.NamedValueChecker); ok {
		return ch.CheckNamedValue(v)
	}
	return driver.ErrSkip
}

// openCounting opens a one-connection pool on tg's database through the
// counting wrapper, and returns it with its counter.
func openCounting(t *testing.T, tg testdb.Target) (*sql.DB, *atomic.Int64) {
	t.Helper()
	var name, dsn string
	switch tg.Name {
	case "sqlite":
		name, dsn = "sqlite3", sqlite.DSN(filepath.Join(t.TempDir(), "count.db"), 10*time.Second)
	case "postgres/pq", "postgres/pgx":
		dsn = os.Getenv(testdb.EnvPostgres)
		name = map[string]string{"postgres/pq": "postgres", "postgres/pgx": "pgx"}[tg.Name]
	case "mysql":
		cfg, err := mysql.Config(os.Getenv(testdb.EnvMySQL))
		if err != nil {
			t.Fatal(err)
		}
		name, dsn = "mysql", cfg.FormatDSN()
	default:
		t.Skipf("no counting wrapper for %s", tg.Name)
	}
	if dsn == "" {
		t.Skipf("no DSN for %s", tg.Name)
	}
	plain, err := sql.Open(name, dsn)
	if err != nil {
		t.Fatal(err)
	}
	drv := plain.Driver()
	plain.Close()
	open := func(context.Context) (driver.Conn, error) { return drv.Open(dsn) }
	if dc, ok := drv.(driver.DriverContext); ok {
		cn, err := dc.OpenConnector(dsn)
		if err != nil {
			t.Fatal(err)
		}
		open = cn.Connect
	}
	n := new(atomic.Int64)
	db := sql.OpenDB(countConnector{open: open, drv: drv, n: n})
	db.SetMaxOpenConns(1)
	t.Cleanup(func() { db.Close() })
	return db, n
}

// TestStatementCounts counts, through a driver wrapper, what one keyed
// call sends, BEGIN and COMMIT (or ROLLBACK) included, against a bare
// transaction doing the same business insert: claim first two statements
// more (the claim and the completion), claim at commit one more (the
// record); a replay claim first sends the claim's INSERT and its read-back
// and rolls back, at commit the work too before the same two.
func TestStatementCounts(t *testing.T) {
	for _, tg := range testdb.Targets() {
		t.Run(tg.Name, func(t *testing.T) {
			if f := tg.Family(); f == "postgres" || f == "mysql" {
				testdb.Reserve(t, f, 1)
			}
			db, n := openCounting(t, tg)
			e := withStore(t, testdb.NewEnv(t, tg.Name, tg.Dialect, db))
			ctx := context.Background()
			count := func(f func()) int64 {
				before := n.Load()
				f()
				return n.Load() - before
			}
			bare := count(func() {
				tx, err := db.BeginTx(ctx, nil)
				if err != nil {
					t.Fatal(err)
				}
				if err := e.WriteBiz(ctx, tx, "bare", 1); err != nil {
					t.Fatal(err)
				}
				if err := tx.Commit(); err != nil {
					t.Fatal(err)
				}
			})
			if bare != 3 {
				t.Fatalf("a bare transaction counted %d statements, want 3 (BEGIN, INSERT, COMMIT)", bare)
			}
			first, atCommit := e.runner(t), e.runner(t, txmiddleware.WithClaimAtCommit())
			var runs atomic.Int64
			run := func(r *txmiddleware.Runner, key string) (txmiddleware.RunResult, int64) {
				var out txmiddleware.RunResult
				c := count(func() {
					var err error
					out, err = r.Run(ctx, req(t, key), e.bizWork(key, 1, &runs))
					if err != nil {
						t.Fatal(err)
					}
				})
				return out, c
			}
			for _, c := range []struct {
				name   string
				r      *txmiddleware.Runner
				key    string
				replay bool
				want   int64
			}{
				{"claim first", first, "k-first", false, bare + 2},
				{"claim first, replay", first, "k-first", true, 4},
				{"claim at commit", atCommit, "k-commit", false, bare + 1},
				{"claim at commit, replay", atCommit, "k-commit", true, 5},
				{"claim at commit, replay of a claim-first call", atCommit, "k-first", true, 5},
			} {
				out, got := run(c.r, c.key)
				if out.Replayed != c.replay {
					t.Fatalf("%s: %+v", c.name, out)
				}
				if got != c.want {
					t.Errorf("%s: %d statements, want %d (the bare transaction: %d)", c.name, got, c.want, bare)
				}
				t.Logf("%s %s: %d statements (bare transaction %d)", tg.Name, c.name, got, bare)
			}
		})
	}
}
