package testdb

import (
	"context"
	"database/sql"
	"net"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/pgx/v5/stdlib"
)

// RoundTrips counts the round trips of the connections dialled through
// it: a write to the server that follows a read from it (or is the
// connection's first write) starts one, so that everything a client sends
// before it waits for an answer counts once, however many statements it
// holds and in however many writes it goes. It is safe for concurrent use;
// connections are counted together.
type RoundTrips struct {
	mu    sync.Mutex
	n     int
	conns int
}

// Reset forgets the round trips counted so far.
func (r *RoundTrips) Reset() {
	r.mu.Lock()
	r.n = 0
	r.mu.Unlock()
}

// Count returns the round trips since the last Reset.
func (r *RoundTrips) Count() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.n
}

// Dial dials addr on network and returns a connection whose round trips
// r counts: a pgconn.DialFunc.
func (r *RoundTrips) Dial(ctx context.Context, network, addr string) (net.Conn, error) {
	c, err := (&net.Dialer{KeepAlive: 5 * time.Minute}).DialContext(ctx, network, addr)
	if err != nil {
		return nil, err
	}
	r.mu.Lock()
	r.conns++
	r.mu.Unlock()
	return &tripConn{Conn: c, r: r, read: true}, nil
}

// tripConn counts its round trips in r.
type tripConn struct {
	net.Conn
	r    *RoundTrips
	mu   sync.Mutex
	read bool // the last thing it did was a read (or nothing yet)
}

// DebugIO, when set, prints every read and write (debugging only).
var DebugIO func(op string, p []byte)

func (c *tripConn) Write(p []byte) (int, error) {
	if DebugIO != nil {
		DebugIO("write", p)
	}
	c.mu.Lock()
	if c.read {
		c.read = false
		c.r.mu.Lock()
		c.r.n++
		c.r.mu.Unlock()
	}
	c.mu.Unlock()
	return c.Conn.Write(p)
}

func (c *tripConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	if DebugIO != nil && n > 0 {
		DebugIO("read", p[:n])
	}
	if n > 0 {
		c.mu.Lock()
		c.read = true
		c.mu.Unlock()
	}
	return n, err
}

// PgxConfig parses OPLEDGER_TEST_POSTGRES_DSN followed by params (for
// example "&default_query_exec_mode=exec") for a pool of at most maxConns
// connections, skipping (or failing) like a target without the variable.
// With rt set, the pool's connections count their round trips in it and
// are never pinged when acquired (a ping would be a round trip of its own).
func PgxConfig(t testing.TB, params string, maxConns int, rt *RoundTrips) *pgxpool.Config {
	t.Helper()
	dsn := os.Getenv(EnvPostgres)
	if dsn == "" {
		Skip(t, EnvPostgres)
	}
	return PgxConfigDSN(t, dsn+params, maxConns, rt)
}

// PgxConfigDSN is PgxConfig for a DSN of its own (a throw-away server, a
// PgBouncer).
func PgxConfigDSN(t testing.TB, dsn string, maxConns int, rt *RoundTrips) *pgxpool.Config {
	t.Helper()
	cfg, err := pgxpool.ParseConfig(dsn)
	if err != nil {
		t.Fatalf("pgx config: %v", err)
	}
	cfg.MaxConns = int32(maxConns)
	if rt != nil {
		cfg.ConnConfig.DialFunc = rt.Dial
		cfg.ShouldPing = func(context.Context, pgxpool.ShouldPingParams) bool { return false }
	}
	return cfg
}

// OpenPgx opens a pgx pool with cfg, reserving its connections of the
// PostgreSQL budget (unless the test reserved already), pings it and
// closes it when the test ends, failing the test if a connection is still
// acquired then.
func OpenPgx(t testing.TB, cfg *pgxpool.Config) *pgxpool.Pool {
	t.Helper()
	reserveForOpen(t, "postgres", int(cfg.MaxConns))
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		t.Fatalf("pgx pool: %v", err)
	}
	if err := pool.Ping(ctx); err != nil {
		pool.Close()
		t.Fatalf("pgx ping: %v", err)
	}
	t.Cleanup(func() {
		if n := pool.Stat().AcquiredConns(); n != 0 {
			t.Errorf("%d pgx connections still acquired when the test ended (a transaction or rows leaked)", n)
		}
		pool.Close()
	})
	return pool
}

// SQLDB returns a database/sql handle on pool (stdlib.OpenDBFromPool),
// closed when the test ends: what the migrations, and the tests'
// bookkeeping, run on for a pgx pool.
func SQLDB(t testing.TB, pool *pgxpool.Pool) *sql.DB {
	t.Helper()
	db := stdlib.OpenDBFromPool(pool)
	t.Cleanup(func() { db.Close() })
	return db
}

// Dials returns how many connections were dialled through r.
func (r *RoundTrips) Dials() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.conns
}
