package main

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net/url"
	"os"
	"strings"
	"time"

	_ "github.com/jackc/pgx/v5/stdlib" // driver "pgx"
	_ "github.com/mattn/go-sqlite3"    // driver "sqlite3"

	"github.com/opledger/opledger/dialects"
	"github.com/opledger/opledger/dialects/postgres"
	"github.com/opledger/opledger/dialects/sqlite"
)

// defaultSQLiteFile is the embedded default database.
const defaultSQLiteFile = "opledger.db"

// dsnFrom returns the --dsn flag's value, else OPLEDGER_DSN, else the
// default SQLite file.
func dsnFrom(flagValue string) string {
	if flagValue != "" {
		return flagValue
	}
	if v := os.Getenv("OPLEDGER_DSN"); v != "" {
		return v
	}
	return defaultSQLiteFile
}

// target is a database chosen by DSN.
type target struct {
	driver  string
	dsn     string // in the driver's own format
	dialect dialects.Dialect
	display string // safe to print: no password
}

// parseDSN picks driver and dialect by the DSN's scheme. It never opens a
// connection.
func parseDSN(dsn string) (target, error) {
	dsn = strings.TrimSpace(dsn)
	if dsn == "" {
		return target{}, errors.New("empty DSN")
	}
	scheme, rest, hasScheme := strings.Cut(dsn, ":")
	if hasScheme {
		switch strings.ToLower(scheme) {
		case "postgres", "postgresql":
			u, err := url.Parse(dsn)
			if err != nil {
				return target{}, fmt.Errorf("bad postgres URL: %v", urlErr(err))
			}
			return target{driver: "pgx", dsn: dsn, dialect: postgres.New(), display: redact(u)}, nil
		case "sqlite", "sqlite3":
			path := strings.TrimPrefix(rest, "//")
			if path == "" {
				return target{}, errors.New("sqlite DSN names no file (want sqlite:PATH)")
			}
			return sqliteTarget(path), nil
		case "file":
			path, _, _ := strings.Cut(rest, "?")
			return sqliteTarget(strings.TrimPrefix(path, "//")), nil
		default:
			if opener, ok := extraSchemes[strings.ToLower(scheme)]; ok {
				return opener(dsn)
			}
			if len(scheme) > 1 && !strings.ContainsAny(scheme, `/\.`) {
				return target{}, fmt.Errorf("unknown DSN scheme %q (want postgres://, mysql://, sqlite: or a file path)", scheme)
			}
		}
	}
	return sqliteTarget(dsn), nil
}

// extraSchemes lets other files add DSN schemes (mysql).
var extraSchemes = map[string]func(dsn string) (target, error){}

func sqliteTarget(path string) target {
	return target{driver: "sqlite3", dsn: sqlite.DSN(path, 5*time.Second), dialect: sqlite.New(), display: "sqlite:" + path}
}

// openDB opens and pings the database named by dsn.
func openDB(ctx context.Context, dsn string) (*sql.DB, target, error) {
	t, err := parseDSN(dsn)
	if err != nil {
		return nil, t, err
	}
	db, err := sql.Open(t.driver, t.dsn)
	if err != nil {
		return nil, t, fmt.Errorf("open %s: %v", t.display, err)
	}
	pctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := db.PingContext(pctx); err != nil {
		db.Close()
		return nil, t, fmt.Errorf("cannot reach %s: %v", t.display, oneLine(err))
	}
	return db, t, nil
}

func redact(u *url.URL) string {
	c := *u
	if c.User != nil {
		if _, has := c.User.Password(); has {
			c.User = url.UserPassword(c.User.Username(), "xxxxx")
		}
	}
	return c.Redacted()
}

// urlErr drops the URL (which may hold a password) from a parse error.
func urlErr(err error) string {
	var ue *url.Error
	if errors.As(err, &ue) {
		return oneLine(ue.Err)
	}
	return "malformed URL"
}

// oneLine flattens an error to a single line.
func oneLine(err error) string {
	return strings.Join(strings.Fields(err.Error()), " ")
}
