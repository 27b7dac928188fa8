package testdb

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"slices"
	"strings"
	"sync"
	"testing"
)

// Counter records every statement a counting pool sends to the database,
// BEGIN, COMMIT and ROLLBACK included, in the order they were sent: what a
// path costs in statements, asserted by tests. It is safe for concurrent
// use; a pool opened with [OpenCounting] feeds it from every connection.
type Counter struct {
	mu    sync.Mutex
	stmts []string
	full  []string
}

// Reset forgets the statements recorded so far.
func (c *Counter) Reset() {
	c.mu.Lock()
	c.stmts, c.full = nil, nil
	c.mu.Unlock()
}

// Statements returns the statements recorded since the last Reset, each
// as its kind: "BEGIN", "COMMIT", "ROLLBACK", or the first word of the SQL
// text in upper case ("INSERT", "SELECT", "WITH", "SET", "SAVEPOINT",
// "PRAGMA", …).
func (c *Counter) Statements() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]string(nil), c.stmts...)
}

// SQL returns the full text of the statements recorded since the last
// Reset ("BEGIN", "COMMIT" and "ROLLBACK" for the driver's own).
func (c *Counter) SQL() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]string(nil), c.full...)
}

func (c *Counter) add(query string) {
	kind := strings.TrimSpace(query)
	if i := strings.IndexAny(kind, " \t\n("); i >= 0 {
		kind = kind[:i]
	}
	c.mu.Lock()
	c.stmts = append(c.stmts, strings.ToUpper(kind))
	c.full = append(c.full, query)
	c.mu.Unlock()
}

// Count returns how many statements were recorded since the last Reset.
func (c *Counter) Count() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.stmts)
}

// CheckStatements fails t unless the statements c recorded, with each
// one whose SQL mentions work shown as "WORK", are want. The kit takes no
// SAVEPOINT on any path: one is counted apart and fails the check. It
// logs what it found under path.
func CheckStatements(t testing.TB, path string, c *Counter, work string, want []string) {
	t.Helper()
	kinds, sqls := c.Statements(), c.SQL()
	var norm []string
	savepoints := 0
	for i, k := range kinds {
		switch {
		case k == "SAVEPOINT":
			savepoints++
			continue
		case work != "" && strings.Contains(sqls[i], work):
			k = "WORK"
		}
		norm = append(norm, k)
	}
	t.Logf("%s: %d statements (+%d savepoint): %s", path, len(norm), savepoints, strings.Join(norm, " "))
	if !slices.Equal(norm, want) || savepoints > 0 {
		t.Errorf("%s: statements %v (+%d savepoints), want %v\nSQL:\n%s", path, norm, savepoints, want, strings.Join(sqls, "\n"))
	}
}

// OpenCounting opens a pool like tg.Open (at most maxConns connections,
// pinged, closed when the test ends) whose connections record every
// statement in the returned Counter. The pool is the target's own driver
// and DSN behind a thin database/sql/driver wrapper that only counts. The
// ping's statements, if any, are forgotten.
func (tg Target) OpenCounting(t testing.TB, maxConns int) (*sql.DB, *Counter) {
	t.Helper()
	if tg.open == nil {
		t.Fatalf("target %s cannot count statements", tg.Name)
	}
	c := &Counter{}
	db := tg.open(t, maxConns, c)
	c.Reset()
	return db, c
}

// countingDB opens driverName's connector for dsn behind the counting
// wrapper.
func countingDB(driverName, dsn string, c *Counter) (*sql.DB, error) {
	probe, err := sql.Open(driverName, dsn)
	if err != nil {
		return nil, err
	}
	drv := probe.Driver()
	_ = probe.Close()
	var inner driver.Connector
	if dc, ok := drv.(driver.DriverContext); ok {
		if inner, err = dc.OpenConnector(dsn); err != nil {
			return nil, err
		}
	} else {
		inner = dsnConnector{drv: drv, dsn: dsn}
	}
	return sql.OpenDB(countingConnector{inner: inner, c: c}), nil
}

type dsnConnector struct {
	drv driver.Driver
	dsn string
}

func (d dsnConnector) Connect(context.Context) (driver.Conn, error) { return d.drv.Open(d.dsn) }
func (d dsnConnector) Driver() driver.Driver                        { return d.drv }

type countingConnector struct {
	inner driver.Connector
	c     *Counter
}

func (cc countingConnector) Connect(ctx context.Context) (driver.Conn, error) {
	conn, err := cc.inner.Connect(ctx)
	if err != nil {
		return nil, err
	}
	return &countingConn{inner: conn, c: cc.c}, nil
}

func (cc countingConnector) Driver() driver.Driver { return cc.inner.Driver() }

// countingConn forwards to the driver's connection and records each
// statement. The optional interfaces it offers fall back to what
// database/sql does without them when the driver's connection lacks one.
type countingConn struct {
	inner driver.Conn
	c     *Counter
}

var (
	_ driver.ConnBeginTx        = (*countingConn)(nil)
	_ driver.ExecerContext      = (*countingConn)(nil)
	_ driver.QueryerContext     = (*countingConn)(nil)
	_ driver.ConnPrepareContext = (*countingConn)(nil)
	_ driver.NamedValueChecker  = (*countingConn)(nil)
	_ driver.SessionResetter    = (*countingConn)(nil)
	_ driver.Validator          = (*countingConn)(nil)
	_ driver.Pinger             = (*countingConn)(nil)
	_ driver.StmtExecContext    = (*countingStmt)(nil)
	_ driver.StmtQueryContext   = (*countingStmt)(nil)
	_ driver.NamedValueChecker  = (*countingStmt)(nil)
)

func (cn *countingConn) Prepare(query string) (driver.Stmt, error) {
	return cn.PrepareContext(context.Background(), query)
}

func (cn *countingConn) PrepareContext(ctx context.Context, query string) (driver.Stmt, error) {
	var (
		st  driver.Stmt
		err error
	)
	if p, ok := cn.inner.(driver.ConnPrepareContext); ok {
		st, err = p.PrepareContext(ctx, query)
	} else {
		st, err = cn.inner.Prepare(query)
	}
	if err != nil {
		return nil, err
	}
	return &countingStmt{inner: st, query: query, c: cn.c}, nil
}

func (cn *countingConn) Close() error { return cn.inner.Close() }

func (cn *countingConn) Begin() (driver.Tx, error) {
	return cn.BeginTx(context.Background(), driver.TxOptions{})
}

func (cn *countingConn) BeginTx(ctx context.Context, opts driver.TxOptions) (driver.Tx, error) {
	var (
		tx  driver.Tx
		err error
	)
	if b, ok := cn.inner.(driver.ConnBeginTx); ok {
		tx, err = b.BeginTx(ctx, opts)
	} else {
		tx, err = cn.inner.Begin() //nolint:staticcheck // drivers without BeginTx
	}
	cn.c.add("BEGIN")
	if err != nil {
		return nil, err
	}
	return countingTx{inner: tx, c: cn.c}, nil
}

func (cn *countingConn) ExecContext(ctx context.Context, query string, args []driver.NamedValue) (driver.Result, error) {
	e, ok := cn.inner.(driver.ExecerContext)
	if !ok {
		return nil, driver.ErrSkip
	}
	res, err := e.ExecContext(ctx, query, args)
	if !errors.Is(err, driver.ErrSkip) {
		cn.c.add(query)
	}
	return res, err
}

func (cn *countingConn) QueryContext(ctx context.Context, query string, args []driver.NamedValue) (driver.Rows, error) {
	q, ok := cn.inner.(driver.QueryerContext)
	if !ok {
		return nil, driver.ErrSkip
	}
	rows, err := q.QueryContext(ctx, query, args)
	if !errors.Is(err, driver.ErrSkip) {
		cn.c.add(query)
	}
	return rows, err
}

func (cn *countingConn) CheckNamedValue(nv *driver.NamedValue) error {
	if c, ok := cn.inner.(driver.NamedValueChecker); ok {
		return c.CheckNamedValue(nv)
	}
	return driver.ErrSkip
}

func (cn *countingConn) ResetSession(ctx context.Context) error {
	if r, ok := cn.inner.(driver.SessionResetter); ok {
		return r.ResetSession(ctx)
	}
	return nil
}

func (cn *countingConn) IsValid() bool {
	if v, ok := cn.inner.(driver.Validator); ok {
		return v.IsValid()
	}
	return true
}

func (cn *countingConn) Ping(ctx context.Context) error {
	if p, ok := cn.inner.(driver.Pinger); ok {
		return p.Ping(ctx)
	}
	return nil
}

type countingTx struct {
	inner driver.Tx
	c     *Counter
}

func (tx countingTx) Commit() error {
	tx.c.add("COMMIT")
	return tx.inner.Commit()
}

func (tx countingTx) Rollback() error {
	tx.c.add("ROLLBACK")
	return tx.inner.Rollback()
}

type countingStmt struct {
	inner driver.Stmt
	query string
	c     *Counter
}

func (s *countingStmt) Close() error  { return s.inner.Close() }
func (s *countingStmt) NumInput() int { return s.inner.NumInput() }

func (s *countingStmt) Exec(args []driver.Value) (driver.Result, error) {
	s.c.add(s.query)
	return s.inner.Exec(args) //nolint:staticcheck // drivers without ExecContext
}

func (s *countingStmt) Query(args []driver.Value) (driver.Rows, error) {
	s.c.add(s.query)
	return s.inner.Query(args) //nolint:staticcheck // drivers without QueryContext
}

func (s *countingStmt) ExecContext(ctx context.Context, args []driver.NamedValue) (driver.Result, error) {
	s.c.add(s.query)
	if e, ok := s.inner.(driver.StmtExecContext); ok {
		return e.ExecContext(ctx, args)
	}
	vals, err := values(args)
	if err != nil {
		return nil, err
	}
	return s.inner.Exec(vals) //nolint:staticcheck // drivers without ExecContext
}

func (s *countingStmt) QueryContext(ctx context.Context, args []driver.NamedValue) (driver.Rows, error) {
	s.c.add(s.query)
	if q, ok := s.inner.(driver.StmtQueryContext); ok {
		return q.QueryContext(ctx, args)
	}
	vals, err := values(args)
	if err != nil {
		return nil, err
	}
	return s.inner.Query(vals) //nolint:staticcheck // drivers without QueryContext
}

func (s *countingStmt) CheckNamedValue(nv *driver.NamedValue) error {
	if c, ok := s.inner.(driver.NamedValueChecker); ok {
		return c.CheckNamedValue(nv)
	}
	return driver.ErrSkip
}

func values(args []driver.NamedValue) ([]driver.Value, error) {
	out := make([]driver.Value, len(args))
	for i, a := range args {
		if a.Name != "" {
			return nil, errors.New("testdb: named arguments need a driver with context statements")
		}
		out[i] = a.Value
	}
	return out, nil
}
