package migrations_test

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"errors"
	"io/fs"
	"math/big"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"testing/fstest"
	"time"

	"github.com/opledger/opledger/dialects"
	"github.com/opledger/opledger/dialects/mysql"
	"github.com/opledger/opledger/dialects/postgres"
	"github.com/opledger/opledger/internal/dialectkit"
	"github.com/opledger/opledger/internal/migrationfs"
	"github.com/opledger/opledger/internal/sqlitedialect"
	"github.com/opledger/opledger/internal/testkit/testdb"
	"github.com/opledger/opledger/migrations"
)

// kitDialects are the dialects that ship migrations.
var kitDialects = []dialects.Dialect{postgres.New(), mysql.New(), sqlitedialect.New()}

func uniqueTable(prefix string) string {
	var b [4]byte
	_, _ = rand.Read(b[:])
	return prefix + hex.EncodeToString(b[:])
}

// TestUpDownCycle: up, up again (no-op), status, down, up, on every
// target; an application's own goose_db_version is left untouched. The
// targets run one after another: the two PostgreSQL drivers share the
// server's goose_db_version.
func TestUpDownCycle(t *testing.T) {
	testdb.ParallelOn(t, map[string]int{"postgres": 4, "mysql": 4})
	for _, tg := range testdb.Targets() {
		t.Run(tg.Name, func(t *testing.T) {
			ctx := context.Background()
			db := tg.Open(t, 4)
			d := tg.Dialect
			// The application's own goose history, which must survive.
			appTable := "goose_db_version"
			rowID, err := rand.Int(rand.Reader, big.NewInt(1<<30))
			if err != nil {
				t.Fatal(err)
			}
			appRow := 1<<30 + rowID.Int64()
			if _, err := db.ExecContext(ctx, "CREATE TABLE IF NOT EXISTS "+d.QuoteIdent(appTable)+" (id INTEGER, version_id BIGINT, is_applied BOOLEAN)"); err != nil {
				t.Fatal(err)
			}
			if _, err := db.ExecContext(ctx, "INSERT INTO "+d.QuoteIdent(appTable)+" (id, version_id, is_applied) VALUES ("+d.Placeholder(1)+", 7, TRUE)", appRow); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() {
				db.ExecContext(context.Background(), "DELETE FROM "+d.QuoteIdent(appTable)+" WHERE id = "+d.Placeholder(1), appRow)
			})

			table := uniqueTable("opl_migr_")
			m, err := migrations.New(db, d, migrations.WithTable(table))
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() {
				ctx := context.Background()
				m.Down(ctx)
				db.ExecContext(ctx, "DROP TABLE IF EXISTS "+d.QuoteIdent(migrationfs.VersionTable(table)))
			})
			count := func(q string, args ...any) int {
				t.Helper()
				var n int
				if err := db.QueryRowContext(ctx, q, args...).Scan(&n); err != nil {
					t.Fatalf("%s: %v", q, err)
				}
				return n
			}
			rows := "SELECT COUNT(*) FROM " + d.QuoteIdent(table)

			pending, err := hasPending(ctx, m)
			if err != nil || !pending {
				t.Fatalf("pending before up: %v %v", pending, err)
			}
			rs, err := m.Up(ctx)
			if err != nil || len(rs) != 5 || rs[0].Direction != "up" || rs[0].Version != 1 || rs[0].Name != "00001_create_operations.sql" ||
				rs[1].Version != 2 || rs[1].Name != "00002_create_outbox.sql" || rs[2].Version != 3 || rs[2].Name != "00003_outbox_dead.sql" || rs[3].Name != "00004_operations_born_at.sql" || rs[4].Name != "00005_operations_partitioned.sql" {
				t.Fatalf("up: %+v %v", rs, err)
			}
			if count(rows) != 0 {
				t.Fatal("new table not empty")
			}
			// 00003's dead state: a dead message goes down with its columns.
			ob := d.QuoteIdent(table + "_outbox")
			if _, err := db.ExecContext(ctx, "INSERT INTO "+ob+" (id, partition_key, topic, name, payload, created_at, attempts, last_error, dead_at) VALUES ("+
				strings.Join([]string{d.Placeholder(1), d.Placeholder(2), d.Placeholder(3), d.Placeholder(4), d.Placeholder(5), d.Placeholder(6), d.Placeholder(7), d.Placeholder(8), d.Placeholder(9)}, ", ")+")",
				make([]byte, 32), "k", "t", "n", []byte("p"), 1, 3, "refused", 2); err != nil {
				t.Fatalf("a dead message in the outbox: %v", err)
			}
			if n := count("SELECT COUNT(*) FROM " + ob + " WHERE dead_at IS NOT NULL AND attempts = 3"); n != 1 {
				t.Fatalf("%d dead messages, want 1", n)
			}
			rs, err = m.Up(ctx)
			if err != nil || len(rs) != 0 {
				t.Fatalf("second up: %+v %v, want a no-op", rs, err)
			}
			pending, err = hasPending(ctx, m)
			if err != nil || pending {
				t.Fatalf("pending after up: %v %v", pending, err)
			}
			st, err := m.Status(ctx)
			if err != nil || len(st) != 5 || !st[0].Applied || st[0].Name != "00001_create_operations.sql" || st[0].AppliedAt.IsZero() || !st[1].Applied {
				t.Fatalf("status: %+v %v", st, err)
			}
			rs, err = m.Down(ctx)
			if err != nil || len(rs) != 5 || rs[0].Direction != "down" {
				t.Fatalf("down: %+v %v", rs, err)
			}
			if _, err := db.ExecContext(ctx, rows); err == nil {
				t.Fatal("table still there after down")
			}
			if _, err := db.ExecContext(ctx, "SELECT COUNT(*) FROM "+d.QuoteIdent(table+"_outbox")); err == nil {
				t.Fatal("outbox table still there after down")
			}
			st, err = m.Status(ctx)
			if err != nil || st[0].Applied || !st[0].AppliedAt.IsZero() {
				t.Fatalf("status after down: %+v %v", st, err)
			}
			if _, err := m.Up(ctx); err != nil {
				t.Fatalf("up after down: %v", err)
			}
			if count(rows) != 0 {
				t.Fatal("table not recreated")
			}
			if n := count("SELECT COUNT(*) FROM "+d.QuoteIdent(appTable)+" WHERE id = "+d.Placeholder(1)+" AND version_id = 7", appRow); n != 1 {
				t.Fatalf("application's goose_db_version was touched: %d rows", n)
			}
		})
	}
}

func TestFilesAndExport(t *testing.T) {
	for _, d := range kitDialects {
		fsys, err := migrationfs.Files(d, "my_ops")
		if err != nil {
			t.Fatal(err)
		}
		b, err := fs.ReadFile(fsys, "00001_create_operations.sql")
		if err != nil {
			t.Fatal(err)
		}
		s := string(b)
		if !strings.Contains(s, "my_ops") || strings.Contains(s, "{{") || !strings.Contains(s, "-- +goose Up") || !strings.Contains(s, "-- +goose Down") {
			t.Fatalf("%s: badly rendered:\n%s", d.Name(), s)
		}
	}
	dir := t.TempDir()
	paths, err := migrations.Export(dir, postgres.New(), "ops")
	if err != nil || len(paths) != 5 || paths[0] != filepath.Join(dir, "00001_create_operations.sql") || paths[1] != filepath.Join(dir, "00002_create_outbox.sql") ||
		paths[2] != filepath.Join(dir, "00003_outbox_dead.sql") {
		t.Fatalf("export: %v %v", paths, err)
	}
	b, err := os.ReadFile(filepath.Join(dir, "00001_create_operations.sql"))
	if err != nil || !strings.Contains(string(b), `CREATE TABLE "ops"`) {
		t.Fatalf("exported: %s %v", b, err)
	}
	// Exporting again, for another dialect, overwrites the file.
	if _, err := migrations.Export(dir, mysql.New(), "ops"); err != nil {
		t.Fatal(err)
	}
	b, err = os.ReadFile(filepath.Join(dir, "00001_create_operations.sql"))
	if err != nil || !strings.Contains(string(b), "CREATE TABLE `ops`") {
		t.Fatalf("exported again: %s %v", b, err)
	}
}

// bracketed is SQLite with identifiers quoted in brackets (which SQLite
// also accepts): a dialect that wraps one of the kit's, as the dialects
// package documents, and brings its migrations along.
type bracketed struct{ sqlitedialect.Dialect }

func (bracketed) QuoteIdent(s string) string { return "[" + s + "]" }

// TestFilesUseDialectQuoting: each dialect's migrations are rendered with
// that dialect's QuoteIdent (the table and the names derived from it), so
// a dialect's files can never quote differently from its queries.
func TestFilesUseDialectQuoting(t *testing.T) {
	for _, d := range append(kitDialects, bracketed{}) {
		fsys, err := migrationfs.Files(d, "weird_Name")
		if err != nil {
			t.Fatal(err)
		}
		b, err := fs.ReadFile(fsys, "00001_create_operations.sql")
		if err != nil {
			t.Fatal(err)
		}
		s := string(b)
		if !strings.Contains(s, "CREATE TABLE "+d.QuoteIdent("weird_Name")+" (") || !strings.Contains(s, "DROP TABLE "+d.QuoteIdent("weird_Name")+";") {
			t.Fatalf("%T: table quoted differently from the dialect:\n%s", d, s)
		}
		if !strings.Contains(s, d.QuoteIdent("weird_Name_expires_idx")) {
			t.Fatalf("%T: index name quoted differently from the dialect:\n%s", d, s)
		}
		b, err = fs.ReadFile(fsys, "00002_create_outbox.sql")
		if err != nil {
			t.Fatal(err)
		}
		if s := string(b); !strings.Contains(s, "CREATE TABLE "+d.QuoteIdent("weird_Name_outbox")+" (") || !strings.Contains(s, "DROP TABLE "+d.QuoteIdent("weird_Name_outbox")+";") {
			t.Fatalf("%T: outbox table quoted differently from the dialect:\n%s", d, s)
		}
		b, err = fs.ReadFile(fsys, "00003_outbox_dead.sql")
		if err != nil {
			t.Fatal(err)
		}
		if s := string(b); strings.Count(s, "ALTER TABLE "+d.QuoteIdent("weird_Name_outbox")) < 2 || !strings.Contains(s, d.QuoteIdent("weird_Name_outbox_dead_idx")) {
			t.Fatalf("%T: the dead state's migration quotes differently from the dialect:\n%s", d, s)
		}
	}
	// The wrapper's files run.
	db, err := sql.Open("sqlite3", sqlitedialect.DSN(filepath.Join(t.TempDir(), "b.db"), 0))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	m, err := migrations.New(db, bracketed{}, migrations.WithTable("weird_Name"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := m.Up(context.Background()); err != nil {
		t.Fatal(err)
	}
	var n int
	if err := db.QueryRow(`SELECT COUNT(*) FROM "weird_Name"`).Scan(&n); err != nil || n != 0 {
		t.Fatalf("table made through the wrapper: %d %v", n, err)
	}
}

// bare is a dialect without dialects.Schema.
type bare struct{}

func (bare) Name() string                    { return "bare" }
func (bare) QuoteIdent(s string) string      { return `"` + s + `"` }
func (bare) Placeholder(int) string          { return "?" }
func (bare) Queries(string) dialects.Queries { return dialects.Queries{} }
func (bare) Classify(error) dialects.Class   { return dialects.ClassOther }

// schema is SQLite with migrations of the test's own.
type schema struct {
	sqlitedialect.Dialect
	m dialects.Migrations
}

func (s schema) Migrations() dialects.Migrations { return s.m }

func TestNoMigrations(t *testing.T) {
	db, err := sql.Open("sqlite3", sqlitedialect.DSN(filepath.Join(t.TempDir(), "n.db"), 0))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	sqlFile := fstest.MapFS{"00001_x.sql": {Data: []byte("-- +goose Up\nCREATE TABLE {{.Table}} (a INTEGER);\n-- +goose Down\nDROP TABLE {{.Table}};\n")}}
	for name, d := range map[string]dialects.Dialect{
		"no Schema":    bare{},
		"nil":          nil,
		"no files":     schema{m: dialects.Migrations{Goose: "sqlite3"}},
		"no goose":     schema{m: dialects.Migrations{FS: sqlFile}},
		"no .sql file": schema{m: dialects.Migrations{FS: fstest.MapFS{"README": {Data: []byte("x")}}, Goose: "sqlite3"}},
	} {
		if _, err := migrationfs.Files(d, "x"); !errors.Is(err, migrations.ErrNoMigrations) {
			t.Errorf("%s: Files: %v, want ErrNoMigrations", name, err)
		}
		if _, err := migrations.Export(t.TempDir(), d, "x"); !errors.Is(err, migrations.ErrNoMigrations) {
			t.Errorf("%s: Export: %v, want ErrNoMigrations", name, err)
		}
		if d == nil {
			continue // New refuses a nil dialect as a configuration error
		}
		if _, err := migrations.New(db, d); !errors.Is(err, migrations.ErrNoMigrations) {
			t.Errorf("%s: New: %v, want ErrNoMigrations", name, err)
		}
	}
}

// recordingLock is a SessionLocker that records its calls.
type recordingLock struct {
	mu            sync.Mutex
	table         string
	locked, freed []*sql.Conn
}

func (l *recordingLock) SessionLock(_ context.Context, c *sql.Conn) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.locked = append(l.locked, c)
	return nil
}

func (l *recordingLock) SessionUnlock(_ context.Context, c *sql.Conn) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.freed = append(l.freed, c)
	return nil
}

// TestDialectSchema: migrations.New runs a dialect's own files, rendered
// with {{.Table}} and {{.Ident}}, under the dialect's session lock for the
// table, taken and released on one connection.
func TestDialectSchema(t *testing.T) {
	db, err := sql.Open("sqlite3", sqlitedialect.DSN(filepath.Join(t.TempDir(), "s.db"), 0))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	lock := &recordingLock{}
	d := schema{m: dialects.Migrations{
		FS: fstest.MapFS{
			"00001_a.sql": {Data: []byte("-- +goose Up\nCREATE TABLE {{.Table}} (a INTEGER);\nCREATE INDEX {{.Ident \"a_idx\"}} ON {{.Table}} (a);\n-- +goose Down\nDROP TABLE {{.Table}};\n")},
			"00002_b.sql": {Data: []byte("-- +goose Up\nALTER TABLE {{.Table}} ADD COLUMN b INTEGER;\n-- +goose Down\nALTER TABLE {{.Table}} DROP COLUMN b;\n")},
		},
		Goose: "sqlite3",
		Lock:  func(table string) dialects.SessionLocker { lock.table = table; return lock },
	}}
	m, err := migrations.New(db, d, migrations.WithTable("custom_ops"))
	if err != nil {
		t.Fatal(err)
	}
	if lock.table != "custom_ops" {
		t.Fatalf("Lock asked for table %q", lock.table)
	}
	rs, err := m.Up(context.Background())
	if err != nil || len(rs) != 2 || rs[1].Name != "00002_b.sql" {
		t.Fatalf("up: %+v %v", rs, err)
	}
	var idx string
	if err := db.QueryRow(`SELECT name FROM sqlite_master WHERE type = 'index' AND tbl_name = 'custom_ops'`).Scan(&idx); err != nil || idx != "custom_ops_a_idx" {
		t.Fatalf("index %q %v", idx, err)
	}
	if _, err := db.Exec(`INSERT INTO custom_ops (a, b) VALUES (1, 2)`); err != nil {
		t.Fatal(err)
	}
	if len(lock.locked) != 1 || len(lock.freed) != 1 || lock.locked[0] != lock.freed[0] {
		t.Fatalf("session lock: locked %d times, released %d times, on the same connection: %v", len(lock.locked), len(lock.freed), len(lock.locked) == 1 && len(lock.freed) == 1 && lock.locked[0] == lock.freed[0])
	}

	// A template that names an unknown field is refused.
	bad := schema{m: dialects.Migrations{FS: fstest.MapFS{"00001_a.sql": {Data: []byte("-- +goose Up\nCREATE TABLE {{.Nope}} (a INTEGER);\n")}}, Goose: "sqlite3"}}
	if _, err := migrationfs.Files(bad, "x"); err == nil {
		t.Fatal("a template with an unknown field rendered")
	}
	if _, err := migrations.New(db, bad); err == nil {
		t.Fatal("New accepted a template with an unknown field")
	}
}

func TestBadInput(t *testing.T) {
	for _, name := range []string{"x; DROP TABLE y", "", "a.b", "we\"ird", strings.Repeat("a", dialectkit.MaxTableNameLen+1)} {
		if _, err := migrationfs.Files(postgres.New(), name); !errors.Is(err, dialectkit.ErrBadTableName) {
			t.Fatalf("table %q: %v", name, err)
		}
	}
	if _, err := migrations.New(nil, nil); !errors.Is(err, migrations.ErrInvalidConfig) {
		t.Fatalf("nil db and dialect: %v", err)
	}
	db, err := sql.Open("sqlite3", sqlitedialect.DSN(filepath.Join(t.TempDir(), "x.db"), 0))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	d := sqlitedialect.New()
	if _, err := migrations.New(db, nil); !errors.Is(err, migrations.ErrInvalidConfig) {
		t.Fatalf("nil dialect: %v", err)
	}
	if _, err := migrations.New(nil, d); !errors.Is(err, migrations.ErrInvalidConfig) {
		t.Fatalf("nil db: %v", err)
	}
	if _, err := migrations.New(db, d, migrations.WithTable("x y")); !errors.Is(err, migrations.ErrInvalidConfig) || !errors.Is(err, dialectkit.ErrBadTableName) {
		t.Fatalf("bad table option: %v", err)
	}
	if _, err := migrations.New(db, d, migrations.WithTable("a"), migrations.WithTable("b")); !errors.Is(err, migrations.ErrInvalidConfig) {
		t.Fatalf("WithTable twice: %v", err)
	}
	if _, err := migrations.New(db, d, migrations.Option{}); !errors.Is(err, migrations.ErrInvalidConfig) {
		t.Fatalf("zero option: %v", err)
	}
	if _, err := migrations.New(db, d); err != nil {
		t.Fatalf("default table: %v", err)
	}
	if _, err := migrations.Export(t.TempDir(), postgres.New(), "x y"); !errors.Is(err, dialectkit.ErrBadTableName) {
		t.Fatalf("export bad table: %v", err)
	}
	if got := migrationfs.VersionTable("ops"); got != "ops_db_version" {
		t.Fatalf("VersionTable: %q", got)
	}
}

// Migrations honour the caller's context.
func TestUpRespectsCancelledContext(t *testing.T) {
	db, err := sql.Open("sqlite3", sqlitedialect.DSN(filepath.Join(t.TempDir(), "c.db"), 0))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	m, err := migrations.New(db, sqlitedialect.New())
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := m.Up(ctx); !errors.Is(err, context.Canceled) {
		t.Fatalf("Up with a cancelled context: %v", err)
	}
	// It stopped before the first migration: no table exists.
	var n int
	if err := db.QueryRow("SELECT count(*) FROM sqlite_master WHERE type = 'table' AND name IN (?, ?)",
		dialectkit.DefaultTable, migrationfs.VersionTable(dialectkit.DefaultTable)).Scan(&n); err != nil || n != 0 {
		t.Fatalf("after Up with a cancelled context: %d tables, %v; want none", n, err)
	}
}

// TestLockBeforeGoose: on every target, while another session holds the
// dialect's migration lock, Up, Status and Down each wait for
// it (and end with their context) without creating anything, the version
// table included; once it is released, four Migrators at once on a table
// that does not exist yet all succeed, and each migration is applied once.
func TestLockBeforeGoose(t *testing.T) {
	testdb.ParallelOn(t, map[string]int{"postgres": 6, "mysql": 6})
	for _, tg := range testdb.Targets() {
		t.Run(tg.Name, func(t *testing.T) {
			ctx := context.Background()
			d := tg.Dialect
			db := tg.Open(t, 6)
			table := uniqueTable("opl_first_")
			vt := d.QuoteIdent(migrationfs.VersionTable(table))
			t.Cleanup(func() {
				m, _ := migrations.New(db, d, migrations.WithTable(table))
				m.Down(context.Background())
				db.Exec("DROP TABLE IF EXISTS " + vt)
			})
			holder, err := db.Conn(ctx)
			if err != nil {
				t.Fatal(err)
			}
			defer holder.Close()
			lock := d.(dialects.Schema).Migrations().Lock(table)
			if err := lock.SessionLock(ctx, holder); err != nil {
				t.Fatal(err)
			}
			m, err := migrations.New(db, d, migrations.WithTable(table))
			if err != nil {
				t.Fatal(err)
			}
			for name, op := range map[string]func(context.Context) error{
				"Up":     func(ctx context.Context) error { _, err := m.Up(ctx); return err },
				"Status": func(ctx context.Context) error { _, err := m.Status(ctx); return err },
				"Down":   func(ctx context.Context) error { _, err := m.Down(ctx); return err },
			} {
				cctx, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
				err := op(cctx)
				cancel()
				if !errors.Is(err, context.DeadlineExceeded) {
					t.Fatalf("%s under the held lock: %v, want the context's deadline", name, err)
				}
				var n int
				if err := db.QueryRowContext(ctx, "SELECT COUNT(*) FROM "+vt).Scan(&n); err == nil {
					t.Fatalf("%s created the version table without the lock", name)
				}
			}
			if err := lock.SessionUnlock(ctx, holder); err != nil {
				t.Fatal(err)
			}
			var wg sync.WaitGroup
			applied := make([]int, 4)
			errs := make([]error, 4)
			for i := range applied {
				m, err := migrations.New(db, d, migrations.WithTable(table))
				if err != nil {
					t.Fatal(err)
				}
				wg.Go(func() {
					rs, err := m.Up(ctx)
					applied[i], errs[i] = len(rs), err
				})
			}
			wg.Wait()
			total := 0
			for i := range applied {
				if errs[i] != nil {
					t.Fatalf("concurrent Up %d: %v", i, errs[i])
				}
				total += applied[i]
			}
			// The dialect's migrations: the ledger's, the outbox's and the
			// outbox's dead state.
			files, err := fs.Glob(d.(dialects.Schema).Migrations().FS, "*.sql")
			if err != nil || len(files) == 0 {
				t.Fatalf("the dialect's migrations: %v %v", files, err)
			}
			if total != len(files) {
				t.Fatalf("concurrent Ups applied %v, want each of the %d migrations once in all", applied, len(files))
			}
			var n int
			if err := db.QueryRowContext(ctx, "SELECT COUNT(*) FROM "+vt+" WHERE version_id > 0").Scan(&n); err != nil || n != len(files) {
				t.Fatalf("version rows: %d %v, want %d", n, err, len(files))
			}
		})
	}
}

// hasPending reports whether any of m's migrations is not applied, from
// its Status.
func hasPending(ctx context.Context, m *migrations.Migrator) (bool, error) {
	st, err := m.Status(ctx)
	if err != nil {
		return false, err
	}
	for _, s := range st {
		if !s.Applied {
			return true, nil
		}
	}
	return false, nil
}
