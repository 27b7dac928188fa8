// Package migrationfs renders a dialect's migrations (dialects.Schema)
// for one ledger table: the files package migrations runs with goose and
// exports, and that the conformance suite and the tests read.
package migrationfs

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"text/template"

	"github.com/opledger/opledger/dialects"
	"github.com/opledger/opledger/internal/dialectkit"
	"github.com/opledger/opledger/internal/memfs"
)

// ErrNoMigrations is returned (wrapped) for a dialect that ships no
// migrations: it does not implement dialects.Schema. Package migrations
// exports it.
var ErrNoMigrations = errors.New("migrations: the dialect ships no migrations (dialects.Schema)")

// VersionTable returns the goose version table used for a ledger table:
// the table's name followed by "_db_version".
func VersionTable(table string) string { return table + "_db_version" }

// Schema returns d's migrations.
func Schema(d dialects.Dialect) (dialects.Migrations, error) {
	sc, ok := d.(dialects.Schema)
	if !ok {
		name := "<nil>"
		if d != nil {
			name = d.Name()
		}
		return dialects.Migrations{}, fmt.Errorf("%w: dialect %q", ErrNoMigrations, name)
	}
	m := sc.Migrations()
	if m.FS == nil || m.Goose == "" {
		return dialects.Migrations{}, fmt.Errorf("%w: dialect %q returns no files or no goose dialect", ErrNoMigrations, d.Name())
	}
	return m, nil
}

// Files returns d's migrations with table rendered in, as a file system
// of NNNNN_name.sql files at its root.
func Files(d dialects.Dialect, table string) (fs.FS, error) {
	m, err := Schema(d)
	if err != nil {
		return nil, err
	}
	return Render(d, m.FS, table)
}

// Render returns the files of src with table rendered in: each file is a
// text/template whose {{.Table}} is the quoted table and whose
// {{.Ident "suffix"}} is the quoted "<table>_<suffix>".
func Render(d dialects.Dialect, src fs.FS, table string) (fs.FS, error) {
	if err := dialectkit.CheckTableName(table); err != nil {
		return nil, fmt.Errorf("migrations: %w", err)
	}
	names, err := fs.Glob(src, "*.sql")
	if err != nil {
		return nil, fmt.Errorf("migrations: %w", err)
	}
	if len(names) == 0 {
		return nil, fmt.Errorf("%w: dialect %q has no .sql files", ErrNoMigrations, d.Name())
	}
	vars := templateVars{quote: d.QuoteIdent, table: table}
	out := memfs.FS{}
	for _, n := range names {
		text, err := fs.ReadFile(src, n)
		if err != nil {
			return nil, fmt.Errorf("migrations: %w", err)
		}
		t, err := template.New(n).Option("missingkey=error").Parse(string(text))
		if err != nil {
			return nil, fmt.Errorf("migrations: %s: %w", n, err)
		}
		var buf bytes.Buffer
		if err := t.Execute(&buf, vars); err != nil {
			return nil, fmt.Errorf("migrations: %s: %w", n, err)
		}
		out[n] = buf.Bytes()
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
