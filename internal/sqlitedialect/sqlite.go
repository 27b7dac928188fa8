// Package sqlitedialect is the kit's SQLite dialect, which
// dialects/sqlite returns (sqlite.New); its package doc describes it. The
// kit's own code uses this package where it needs the concrete type and
// its optional interfaces (internal/dialectkit).
package sqlitedialect

import (
	"net/url"
	"reflect"
	"strconv"
	"strings"
	"time"

	"github.com/opledger/opledger/dialects"
	"github.com/opledger/opledger/internal/dialectkit"
)

// Dialect is the SQLite dialect. The zero value is ready to use.
type Dialect struct{}

var (
	_ dialects.Dialect         = Dialect{}
	_ dialectkit.RecordQuerier = Dialect{}
)

// New returns the SQLite dialect.
func New() Dialect { return Dialect{} }

// Name returns "sqlite".
func (Dialect) Name() string { return "sqlite" }

// Placeholder returns "?".
func (Dialect) Placeholder(int) string { return "?" }

// QuoteIdent quotes name with double quotes.
func (Dialect) QuoteIdent(name string) string {
	return `"` + strings.ReplaceAll(name, `"`, `""`) + `"`
}

const columns = `request_fp, code, response, response_type, created_at, completed_at, expires_at`

// Queries returns the ledger's SQL for table.
func (d Dialect) Queries(table string) dialects.Queries {
	t := d.QuoteIdent(table)
	return dialects.Queries{
		Insert: `INSERT INTO ` + t + ` (id, caller, method, request_fp, created_at, expires_at, born_at) ` +
			`VALUES (?, ?, ?, ?, ?, ?, ?) ON CONFLICT (id) DO NOTHING`,
		Select: `SELECT ` + columns + ` FROM ` + t + ` WHERE id = ?`,
		TakeOver: `UPDATE ` + t + ` SET request_fp = ?, created_at = ?, expires_at = ?, ` +
			`code = NULL, response = NULL, response_type = NULL, completed_at = NULL ` +
			`WHERE id = ? AND expires_at <= ?`,
		Complete: `UPDATE ` + t + ` SET code = ?, response = ?, response_type = ?, completed_at = ? ` +
			`WHERE id = ? AND completed_at IS NULL`,
		Lookup: `SELECT ` + columns + ` FROM ` + t + ` WHERE id = ?`,
		Sweep: `DELETE FROM ` + t + ` WHERE id IN (SELECT id FROM ` + t +
			` WHERE expires_at <= ? LIMIT ?)`,
		CountExpired: `SELECT count(*) FROM ` + t + ` WHERE expires_at <= ?`,
	}
}

// RecordQueries returns the SQL of the ledger's Record for table: one
// upsert, INSERT … ON CONFLICT (id) DO UPDATE … WHERE expires_at <= now,
// which inserts the completed entry or takes over an expired one and
// changes no row when a live entry is there. SQLite runs one writer at a
// time, so a concurrent duplicate never overlaps: with immediate
// transactions ([DSN]) it waits at BEGIN for the other writer to end.
func (d Dialect) RecordQueries(table string) dialectkit.RecordQueries {
	t := d.QuoteIdent(table)
	return dialectkit.RecordQueries{
		// A key with a known birth (born_at not 0) is never taken over:
		// its entry past its retention is refused as expired.
		Insert: `INSERT INTO ` + t + ` (id, caller, method, request_fp, code, response, response_type, created_at, completed_at, expires_at, born_at) ` +
			`VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT (id) DO UPDATE SET ` +
			`request_fp = excluded.request_fp, code = excluded.code, response = excluded.response, ` +
			`response_type = excluded.response_type, created_at = excluded.created_at, ` +
			`completed_at = excluded.completed_at, expires_at = excluded.expires_at ` +
			`WHERE ` + t + `.expires_at <= ? AND excluded.born_at = 0`,
		TakesOver: true,
		TakeOver: `UPDATE ` + t + ` SET request_fp = ?, code = ?, response = ?, response_type = ?, ` +
			`created_at = ?, completed_at = ?, expires_at = ? WHERE id = ? AND expires_at <= ?`,
	}
}

// SQLite result codes the dialect distinguishes.
const (
	codeBusy             = 5
	codeLocked           = 6
	codeBusySnapshot     = 517  // SQLITE_BUSY_SNAPSHOT
	codeConstraintPK     = 1555 // SQLITE_CONSTRAINT_PRIMARYKEY
	codeConstraintUnique = 2067 // SQLITE_CONSTRAINT_UNIQUE
	primaryCodeMask      = 0xff
	maxUnwrapDepth       = 32
	defaultBusyTimeout   = 5 * time.Second
)

// Classify maps SQLite result codes: 1555 (primary key) and 2067 (unique)
// are unique violations; BUSY_SNAPSHOT (517) is a serialization failure;
// BUSY (5) and LOCKED (6) mean the busy timeout passed while another
// connection held the lock.
func (Dialect) Classify(err error) dialects.Class {
	if err == nil {
		return dialects.ClassOther
	}
	if code, ok := resultCode(err); ok {
		switch {
		case code == codeConstraintPK || code == codeConstraintUnique:
			return dialects.ClassUniqueViolation
		case code == codeBusySnapshot:
			return dialects.ClassSerialization
		case code&primaryCodeMask == codeBusy || code&primaryCodeMask == codeLocked:
			return dialects.ClassLockTimeout
		}
		return dialects.ClassOther
	}
	return dialectkit.ClassifyConnection(err)
}

type coder interface{ Code() int }

// resultCode finds the (extended, where known) SQLite result code in err's
// chain without importing a driver.
func resultCode(err error) (int, bool) {
	for depth := 0; err != nil && depth < maxUnwrapDepth; depth++ {
		if c, ok := err.(coder); ok {
			return c.Code(), true
		}
		if code, ok := fieldCode(err); ok {
			return code, true
		}
		switch u := err.(type) {
		case interface{ Unwrap() error }:
			err = u.Unwrap()
		case interface{ Unwrap() []error }:
			for _, e := range u.Unwrap() {
				if code, ok := resultCode(e); ok {
					return code, true
				}
			}
			return 0, false
		default:
			return 0, false
		}
	}
	return 0, false
}

// fieldCode reads mattn/go-sqlite3's sqlite3.Error, a struct value with
// integer fields Code and ExtendedCode, by reflection.
func fieldCode(err error) (int, bool) {
	v := reflect.ValueOf(err)
	if v.Kind() == reflect.Pointer {
		if v.IsNil() {
			return 0, false
		}
		v = v.Elem()
	}
	if v.Kind() != reflect.Struct || v.Type().PkgPath() != "github.com/mattn/go-sqlite3" {
		return 0, false
	}
	for _, name := range []string{"ExtendedCode", "Code"} {
		f := v.FieldByName(name)
		if f.IsValid() && f.CanInt() && f.Int() != 0 {
			return int(f.Int()), true
		}
	}
	return 0, false
}

// DSN returns a data source name that every pooled connection applies,
// for mattn/go-sqlite3 (driver "sqlite3") and modernc.org/sqlite (driver
// "sqlite", pure Go; it reads the same parameters): WAL journal, the given
// busy timeout (5 s when zero or negative) and immediate transactions
// (_txlock=immediate), so a transaction takes the write lock at BEGIN and
// never fails with SQLITE_BUSY on upgrade after a read.
func DSN(path string, busyTimeout time.Duration) string {
	if busyTimeout <= 0 {
		busyTimeout = defaultBusyTimeout
	}
	ms := busyTimeout.Milliseconds()
	if ms < 1 {
		ms = 1
	}
	q := url.Values{}
	q.Set("_journal_mode", "WAL")
	q.Set("_busy_timeout", strconv.FormatInt(ms, 10))
	q.Set("_txlock", "immediate")
	return "file:" + escapePath(path) + "?" + q.Encode()
}

func escapePath(p string) string {
	// '?' and '#' would end the path part of a file: URI.
	r := strings.NewReplacer("%", "%25", "?", "%3f", "#", "%23")
	return r.Replace(p)
}
