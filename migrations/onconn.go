package migrations

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"strconv"
	"sync"
)

// errConnLost is the private pool's answer when goose asks for a second
// connection: the one the migration holds its lock on broke, and another
// would run the rest of the migration unprotected.
var errConnLost = errors.New("migrations: the connection that holds the migration lock broke")

// onConn runs f with a *sql.DB whose only connection is conn's own session
// (database/sql's driver connection under conn), so that goose, which
// needs a *sql.DB, runs every statement on the session that holds the
// migration lock: no second connection is needed (a pool of one works),
// and the lock covers everything goose does. If the session breaks under
// f, conn is discarded, never returned to its pool. With nested, conn is
// inside a transaction of the lock's (dialects.Migrations.LockIsTransaction)
// and every transaction begun on the *sql.DB is a savepoint in it.
func onConn(conn *sql.Conn, nested bool, f func(db *sql.DB) error) error {
	var ferr error
	rerr := conn.Raw(func(dc any) error {
		dconn, ok := dc.(driver.Conn)
		if !ok {
			ferr = errors.New("migrations: the driver's connection is not a driver.Conn")
			return nil
		}
		c := &heldConnector{conn: &heldConn{Conn: dconn, nested: nested}}
		db := sql.OpenDB(c)
		db.SetMaxOpenConns(1)
		db.SetMaxIdleConns(1)
		ferr = f(db)
		broken := c.conn.broken() // before Close, which closes it too
		_ = db.Close()
		if broken {
			return driver.ErrBadConn // conn is dropped from its pool
		}
		return nil
	})
	if ferr != nil {
		return ferr
	}
	if errors.Is(rerr, driver.ErrBadConn) {
		return errConnLost
	}
	return rerr
}

// heldConnector hands out its one connection once.
type heldConnector struct {
	mu     sync.Mutex
	conn   *heldConn
	handed bool
}

func (c *heldConnector) Connect(context.Context) (driver.Conn, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.handed {
		return nil, errConnLost
	}
	c.handed = true
	return c.conn, nil
}

func (c *heldConnector) Driver() driver.Driver { return heldDriver{} }

type heldDriver struct{}

func (heldDriver) Open(string) (driver.Conn, error) { return nil, errConnLost }

// heldConn is a driver connection lent to the private pool: closing it
// only marks it (the session stays with its *sql.Conn), and it passes
// every optional interface through to the driver's connection, falling
// back as database/sql would where the driver lacks one.
type heldConn struct {
	driver.Conn
	nested     bool // transactions are savepoints
	savepoints int  // savepoints begun, for their names

	mu     sync.Mutex
	closed bool
}

// broken reports whether the private pool closed the connection, which,
// before the pool itself is closed, it does only when the driver reported
// it bad.
func (c *heldConn) broken() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.closed
}

func (c *heldConn) Close() error {
	c.mu.Lock()
	c.closed = true
	c.mu.Unlock()
	return nil
}

func (c *heldConn) PrepareContext(ctx context.Context, query string) (driver.Stmt, error) {
	if p, ok := c.Conn.(driver.ConnPrepareContext); ok {
		return p.PrepareContext(ctx, query)
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	return c.Conn.Prepare(query)
}

func (c *heldConn) BeginTx(ctx context.Context, opts driver.TxOptions) (driver.Tx, error) {
	if c.nested {
		if opts.Isolation != 0 || opts.ReadOnly {
			return nil, errors.New("migrations: a savepoint takes no transaction options")
		}
		c.savepoints++
		sp := savepoint{c: c, name: "opledger_migration_" + strconv.Itoa(c.savepoints)}
		if err := c.execSQL(ctx, "SAVEPOINT "+sp.name); err != nil {
			return nil, err
		}
		return sp, nil
	}
	if b, ok := c.Conn.(driver.ConnBeginTx); ok {
		return b.BeginTx(ctx, opts)
	}
	if opts.Isolation != 0 || opts.ReadOnly {
		return nil, errors.New("migrations: the driver cannot begin a transaction with options")
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	return c.Conn.Begin()
}

// execSQL runs a statement without arguments on the driver's connection.
func (c *heldConn) execSQL(ctx context.Context, query string) error {
	_, err := c.ExecContext(ctx, query, nil)
	if !errors.Is(err, driver.ErrSkip) {
		return err
	}
	st, err := c.PrepareContext(ctx, query)
	if err != nil {
		return err
	}
	defer st.Close()
	_, err = st.Exec(nil)
	return err
}

// savepoint is a transaction begun inside the lock's transaction.
type savepoint struct {
	c    *heldConn
	name string
}

func (s savepoint) Commit() error { return s.c.execSQL(context.Background(), "RELEASE "+s.name) }

func (s savepoint) Rollback() error {
	err := s.c.execSQL(context.Background(), "ROLLBACK TO "+s.name)
	return errors.Join(err, s.c.execSQL(context.Background(), "RELEASE "+s.name))
}

func (c *heldConn) ExecContext(ctx context.Context, query string, args []driver.NamedValue) (driver.Result, error) {
	if e, ok := c.Conn.(driver.ExecerContext); ok {
		return e.ExecContext(ctx, query, args)
	}
	if e, ok := c.Conn.(driver.Execer); ok {
		if vs, ok := plainValues(args); ok {
			return e.Exec(query, vs)
		}
	}
	return nil, driver.ErrSkip
}

func (c *heldConn) QueryContext(ctx context.Context, query string, args []driver.NamedValue) (driver.Rows, error) {
	if q, ok := c.Conn.(driver.QueryerContext); ok {
		return q.QueryContext(ctx, query, args)
	}
	if q, ok := c.Conn.(driver.Queryer); ok {
		if vs, ok := plainValues(args); ok {
			return q.Query(query, vs)
		}
	}
	return nil, driver.ErrSkip
}

// plainValues returns args as positional values, or false when one is
// named.
func plainValues(args []driver.NamedValue) ([]driver.Value, bool) {
	vs := make([]driver.Value, len(args))
	for i, a := range args {
		if a.Name != "" {
			return nil, false
		}
		vs[i] = a.Value
	}
	return vs, true
}

func (c *heldConn) CheckNamedValue(nv *driver.NamedValue) error {
	if n, ok := c.Conn.(driver.NamedValueChecker); ok {
		return n.CheckNamedValue(nv)
	}
	return driver.ErrSkip // database/sql's default conversion
}

func (c *heldConn) ResetSession(ctx context.Context) error {
	if r, ok := c.Conn.(driver.SessionResetter); ok {
		return r.ResetSession(ctx)
	}
	return nil
}

func (c *heldConn) IsValid() bool {
	if v, ok := c.Conn.(driver.Validator); ok {
		return v.IsValid()
	}
	return true
}

func (c *heldConn) Ping(ctx context.Context) error {
	if p, ok := c.Conn.(driver.Pinger); ok {
		return p.Ping(ctx)
	}
	return nil
}
