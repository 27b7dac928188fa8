package main

import (
	"fmt"
	"net/url"
	"strings"

	gomysql "github.com/go-sql-driver/mysql" // driver "mysql"

	"github.com/opledger/opledger/dialects/mysql"
)

// init adds mysql:// (and mariadb://) DSNs:
// mysql://user:password@host:port/dbname?param=value, translated to
// go-sql-driver's format with the options the dialect needs (parseTime),
// and go-sql-driver's own format, user:password@tcp(host:port)/dbname
// (see driverDSN).
func init() {
	extraSchemes["mysql"] = mysqlTarget
	extraSchemes["mariadb"] = mysqlTarget
	schemelessForms = append(schemelessForms, driverDSNTarget)
	// The driver logs broken connections (packets.go: unexpected EOF) to
	// stderr by itself; the command reports errors as one line instead.
	_ = gomysql.SetLogger(quietLogger{})
}

type quietLogger struct{}

func (quietLogger) Print(...any) {}

// mysqlTarget reads a mysql:// or mariadb:// URL, or a DSN in the driver's
// format.
func mysqlTarget(dsn string) (target, error) {
	// URL or driver DSN: the same test as mysql.Config's.
	form := "DSN"
	var candidates []string // what may be the password, for scrubbing
	if scheme, _, ok := strings.Cut(dsn, "://"); ok && (strings.EqualFold(scheme, "mysql") || strings.EqualFold(scheme, "mariadb")) {
		form = "URL"
		if u, err := url.Parse(dsn); err == nil && u.User != nil {
			pw, _ := u.User.Password()
			candidates = append(candidates, pw)
		}
	} else if pw, ok := driverDSN(dsn); ok {
		candidates = append(candidates, pw)
	}
	cfg, err := mysql.Config(dsn)
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
	t := target{driver: "mysql", dsn: cfg.FormatDSN(), dialect: mysql.New(), display: mysql.Display(dsn)}
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
