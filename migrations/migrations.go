package migrations

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"time"

	"github.com/pressly/goose/v3"
	"github.com/pressly/goose/v3/database"

	"github.com/opledger/opledger/dialects"
	"github.com/opledger/opledger/internal/dialectkit"
	"github.com/opledger/opledger/internal/migrationfs"
	"github.com/opledger/opledger/internal/options"
)

var (
	// ErrNoMigrations is returned (wrapped) for a dialect that ships no
	// migrations: it does not implement dialects.Schema.
	ErrNoMigrations = migrationfs.ErrNoMigrations
	// ErrInvalidConfig is returned (wrapped) by New for a nil database or
	// dialect, or a bad option.
	ErrInvalidConfig = errors.New("migrations: invalid configuration")
)

// Export writes d's migrations with table rendered in into dir (created
// if missing), for users of other migration tools, and returns the paths
// written. Existing files of the same name are overwritten.
func Export(dir string, d dialects.Dialect, table string) ([]string, error) {
	fsys, err := migrationfs.Files(d, table)
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("migrations: %w", err)
	}
	names, err := fs.Glob(fsys, "*.sql")
	if err != nil {
		return nil, fmt.Errorf("migrations: %w", err)
	}
	var written []string
	for _, n := range names {
		data, err := fs.ReadFile(fsys, n)
		if err != nil {
			return written, fmt.Errorf("migrations: %w", err)
		}
		p := filepath.Join(dir, n)
		if err := os.WriteFile(p, data, 0o644); err != nil {
			return written, fmt.Errorf("migrations: %w", err)
		}
		written = append(written, p)
	}
	return written, nil
}

// Option configures a Migrator; the With functions build them. Giving
// the same option twice is an error.
type Option struct{ o options.Option[config] }

type config struct{ table string }

// WithTable sets the ledger table to create (default
// "opledger_operations", ledger.DefaultTable). The version table is the
// table's name followed by "_db_version".
func WithTable(name string) Option {
	return Option{options.New("WithTable", func(c *config) error {
		if err := dialectkit.CheckTableName(name); err != nil {
			return err
		}
		c.table = name
		return nil
	})}
}

// Migrator applies the ledger's migrations to one database.
type Migrator struct {
	db     *sql.DB
	name   string // the dialect's
	goose  goose.Dialect
	fsys   fs.FS
	lock   dialects.SessionLocker // nil: none
	txLock bool                   // the lock is a transaction (savepoints inside)
	table  string
	quote  func(string) string // the dialect's QuoteIdent
}

// New returns a Migrator for db with d's migrations.
//
// Every method takes the dialect's migration lock (dialects.Migrations'
// Lock) on a connection of db first, before goose reads or creates
// anything, and runs goose on that same session: so concurrent Migrators
// of one table, in any process, run one after the other, each finding the
// version table either absent or complete, and a pool of one connection
// is enough.
func New(db *sql.DB, d dialects.Dialect, opts ...Option) (*Migrator, error) {
	if db == nil || d == nil {
		return nil, fmt.Errorf("%w: db and dialect must not be nil", ErrInvalidConfig)
	}
	cfg := config{table: dialectkit.DefaultTable}
	if err := options.Apply(&cfg, opts, func(o Option) options.Option[config] { return o.o }); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalidConfig, err)
	}
	sc, err := migrationfs.Schema(d)
	if err != nil {
		return nil, err
	}
	fsys, err := migrationfs.Render(d, sc.FS, cfg.table)
	if err != nil {
		return nil, err
	}
	m := &Migrator{db: db, name: d.Name(), goose: goose.Dialect(sc.Goose), fsys: fsys, table: cfg.table, quote: d.QuoteIdent}
	if sc.Lock != nil {
		m.lock = sc.Lock(cfg.table)
		m.txLock = m.lock != nil && sc.LockIsTransaction
	}
	// A provider on db, never used, checks the files and the dialect now.
	if _, err := m.provider(db); err != nil {
		return nil, err
	}
	return m, nil
}

// provider returns a goose provider of m's migrations on db.
func (m *Migrator) provider(db *sql.DB) (*goose.Provider, error) {
	p, err := goose.NewProvider(m.goose, db, m.fsys,
		goose.WithDisableGlobalRegistry(true),
		goose.WithTableName(migrationfs.VersionTable(m.table)),
	)
	if err != nil {
		return nil, fmt.Errorf("migrations: %w", err)
	}
	return p, nil
}

// locked runs f with a goose provider on one session of m's database that
// holds the migration lock (when the dialect has one) from before goose
// touches anything until f returns, and with a *sql.DB on that session.
func (m *Migrator) locked(ctx context.Context, f func(p *goose.Provider, db *sql.DB) error) (err error) {
	conn, err := m.db.Conn(ctx)
	if err != nil {
		return wrap(err)
	}
	defer conn.Close()
	if m.lock != nil {
		if err := m.lock.SessionLock(ctx, conn); err != nil {
			return wrap(err)
		}
		defer func() {
			if uerr := m.lock.SessionUnlock(context.WithoutCancel(ctx), conn); uerr != nil {
				err = errors.Join(err, wrap(uerr))
			}
		}()
	}
	return onConn(conn, m.txLock, func(db *sql.DB) error {
		p, err := m.provider(db)
		if err != nil {
			return err
		}
		return wrap(f(p, db))
	})
}

// MigrationResult is one migration applied or rolled back.
type MigrationResult struct {
	Version   int64
	Name      string
	Direction string // "up" or "down"
	Duration  time.Duration
}

// Status is one migration's state in the database.
type Status struct {
	Version   int64
	Name      string
	Applied   bool
	AppliedAt time.Time // zero when pending
}

// Up applies every pending migration. With none pending it does nothing
// and returns no results.
//
// A set-up is all or nothing: when Up starts on a database where none of
// the migrations is applied (no version table, or one at version 0) and a
// migration fails, Up undoes what it did before returning the error: it
// rolls back the migrations it applied (their Down sections) and drops the
// version table if it created it, so that nothing of the ledger is left
// behind (MySQL and TiDB commit each DDL statement at once, so a failed
// migration would otherwise leave the tables before it). The error says
// so, or, if undoing failed too, says that as well. An upgrade (some
// migrations applied already) that fails keeps what it applied, as goose
// does: the migrations recorded are the ones in force.
func (m *Migrator) Up(ctx context.Context) ([]MigrationResult, error) {
	var rs []*goose.MigrationResult
	err := m.locked(ctx, func(p *goose.Provider, db *sql.DB) (err error) {
		fresh, hadVersionTable, err := m.startState(ctx, p, db)
		if err != nil {
			return err
		}
		rs, err = p.Up(ctx)
		if err != nil && fresh {
			rs = nil
			return m.undoSetUp(ctx, p, db, hadVersionTable, err)
		}
		return err
	})
	return results(rs), err
}

// undoLimit bounds the undoing of a failed set-up, which runs even when
// the caller's context has ended.
const undoLimit = 2 * time.Minute

// startState reports, on the locked session, whether none of the
// migrations is applied (fresh) and whether the version table exists,
// without creating it.
func (m *Migrator) startState(ctx context.Context, p *goose.Provider, db *sql.DB) (fresh, versionTable bool, err error) {
	versionTable, err = m.versionTableExists(ctx, db)
	if err != nil {
		return false, false, err
	}
	if !versionTable {
		return true, false, nil
	}
	v, err := p.GetDBVersion(ctx)
	if err != nil {
		return false, true, err
	}
	return v == 0, true, nil
}

// versionTableExists asks goose's store for the dialect whether the
// version table exists, or, for a dialect whose store cannot tell
// (SQLite), reads no rows from it.
func (m *Migrator) versionTableExists(ctx context.Context, db *sql.DB) (bool, error) {
	if st, err := database.NewStore(database.Dialect(m.goose), migrationfs.VersionTable(m.table)); err == nil {
		if ex, ok := st.(interface {
			TableExists(context.Context, database.DBTxConn) (bool, error)
		}); ok {
			exists, err := ex.TableExists(ctx, db)
			if !errors.Is(err, errors.ErrUnsupported) {
				return exists, err
			}
		}
	}
	if err := ctx.Err(); err != nil {
		return false, err
	}
	rows, err := db.QueryContext(ctx, "SELECT 1 FROM "+m.quote(migrationfs.VersionTable(m.table))+" WHERE 1 = 0")
	if err != nil {
		return false, nil
	}
	return true, rows.Close()
}

// undoSetUp undoes a set-up that failed with cause: the Down sections of
// the migrations it applied, and the version table when it was not there
// before. A migration that failed half-way (MySQL runs its statements one
// by one) is not recorded, so its Down does not run: its changes went to
// the tables of the migrations before it, which their Down sections drop.
func (m *Migrator) undoSetUp(ctx context.Context, p *goose.Provider, db *sql.DB, hadVersionTable bool, cause error) error {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), undoLimit)
	defer cancel()
	// Undo only what this run applied: should the database hold a
	// migration this run did not apply (the start state was misread), the
	// set-up was no set-up, and nothing is rolled back.
	ran := map[int64]bool{}
	var pe *goose.PartialError
	if errors.As(cause, &pe) {
		for _, r := range pe.Applied {
			ran[r.Source.Version] = true
		}
	}
	ss, err := p.Status(ctx)
	if err != nil {
		return fmt.Errorf("%w; the set-up was not undone (its state could not be read: %w)", cause, err)
	}
	for _, st := range ss {
		if st.State == goose.StateApplied && !ran[st.Source.Version] {
			return fmt.Errorf("%w (not undone: migration %d was applied before)", cause, st.Source.Version)
		}
	}
	_, err = p.DownTo(ctx, 0)
	if err == nil && !hadVersionTable {
		_, err = db.ExecContext(ctx, "DROP TABLE "+m.quote(migrationfs.VersionTable(m.table)))
	}
	if err != nil {
		return fmt.Errorf("%w; undoing the set-up failed too, so tables of %s may be left behind: %w", cause, m.table, err)
	}
	return fmt.Errorf("%w (the set-up was undone: the database is as it was before)", cause)
}

// Down rolls back every applied migration, removing the ledger table.
// The version table stays, recording version 0.
func (m *Migrator) Down(ctx context.Context) ([]MigrationResult, error) {
	var rs []*goose.MigrationResult
	err := m.locked(ctx, func(p *goose.Provider, _ *sql.DB) (err error) {
		rs, err = p.DownTo(ctx, 0)
		return err
	})
	return results(rs), err
}

// Status lists every migration and whether it is applied.
func (m *Migrator) Status(ctx context.Context) ([]Status, error) {
	var ss []*goose.MigrationStatus
	if err := m.locked(ctx, func(p *goose.Provider, _ *sql.DB) (err error) {
		ss, err = p.Status(ctx)
		return err
	}); err != nil {
		return nil, err
	}
	out := make([]Status, 0, len(ss))
	for _, s := range ss {
		st := Status{Version: s.Source.Version, Name: path.Base(s.Source.Path), Applied: s.State == goose.StateApplied}
		if st.Applied {
			st.AppliedAt = s.AppliedAt
		}
		out = append(out, st)
	}
	return out, nil
}

func results(rs []*goose.MigrationResult) []MigrationResult {
	out := make([]MigrationResult, 0, len(rs))
	for _, r := range rs {
		if r == nil || r.Source == nil {
			continue
		}
		out = append(out, MigrationResult{Version: r.Source.Version, Name: path.Base(r.Source.Path), Direction: r.Direction, Duration: r.Duration})
	}
	return out
}

func wrap(err error) error {
	if err == nil {
		return nil
	}
	return fmt.Errorf("migrations: %w", err)
}
