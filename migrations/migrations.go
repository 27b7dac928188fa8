// Package migrations creates and removes the ledger's table with goose.
//
// The SQL files live under migrations/<dialect>/ and are embedded. Their
// table name is a template parameter, so one set of files serves any table
// name the ledger is configured with. They run through goose's Provider
// with the kit's own version table (never the application's
// goose_db_version), without goose's global registry, and on PostgreSQL
// under a session advisory lock with the kit's own lock id. Users of other
// migration tools can [Export] the rendered files instead.
package migrations

import (
	"bytes"
	"context"
	"database/sql"
	"embed"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"sort"
	"strings"
	"testing/fstest"
	"text/template"
	"time"

	"github.com/pressly/goose/v3"
	"github.com/pressly/goose/v3/lock"

	"github.com/opledger/opledger/dialects"
)

//go:embed postgres/*.sql sqlite/*.sql mysql/*.sql
var embedded embed.FS

// LockID is the PostgreSQL advisory lock id the kit's migrations take
// ("opledger" in ASCII), distinct from goose's default.
const LockID int64 = 0x6f706c6564676572

// DefaultTable is the ledger's default table, as in package ledger.
const DefaultTable = "opledger_operations"

// ErrUnknownDialect is returned (wrapped) for a dialect with no migrations.
var ErrUnknownDialect = errors.New("migrations: no migrations for dialect")

// known maps a dialect name to its identifier quoting and goose dialect.
// The quoting is repeated here (it matches each dialect's QuoteIdent,
// which a test checks) so that importing migrations never links a driver:
// the MySQL dialect imports go-sql-driver/mysql for its error type.
var known = map[string]struct {
	quote func(string) string
	g     goose.Dialect
}{
	"postgres": {doubleQuote, goose.DialectPostgres},
	"sqlite":   {doubleQuote, goose.DialectSQLite3},
	"mysql":    {backQuote, goose.DialectMySQL},
}

func doubleQuote(s string) string { return `"` + strings.ReplaceAll(s, `"`, `""`) + `"` }

func backQuote(s string) string { return "`" + strings.ReplaceAll(s, "`", "``") + "`" }

// Dialects lists the dialect names that have migrations.
func Dialects() []string {
	names := make([]string, 0, len(known))
	for n := range known {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// VersionTable returns the goose version table used for a ledger table:
// the table's name followed by "_db_version".
func VersionTable(table string) string { return table + "_db_version" }

// Files returns the migrations for dialect with table rendered in, as a
// file system of NNNNN_name.sql files at its root.
func Files(dialect, table string) (fs.FS, error) {
	k, ok := known[dialect]
	if !ok {
		return nil, fmt.Errorf("%w %q (have %s)", ErrUnknownDialect, dialect, strings.Join(Dialects(), ", "))
	}
	if err := dialects.CheckTableName(table); err != nil {
		return nil, fmt.Errorf("migrations: %w", err)
	}
	entries, err := fs.ReadDir(embedded, dialect)
	if err != nil {
		return nil, fmt.Errorf("migrations: %w", err)
	}
	vars := templateVars{quote: k.quote, table: table}
	out := fstest.MapFS{}
	for _, e := range entries {
		src, err := fs.ReadFile(embedded, path.Join(dialect, e.Name()))
		if err != nil {
			return nil, fmt.Errorf("migrations: %w", err)
		}
		t, err := template.New(e.Name()).Option("missingkey=error").Parse(string(src))
		if err != nil {
			return nil, fmt.Errorf("migrations: %s: %w", e.Name(), err)
		}
		var buf bytes.Buffer
		if err := t.Execute(&buf, vars); err != nil {
			return nil, fmt.Errorf("migrations: %s: %w", e.Name(), err)
		}
		out[e.Name()] = &fstest.MapFile{Data: buf.Bytes(), Mode: 0o644}
	}
	return out, nil
}

type templateVars struct {
	quote func(string) string
	table string
}

// Table is the quoted table name.
func (v templateVars) Table() string { return v.quote(v.table) }

// Ident is a quoted name derived from the table: "<table>_<suffix>".
func (v templateVars) Ident(suffix string) string { return v.quote(v.table + "_" + suffix) }

// Export writes the rendered migrations for dialect and table into dir
// (created if missing) for users of other migration tools, and returns the
// paths written. Existing files of the same name are overwritten.
func Export(dir, dialect, table string) ([]string, error) {
	fsys, err := Files(dialect, table)
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

// Option configures a Migrator.
type Option func(*config)

type config struct{ table string }

// WithTable sets the ledger table to create (default "opledger_operations").
// The version table is VersionTable(name).
func WithTable(name string) Option { return func(c *config) { c.table = name } }

// Migrator applies the ledger's migrations to one database.
type Migrator struct {
	p     *goose.Provider
	table string
}

// New returns a Migrator for db in dialect d.
func New(db *sql.DB, d dialects.Dialect, opts ...Option) (*Migrator, error) {
	if db == nil || d == nil {
		return nil, errors.New("migrations: db and dialect must not be nil")
	}
	dialect := d.Name()
	cfg := config{table: DefaultTable}
	for _, o := range opts {
		if o != nil {
			o(&cfg)
		}
	}
	fsys, err := Files(dialect, cfg.table)
	if err != nil {
		return nil, err
	}
	popts := []goose.ProviderOption{
		goose.WithDisableGlobalRegistry(true),
		goose.WithTableName(VersionTable(cfg.table)),
	}
	if dialect == "postgres" {
		// Retry the advisory lock every second (goose's default is every
		// 5 s) for up to 5 minutes, so concurrent migrations of different
		// ledger tables do not stall each other for long.
		locker, err := lock.NewPostgresSessionLocker(lock.WithLockID(LockID), lock.WithLockTimeout(1, 300))
		if err != nil {
			return nil, fmt.Errorf("migrations: %w", err)
		}
		popts = append(popts, goose.WithSessionLocker(locker))
	}
	if dialect == "mysql" {
		// A named lock, not goose's goose_lock table: see mysqlLocker.
		popts = append(popts, goose.WithSessionLocker(newMySQLLocker(cfg.table)))
	}
	p, err := goose.NewProvider(known[dialect].g, db, fsys, popts...)
	if err != nil {
		return nil, fmt.Errorf("migrations: %w", err)
	}
	return &Migrator{p: p, table: cfg.table}, nil
}

// Table returns the ledger table this Migrator manages.
func (m *Migrator) Table() string { return m.table }

// Result is one migration applied or rolled back.
type Result struct {
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
func (m *Migrator) Up(ctx context.Context) ([]Result, error) {
	rs, err := m.p.Up(ctx)
	return results(rs), wrap(err)
}

// Down rolls back every applied migration, removing the ledger table.
// The version table stays, recording version 0.
func (m *Migrator) Down(ctx context.Context) ([]Result, error) {
	rs, err := m.p.DownTo(ctx, 0)
	return results(rs), wrap(err)
}

// Status lists every migration and whether it is applied.
func (m *Migrator) Status(ctx context.Context) ([]Status, error) {
	ss, err := m.p.Status(ctx)
	if err != nil {
		return nil, wrap(err)
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

// HasPending reports whether any migration is not yet applied.
func (m *Migrator) HasPending(ctx context.Context) (bool, error) {
	ok, err := m.p.HasPending(ctx)
	return ok, wrap(err)
}

func results(rs []*goose.MigrationResult) []Result {
	out := make([]Result, 0, len(rs))
	for _, r := range rs {
		if r == nil || r.Source == nil {
			continue
		}
		out = append(out, Result{Version: r.Source.Version, Name: path.Base(r.Source.Path), Direction: r.Direction, Duration: r.Duration})
	}
	return out
}

func wrap(err error) error {
	if err == nil {
		return nil
	}
	return fmt.Errorf("migrations: %w", err)
}
