package migrations_test

import (
	"context"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/opledger/opledger/dialects"
	"github.com/opledger/opledger/internal/testdb"
	"github.com/opledger/opledger/migrations"
)

// TestUpDownCycle: up, up again (no-op), status, down, up, on every
// target; an application's own goose_db_version is left untouched.
func TestUpDownCycle(t *testing.T) {
	for _, tg := range testdb.Targets() {
		t.Run(tg.Name, func(t *testing.T) {
			ctx := context.Background()
			db := tg.Open(t, 4)
			d := tg.Dialect
			// The application's own goose history, which must survive.
			appTable := "goose_db_version"
			if _, err := db.ExecContext(ctx, "CREATE TABLE IF NOT EXISTS "+d.QuoteIdent(appTable)+" (id INTEGER, version_id BIGINT, is_applied BOOLEAN)"); err != nil {
				t.Fatal(err)
			}
			if _, err := db.ExecContext(ctx, "INSERT INTO "+d.QuoteIdent(appTable)+" (id, version_id, is_applied) VALUES (424242, 7, TRUE)"); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() {
				db.ExecContext(context.Background(), "DELETE FROM "+d.QuoteIdent(appTable)+" WHERE id = 424242")
			})

			table := "opl_migr_" + strings.ReplaceAll(strings.ReplaceAll(tg.Name, "/", "_"), "-", "_")
			m, err := migrations.New(db, d, migrations.WithTable(table))
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() {
				ctx := context.Background()
				m.Down(ctx)
				db.ExecContext(ctx, "DROP TABLE IF EXISTS "+d.QuoteIdent(migrations.VersionTable(table)))
			})
			count := func(q string) int {
				t.Helper()
				var n int
				if err := db.QueryRowContext(ctx, q).Scan(&n); err != nil {
					t.Fatalf("%s: %v", q, err)
				}
				return n
			}
			rows := "SELECT COUNT(*) FROM " + d.QuoteIdent(table)

			rs, err := m.Up(ctx)
			if err != nil || len(rs) != 1 || rs[0].Direction != "up" {
				t.Fatalf("up: %+v %v", rs, err)
			}
			if count(rows) != 0 {
				t.Fatal("new table not empty")
			}
			rs, err = m.Up(ctx)
			if err != nil || len(rs) != 0 {
				t.Fatalf("second up: %+v %v, want a no-op", rs, err)
			}
			pending, err := m.HasPending(ctx)
			if err != nil || pending {
				t.Fatalf("pending after up: %v %v", pending, err)
			}
			st, err := m.Status(ctx)
			if err != nil || len(st) != 1 || !st[0].Applied || st[0].Name != "00001_create_operations.sql" || st[0].AppliedAt.IsZero() {
				t.Fatalf("status: %+v %v", st, err)
			}
			rs, err = m.Down(ctx)
			if err != nil || len(rs) != 1 || rs[0].Direction != "down" {
				t.Fatalf("down: %+v %v", rs, err)
			}
			if _, err := db.ExecContext(ctx, rows); err == nil {
				t.Fatal("table still there after down")
			}
			st, err = m.Status(ctx)
			if err != nil || st[0].Applied {
				t.Fatalf("status after down: %+v %v", st, err)
			}
			if _, err := m.Up(ctx); err != nil {
				t.Fatalf("up after down: %v", err)
			}
			if count(rows) != 0 {
				t.Fatal("table not recreated")
			}
			if n := count("SELECT COUNT(*) FROM " + d.QuoteIdent(appTable) + " WHERE id = 424242 AND version_id = 7"); n != 1 {
				t.Fatalf("application's goose_db_version was touched: %d rows", n)
			}
		})
	}
}

func TestFilesAndExport(t *testing.T) {
	for _, name := range migrations.Dialects() {
		fsys, err := migrations.Files(name, "my_ops")
		if err != nil {
			t.Fatal(err)
		}
		b, err := fs.ReadFile(fsys, "00001_create_operations.sql")
		if err != nil {
			t.Fatal(err)
		}
		s := string(b)
		if !strings.Contains(s, "my_ops") || strings.Contains(s, "{{") || !strings.Contains(s, "-- +goose Up") || !strings.Contains(s, "-- +goose Down") {
			t.Fatalf("%s: badly rendered:\n%s", name, s)
		}
	}
	dir := t.TempDir()
	paths, err := migrations.Export(dir, "postgres", "ops")
	if err != nil || len(paths) != 1 {
		t.Fatalf("export: %v %v", paths, err)
	}
	b, err := os.ReadFile(filepath.Join(dir, "00001_create_operations.sql"))
	if err != nil || !strings.Contains(string(b), `CREATE TABLE "ops"`) {
		t.Fatalf("exported: %s %v", b, err)
	}
}

func TestBadInput(t *testing.T) {
	if _, err := migrations.Files("oracle", "x"); !errors.Is(err, migrations.ErrUnknownDialect) {
		t.Fatalf("unknown dialect: %v", err)
	}
	for _, name := range []string{"x; DROP TABLE y", "", "a.b", "we\"ird"} {
		if _, err := migrations.Files("postgres", name); !errors.Is(err, dialects.ErrBadTableName) {
			t.Fatalf("table %q: %v", name, err)
		}
	}
	if _, err := migrations.New(nil, nil); err == nil {
		t.Fatal("nil db accepted")
	}
	if _, err := migrations.Export(t.TempDir(), "postgres", "x y"); !errors.Is(err, dialects.ErrBadTableName) {
		t.Fatalf("export bad table: %v", err)
	}
}

// TestQuotingMatchesDialects: the rendered files quote the table exactly
// as each dialect's queries do.
func TestQuotingMatchesDialects(t *testing.T) {
	for _, tg := range testdb.Targets() {
		fsys, err := migrations.Files(tg.Dialect.Name(), "weird_Name")
		if err != nil {
			t.Fatal(err)
		}
		b, _ := fs.ReadFile(fsys, "00001_create_operations.sql")
		if !strings.Contains(string(b), "CREATE TABLE "+tg.Dialect.QuoteIdent("weird_Name")+" (") {
			t.Fatalf("%s: table quoted differently from the dialect:\n%s", tg.Name, b)
		}
	}
}
