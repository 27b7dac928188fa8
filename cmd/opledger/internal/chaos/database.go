package chaos

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"strings"

	"github.com/opledger/opledger/internal/harness/faultproxy"
	"github.com/opledger/opledger/internal/harness/throwaway"
)

// The databases a run knows by name (Target.Name), in the order the
// command runs them.
const (
	Postgres    = "postgres"
	PgBouncer   = "pgbouncer"
	PgBouncerPQ = "pgbouncer-pq"
	MariaDB     = "mariadb"
	SQLite      = "sqlite"
)

// Databases are the names of the throw-away databases, in that order.
var Databases = []string{Postgres, PgBouncer, PgBouncerPQ, MariaDB, SQLite}

// database is a database a chaos run owns: it may restart it.
type database interface {
	// label names it in the report ("postgres", "postgres via pgbouncer", …).
	label() string
	// directDSN is the DSN the run itself uses, without a proxy: for the
	// migrations (which PgBouncer's transaction pooling refuses) and the
	// checks at the end.
	directDSN() string
	// addrs are the TCP addresses the replicas reach, none without a
	// server (two for a primary and its standby).
	addrs() []string
	// replicaDSN is the DSN of the replicas, reaching addrs() through the
	// proxies at via (one for each, in order; none without a server).
	replicaDSN(via []string) string
	// driver is the replicas' --driver ("" or "pq").
	driver() string
	// restart restarts the database server, with SIGKILL (crash) or
	// cleanly; errNoServer without one.
	restart(ctx context.Context, crash bool) error
	// restartNote says why restart cannot run ("" when it can): the run
	// then takes every replica down for a while instead.
	restartNote() string
	// close stops the server and removes its files.
	close() error
}

// errNoServer is restart's error for a database the run may not restart:
// SQLite (no server) or one given with --dsn (not the run's own).
var errNoServer = errors.New("no database server of the run's own to restart")

// startDatabase starts the named throw-away database, or returns an
// error matching throwaway.ErrNotInstalled.
func startDatabase(ctx context.Context, name, dir string) (database, error) {
	switch name {
	case Postgres:
		s, err := throwaway.StartPostgres(ctx)
		if err != nil {
			return nil, err
		}
		return &serverDB{name: "postgres", srv: s, restartee: s}, nil
	case PgBouncer, PgBouncerPQ:
		if !throwaway.PgBouncerInstalled() {
			return nil, fmt.Errorf("%w: pgbouncer", throwaway.ErrNotInstalled)
		}
		backend, err := throwaway.StartPostgres(ctx)
		if err != nil {
			return nil, err
		}
		pb, err := throwaway.StartPgBouncer(ctx, backend, throwaway.PgBouncerOptions{PoolSize: 20})
		if err != nil {
			backend.Cleanup()
			return nil, err
		}
		// In transaction pooling no prepared statement may outlive its
		// transaction (docs/poolers.md): pgx sends unnamed statements,
		// lib/pq Parse, Bind and Execute in one round trip.
		if name == PgBouncerPQ {
			return &serverDB{name: "postgres via pgbouncer (lib/pq)", srv: pb, restartee: backend, backend: backend,
				params: throwaway.PQPoolerSetting, drv: "pq"}, nil
		}
		return &serverDB{name: "postgres via pgbouncer (pgx)", srv: pb, restartee: backend, backend: backend,
			params: throwaway.PgxPoolerSetting}, nil
	case MariaDB:
		s, err := throwaway.StartMariaDB(ctx)
		if err != nil {
			return nil, err
		}
		return &serverDB{name: "mariadb", srv: s, restartee: s}, nil
	case SQLite:
		return sqliteDB{path: filepath.Join(dir, "chaos.db")}, nil
	}
	return nil, fmt.Errorf("unknown database %q (want %s)", name, strings.Join(Databases, ", "))
}

// serverDB is a throw-away server (internal/harness/throwaway). Through PgBouncer,
// srv is the pooler and restartee (and backend) the PostgreSQL behind it.
type serverDB struct {
	name      string
	srv       *throwaway.Server
	restartee *throwaway.Server
	backend   *throwaway.Server
	params    string
	drv       string
}

func (s *serverDB) driver() string { return s.drv }

func (s *serverDB) label() string { return s.name }

func (s *serverDB) directDSN() string {
	if s.backend != nil {
		return s.backend.DSN()
	}
	return s.srv.DSN()
}

func (s *serverDB) addrs() []string { return []string{s.srv.Addr()} }

func (s *serverDB) replicaDSN(via []string) string {
	return strings.Replace(s.srv.DSN(), s.srv.Addr(), via[0], 1) + s.params
}

// restart kills the database server with SIGKILL and starts it again
// (crash recovery runs, as after a failover to the same data), or stops
// it cleanly (PostgreSQL's fast shutdown, mariadbd's SIGTERM) and starts
// it again.
func (s *serverDB) restart(ctx context.Context, crash bool) error {
	if crash {
		return s.restartee.Crash(ctx)
	}
	return s.restartee.Restart(ctx)
}

func (s *serverDB) restartNote() string { return "" }

func (s *serverDB) close() error {
	err := s.srv.Cleanup()
	if s.backend != nil {
		err = errors.Join(err, s.backend.Cleanup())
	}
	return err
}

// sqliteDB is one SQLite file in WAL mode that every replica opens.
type sqliteDB struct{ path string }

func (s sqliteDB) label() string                       { return "sqlite" }
func (s sqliteDB) directDSN() string                   { return "sqlite:" + s.path }
func (s sqliteDB) addrs() []string                     { return nil }
func (s sqliteDB) driver() string                      { return "" }
func (s sqliteDB) replicaDSN([]string) string          { return s.directDSN() }
func (s sqliteDB) restart(context.Context, bool) error { return errNoServer }
func (s sqliteDB) restartNote() string                 { return "SQLite has no server" }
func (s sqliteDB) close() error {
	return errors.Join(os.Remove(s.path), ignoreMissing(os.Remove(s.path+"-wal")), ignoreMissing(os.Remove(s.path+"-shm")))
}

func ignoreMissing(err error) error {
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	return err
}

// givenDB is a database given by DSN (the command's --dsn): not the run's own, so it is
// never restarted nor removed (the run drops its business table and
// deletes its ledger entries at the end). The proxy between the replicas
// and the server is used when the server is on loopback (the proxy
// forwards nowhere else).
type givenDB struct {
	dsn, host string // host: the DSN's host:port, "" for SQLite or when not on loopback
	display   string
}

// newGivenDB reads the server's address from dsn: a postgres:// or
// mysql:// URL's host, or go-sql-driver's tcp(host:port). display names
// the database in the report and the progress lines, without its
// password: the command that took dsn makes it.
func newGivenDB(dsn, display string) *givenDB {
	g := &givenDB{dsn: dsn, display: display}
	host := ""
	if i := strings.Index(dsn, "@tcp("); i >= 0 {
		if j := strings.IndexByte(dsn[i:], ')'); j > 0 {
			host = dsn[i+len("@tcp(") : i+j]
		}
	} else if u, err := url.Parse(dsn); err == nil && u.Host != "" && (u.Scheme != "sqlite" && u.Scheme != "file") {
		host = u.Host
	}
	if host != "" && faultproxy.CheckLoopback(host) == nil && strings.Count(dsn, host) == 1 {
		g.host = host
	}
	return g
}

func (g *givenDB) label() string     { return g.display }
func (g *givenDB) directDSN() string { return g.dsn }
func (g *givenDB) addrs() []string {
	if g.host == "" {
		return nil
	}
	return []string{g.host}
}
func (g *givenDB) driver() string { return "" }
func (g *givenDB) replicaDSN(via []string) string {
	if len(via) == 0 || g.host == "" {
		return g.dsn
	}
	return strings.Replace(g.dsn, g.host, via[0], 1)
}
func (g *givenDB) restart(context.Context, bool) error { return errNoServer }
func (g *givenDB) restartNote() string                 { return "given with --dsn: never restarted" }
func (g *givenDB) close() error                        { return nil }
