package main

import (
	"fmt"

	gomysql "github.com/go-sql-driver/mysql" // driver "mysql"

	"github.com/opledger/opledger/dialects/mysql"
)

// init adds mysql:// (and mariadb://) DSNs:
// mysql://user:password@host:port/dbname?param=value, translated to
// go-sql-driver's format with the options the dialect needs (parseTime).
func init() {
	extraSchemes["mysql"] = mysqlTarget
	extraSchemes["mariadb"] = mysqlTarget
	// The driver logs broken connections (packets.go: unexpected EOF) to
	// stderr by itself; the command reports errors as one line instead.
	_ = gomysql.SetLogger(quietLogger{})
}

type quietLogger struct{}

func (quietLogger) Print(...any) {}

func mysqlTarget(dsn string) (target, error) {
	d, err := mysql.DSN(dsn)
	if err != nil {
		// mysql.DSN's errors never contain the password.
		return target{}, fmt.Errorf("bad mysql URL: %v", err)
	}
	return target{driver: "mysql", dsn: d, dialect: mysql.New(), display: mysql.Display(dsn)}, nil
}
