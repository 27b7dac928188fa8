package conformance

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"io/fs"
	"net/url"
	"reflect"
	"sort"
	"strings"
	"time"

	"github.com/opledger/opledger/dialects"
	"github.com/opledger/opledger/ledger"
	"github.com/opledger/opledger/migrations"
)

// Target is one database and one ledger implementation to run the suite
// against.
type Target struct {
	// Name labels the target in reports ("postgres/pgx", "sqlite").
	Name string
	// DB is the pool the suite runs on. It should allow at least
	// concurrency+2 open connections; with fewer, the cases lower the
	// concurrency to fit and say so.
	DB *sql.DB
	// Dialect is the database's dialect. The suite uses its name to pick
	// placeholder syntax and database-specific set-up, its QuoteIdent for
	// scratch tables and its Classify to recognise retryable errors.
	Dialect dialects.Dialect
	// NewLedger constructs the ledger under test for one case. It must use
	// cfg's table, retention, clock and result size limit.
	NewLedger func(cfg LedgerConfig) (ledger.Ledger, error)
	// Setup creates the ledger table for one case and returns how to drop
	// it. When nil the suite runs the Up sections of the kit's migrations
	// (package migrations, rendered for the table name) and their Down
	// sections afterwards.
	Setup func(ctx context.Context, db *sql.DB, table string) (teardown func(context.Context) error, err error)
	// Capabilities gate the cases that need them.
	Capabilities Capabilities
}

// LedgerConfig is what a case asks of the ledger under test.
type LedgerConfig struct {
	// Table is the case's scratch table, already migrated.
	Table string
	// Retention is how long an entry lives after its claim.
	Retention time.Duration
	// Clock replaces time.Now; the expiry cases move it forward.
	Clock func() time.Time
	// MaxResultSize is the longest Result.Response the ledger must accept;
	// one byte more must be refused with ledger.ErrInvalid.
	MaxResultSize int
}

// Capabilities say what the target offers. Cases that need a missing
// capability skip with a reason.
type Capabilities struct {
	// Levels are the isolation levels to test, the first being the one
	// single-level cases use. Empty means sql.LevelDefault only.
	Levels []sql.IsolationLevel
	// KillConnections means the suite may terminate a backend in the
	// middle of a transaction (PostgreSQL pg_terminate_backend, MySQL
	// KILL). The database user needs the right to do so.
	KillConnections bool
	// BeginBounded begins a transaction whose lock waits end after about
	// half a second (at most one second) with an error the ledger reports
	// as ledger.ErrInProgress, and returns a function that releases
	// whatever it set up, called after the transaction ends. When nil, the
	// dialect's dialects.LockWaiter bounds the wait at 0.5 s (PostgreSQL
	// SET LOCAL lock_timeout; MySQL innodb_lock_wait_timeout, whole
	// seconds, on a dedicated connection, restored afterwards); for
	// "sqlite" a second, deferred pool with busy_timeout 500 on the same
	// file is used, so that the claim, not BEGIN, waits. Dialects with
	// neither skip the in-progress case.
	BeginBounded func(ctx context.Context, db *sql.DB) (*sql.Tx, func(), error)
}

// Sweeper is implemented by ledgers that can delete expired entries, as
// *ledger.Store does. The delete-race and sweep-under-load cases need it
// and skip without it.
type Sweeper interface {
	// Sweep deletes expired entries through db, at most batch per
	// statement, and returns how many it deleted.
	Sweep(ctx context.Context, db ledger.Execer, batch int) (int64, error)
}

// StoreTarget returns a Target that runs the suite against the kit's own
// *ledger.Store on db, with the default capabilities for d (see
// [DefaultCapabilities]). Extra options are applied after the suite's
// table, retention, clock and size limit.
func StoreTarget(name string, db *sql.DB, d dialects.Dialect, opts ...ledger.Option) Target {
	return Target{
		Name:    name,
		DB:      db,
		Dialect: d,
		NewLedger: func(cfg LedgerConfig) (ledger.Ledger, error) {
			return ledger.New(d, append([]ledger.Option{
				ledger.WithTable(cfg.Table),
				ledger.WithRetention(cfg.Retention),
				ledger.WithClock(cfg.Clock),
				ledger.WithMaxResultSize(cfg.MaxResultSize),
			}, opts...)...)
		},
		Capabilities: DefaultCapabilities(d),
	}
}

// DefaultCapabilities returns what the suite assumes of a database family
// by dialect name: PostgreSQL offers READ COMMITTED, REPEATABLE READ and
// SERIALIZABLE and can kill backends; MySQL offers REPEATABLE READ (its
// default) and READ COMMITTED and can kill connections; SQLite (and
// anything else) runs at the default level only.
func DefaultCapabilities(d dialects.Dialect) Capabilities {
	name := ""
	if d != nil {
		name = d.Name()
	}
	switch name {
	case "postgres":
		return Capabilities{
			Levels:          []sql.IsolationLevel{sql.LevelReadCommitted, sql.LevelRepeatableRead, sql.LevelSerializable},
			KillConnections: true,
		}
	case "mysql":
		return Capabilities{
			Levels:          []sql.IsolationLevel{sql.LevelRepeatableRead, sql.LevelReadCommitted},
			KillConnections: true,
		}
	}
	return Capabilities{Levels: []sql.IsolationLevel{sql.LevelDefault}}
}

func (tg *Target) validate() error {
	switch {
	case tg.DB == nil:
		return errors.New("conformance: target has no DB")
	case tg.Dialect == nil:
		return errors.New("conformance: target has no dialect")
	case tg.NewLedger == nil:
		return errors.New("conformance: target has no NewLedger")
	}
	return nil
}

func (tg *Target) levels() []sql.IsolationLevel {
	if len(tg.Capabilities.Levels) == 0 {
		return []sql.IsolationLevel{sql.LevelDefault}
	}
	return tg.Capabilities.Levels
}

// setup creates the scratch table: the target's Setup hook, or the
// kit's migrations rendered for the table name. The Up sections run
// directly, without goose's version table or its advisory lock: the table
// name is unique to the case, so nothing else can be migrating it, and the
// lock (shared by every opledger migration on the server) would make cases
// wait on unrelated migrations.
func (tg *Target) setup(ctx context.Context, table string) (func(context.Context) error, error) {
	if tg.Setup != nil {
		return tg.Setup(ctx, tg.DB, table)
	}
	up, down, err := scratchSQL(tg.Dialect.Name(), table)
	if err != nil {
		return nil, err
	}
	if up == nil {
		return tg.setupWithGoose(ctx, table)
	}
	for _, stmt := range up {
		if _, err := tg.DB.ExecContext(ctx, stmt); err != nil {
			return nil, fmt.Errorf("%w (in %q)", err, firstLine(stmt))
		}
	}
	return func(ctx context.Context) error {
		for _, stmt := range down {
			if _, err := tg.DB.ExecContext(ctx, stmt); err != nil {
				return err
			}
		}
		return nil
	}, nil
}

// scratchSQL returns the statements of every migration's Up section in
// order and of every Down section in reverse order. It returns nil
// statements when a file needs goose's own parser (StatementBegin blocks).
func scratchSQL(dialect, table string) (up, down []string, err error) {
	fsys, err := migrations.Files(dialect, table)
	if err != nil {
		return nil, nil, err
	}
	names, err := fs.Glob(fsys, "*.sql")
	if err != nil {
		return nil, nil, err
	}
	sort.Strings(names)
	for _, n := range names {
		b, err := fs.ReadFile(fsys, n)
		if err != nil {
			return nil, nil, err
		}
		src := string(b)
		if strings.Contains(src, "+goose StatementBegin") || strings.Contains(src, "+goose NO TRANSACTION") {
			return nil, nil, nil
		}
		_, rest, ok := strings.Cut(src, "-- +goose Up")
		if !ok {
			return nil, nil, fmt.Errorf("migration %s has no Up section", n)
		}
		u, d, _ := strings.Cut(rest, "-- +goose Down")
		up = append(up, statements(u)...)
		down = append(statements(d), down...)
	}
	return up, down, nil
}

// statements splits SQL into statements at semicolons that end a line,
// dropping comment lines.
func statements(src string) []string {
	var out []string
	var cur strings.Builder
	for _, line := range strings.Split(src, "\n") {
		trimmed := strings.TrimSpace(line)
		if trimmed == "" || strings.HasPrefix(trimmed, "--") {
			continue
		}
		cur.WriteString(line)
		cur.WriteString("\n")
		if strings.HasSuffix(trimmed, ";") {
			out = append(out, strings.TrimSpace(cur.String()))
			cur.Reset()
		}
	}
	if s := strings.TrimSpace(cur.String()); s != "" {
		out = append(out, s)
	}
	return out
}

func firstLine(s string) string {
	l, _, _ := strings.Cut(s, "\n")
	return l
}

// setupWithGoose applies the migrations through package migrations.
func (tg *Target) setupWithGoose(ctx context.Context, table string) (func(context.Context) error, error) {
	m, err := migrations.New(tg.DB, tg.Dialect, migrations.WithTable(table))
	if err != nil {
		return nil, err
	}
	if _, err := m.Up(ctx); err != nil {
		return nil, err
	}
	return func(ctx context.Context) error {
		_, err := m.Down(ctx)
		if _, derr := tg.DB.ExecContext(ctx, "DROP TABLE "+tg.Dialect.QuoteIdent(migrations.VersionTable(table))); err == nil {
			err = derr
		}
		return err
	}, nil
}

// boundedWait is the lock-wait bound of the in-progress case.
const boundedWait = 500 * time.Millisecond

// beginBounded returns the target's bounded-wait transaction starter, or
// a reason why there is none.
func (tg *Target) beginBounded() (func(context.Context, *sql.DB) (*sql.Tx, func(), error), string) {
	if tg.Capabilities.BeginBounded != nil {
		return tg.Capabilities.BeginBounded, ""
	}
	if tg.Dialect.Name() == "sqlite" {
		// SQLite's LockWaiter bounds BEGIN IMMEDIATE, not the claim.
		return beginBoundedSQLite, ""
	}
	if lw, ok := tg.Dialect.(dialects.LockWaiter); ok {
		return func(ctx context.Context, db *sql.DB) (*sql.Tx, func(), error) {
			return beginLockWaiter(ctx, db, lw)
		}, ""
	}
	return nil, fmt.Sprintf("dialect %q cannot bound a lock wait (no dialects.LockWaiter): set Capabilities.BeginBounded", tg.Dialect.Name())
}

// beginLockWaiter begins a transaction bounded through the dialect's
// LockWaiter: after BEGIN for a transaction-scoped bound (PostgreSQL SET
// LOCAL lock_timeout), on a dedicated connection before BEGIN for a
// session-scoped one (MySQL innodb_lock_wait_timeout, restored when the
// transaction is over; a connection whose setting cannot be restored is
// discarded).
func beginLockWaiter(ctx context.Context, db *sql.DB, lw dialects.LockWaiter) (*sql.Tx, func(), error) {
	if lw.LockWaitScope() == dialects.LockWaitTransaction {
		tx, err := db.BeginTx(ctx, nil)
		if err != nil {
			return nil, nil, err
		}
		if _, err := lw.BoundLockWait(ctx, tx, boundedWait); err != nil {
			tx.Rollback()
			return nil, nil, err
		}
		return tx, func() {}, nil
	}
	conn, err := db.Conn(ctx)
	if err != nil {
		return nil, nil, err
	}
	restore, err := lw.BoundLockWait(ctx, conn, boundedWait)
	if err != nil {
		conn.Raw(func(any) error { return driver.ErrBadConn })
		conn.Close()
		return nil, nil, err
	}
	release := func() {
		if restore != nil {
			rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
			defer cancel()
			if err := restore(rctx); err != nil {
				conn.Raw(func(any) error { return driver.ErrBadConn })
			}
		}
		conn.Close()
	}
	tx, err := conn.BeginTx(ctx, nil)
	if err != nil {
		release()
		return nil, nil, err
	}
	return tx, release, nil
}

// beginBoundedSQLite opens a second pool on the same file, with deferred
// transactions and a 500 ms busy timeout, through the target pool's own
// driver: the claim is the transaction's first statement, so SQLite's busy
// handler does the waiting and gives up after half a second.
func beginBoundedSQLite(ctx context.Context, db *sql.DB) (*sql.Tx, func(), error) {
	var file string
	if err := db.QueryRowContext(ctx, "SELECT file FROM pragma_database_list WHERE name = 'main'").Scan(&file); err != nil {
		return nil, nil, err
	}
	if file == "" {
		return nil, nil, errors.New("the SQLite database is in memory: a second connection cannot reach it")
	}
	drv := db.Driver()
	q := url.Values{}
	if strings.Contains(reflect.TypeOf(drv).String(), "sqlite3.") { // mattn/go-sqlite3
		q.Set("_journal_mode", "WAL")
		q.Set("_busy_timeout", "500")
		q.Set("_txlock", "deferred")
	} else { // modernc.org/sqlite
		q.Add("_pragma", "busy_timeout(500)")
		q.Add("_pragma", "journal_mode(WAL)")
		q.Set("_txlock", "deferred")
	}
	dsn := "file:" + strings.NewReplacer("%", "%25", "?", "%3f", "#", "%23").Replace(file) + "?" + q.Encode()
	var short *sql.DB
	if dc, ok := drv.(driver.DriverContext); ok {
		c, err := dc.OpenConnector(dsn)
		if err != nil {
			return nil, nil, err
		}
		short = sql.OpenDB(c)
	} else {
		short = sql.OpenDB(dsnConnector{dsn: dsn, d: drv})
	}
	short.SetMaxOpenConns(1)
	tx, err := short.BeginTx(ctx, nil)
	if err != nil {
		short.Close()
		return nil, nil, err
	}
	return tx, func() { short.Close() }, nil
}

type dsnConnector struct {
	dsn string
	d   driver.Driver
}

func (c dsnConnector) Connect(context.Context) (driver.Conn, error) { return c.d.Open(c.dsn) }
func (c dsnConnector) Driver() driver.Driver                        { return c.d }
