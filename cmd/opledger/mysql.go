package main

import (
	"context"
	"database/sql"
	"fmt"
	"net/url"
	"strings"

	gomysql "github.com/go-sql-driver/mysql" // driver "mysql"

	"github.com/opledger/opledger/dialects"
	"github.com/opledger/opledger/internal/mysqldialect"
)

// init adds mysql:// (and mariadb://) DSNs:
// mysql://user:password@host:port/dbname?param=value, translated to
// go-sql-driver's format with the options the dialect needs (parseTime),
// tidb:// DSNs (the same, for TiDB: port 4000, the TiDB dialect and
// pessimistic transactions), and go-sql-driver's own format,
// user:password@tcp(host:port)/dbname (see driverDSN). Behind a mysql://
// URL or a driver DSN the server may be TiDB all the same: openDB asks it
// (see detectTiDB).
func init() {
	extraSchemes["mysql"] = mysqlTarget
	extraSchemes["mariadb"] = mysqlTarget
	extraSchemes["tidb"] = mysqlTarget
	schemelessForms = append(schemelessForms, driverDSNTarget)
	// The driver logs broken connections (packets.go: unexpected EOF) to
	// stderr by itself; the command reports errors as one line instead.
	_ = gomysql.SetLogger(quietLogger{})
}

type quietLogger struct{}

func (quietLogger) Print(...any) {}

// mysqlTarget reads a mysql://, mariadb:// or tidb:// URL, or a DSN in the
// driver's format.
func mysqlTarget(dsn string) (target, error) {
	// URL or driver DSN: the same test as mysql.Config's.
	form := "DSN"
	var candidates []string // what may be the password, for scrubbing
	scheme, _, isURL := strings.Cut(dsn, "://")
	scheme = strings.ToLower(scheme)
	if isURL && (scheme == "mysql" || scheme == "mariadb" || scheme == "tidb") {
		form = "URL"
		if u, err := url.Parse(dsn); err == nil && u.User != nil {
			pw, _ := u.User.Password()
			candidates = append(candidates, pw)
		}
	} else if pw, ok := driverDSN(dsn); ok {
		candidates = append(candidates, pw)
	}
	cfg, err := mysqldialect.Config(dsn)
	if err != nil {
		// mysql.Config's errors never contain the password (it withholds
		// a message holding a short one); scrubbing the longer ones again
		// costs nothing.
		var long []string
		for _, c := range candidates {
			if len(c) >= minScrubLen {
				long = append(long, c)
			}
		}
		msg := target{secrets: long}.scrub(err.Error())
		return target{}, fmt.Errorf("bad mysql %s: %s", form, msg)
	}
	t := target{driver: "mysql", dsn: cfg.FormatDSN(), dialect: mysqldialect.SchemeDialect(dsn), display: mysqldialect.Display(dsn)}
	if form != "URL" || scheme != "tidb" {
		// The DSN does not name its server: ask it.
		t.detect = detectTiDB(cfg)
	}
	if cfg.Passwd != "" {
		t.secrets = []string{cfg.Passwd}
	}
	// The driver has no password parameter, but passes any it does not
	// know on as a system variable: password=… there is a misplaced one.
	for k, v := range cfg.Params {
		if isPasswordKey(k) {
			t.secrets = append(t.secrets, v)
			if d, err := url.QueryUnescape(v); err == nil {
				t.secrets = append(t.secrets, d)
			}
		}
	}
	return t, nil
}

// detectTiDB returns the target's detect function for a DSN that does not
// name its server (mysql://, mariadb://, the driver's format): it asks the
// server for VERSION() and, on TiDB, returns the TiDB dialect and cfg's DSN
// with what that dialect needs added (tidb_txn_mode = 'pessimistic').
func detectTiDB(cfg *gomysql.Config) func(ctx context.Context, db *sql.DB) (dialects.Dialect, string, error) {
	return func(ctx context.Context, db *sql.DB) (dialects.Dialect, string, error) {
		d, err := mysqldialect.Detect(ctx, db)
		if err != nil {
			return nil, "", err
		}
		c := cfg.Clone()
		if d.Configure(c) {
			return d, c.FormatDSN(), nil
		}
		return d, "", nil
	}
}

// driverDSNTarget is the schemelessForms entry for driver DSNs.
func driverDSNTarget(dsn string) (target, bool, error) {
	if _, ok := driverDSN(dsn); !ok {
		return target{}, false, nil
	}
	t, err := mysqlTarget(dsn)
	return t, true, err
}

// driverDSN reports whether dsn has go-sql-driver's shape,
// [user[:password]@][net[(addr)]]/dbname[?params], with net tcp, tcp4,
// tcp6 or unix, or none after an '@', and returns the password the driver
// would read from it (what lies between the first ':' and the last '@'
// before the last '/'). Without an '@' the net must have an address,
// tcp(host:port)/db: "/x.db" and "tcp/x.db" are file paths.
func driverDSN(dsn string) (password string, ok bool) {
	slash := strings.LastIndexByte(dsn, '/')
	if slash < 0 {
		return "", false
	}
	left := dsn[:slash]
	at := strings.LastIndexByte(left, '@')
	network, _, hasAddr := strings.Cut(left[at+1:], "(")
	switch network {
	case "tcp", "tcp4", "tcp6", "unix":
		if at < 0 && !hasAddr {
			return "", false
		}
	case "":
		if at < 0 {
			return "", false
		}
	default:
		return "", false
	}
	if at >= 0 {
		_, password, _ = strings.Cut(left[:at], ":")
	}
	return password, true
}
