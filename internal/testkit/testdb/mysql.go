package testdb

import (
	"context"
	"database/sql"
	"fmt"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/opledger/opledger/dialects"
	"github.com/opledger/opledger/internal/mysqldialect"
)

// WaitUserLock waits until MySQL shows session id waiting for a named lock
// (GET_LOCK; PROCESSLIST state "User lock"): the database's own view of a
// blocked GET_LOCK, instead of a sleep. It fails the test after 20 seconds,
// or when done (if not nil) receives first, meaning the call that should
// have waited returned.
func WaitUserLock(t testing.TB, db *sql.DB, id int64, done <-chan struct{}) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		var n int
		if err := db.QueryRow("SELECT COUNT(*) FROM information_schema.PROCESSLIST WHERE ID = ? AND STATE = 'User lock'", id).Scan(&n); err != nil {
			t.Fatalf("read the process list: %v", err)
		}
		if n > 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("after 20s MySQL does not show session %d waiting for a named lock", id)
		}
		select {
		case <-done:
			t.Fatalf("the call that should wait for a named lock in session %d returned", id)
		case <-time.After(5 * time.Millisecond):
		}
	}
}

// mysqlServer is the dialect of the server behind EnvMySQL, asked once
// per test binary (mysql.Detect): mysql.NewTiDB() for TiDB, mysql.New()
// for MySQL and MariaDB, and mysql.New() when the variable is not set.
var mysqlServer = sync.OnceValues(func() (mysqldialect.Dialect, error) {
	raw := os.Getenv(EnvMySQL)
	if raw == "" {
		return mysqldialect.New(), nil
	}
	cfg, err := mysqldialect.Config(raw)
	if err != nil {
		return mysqldialect.New(), fmt.Errorf("%s: %w", EnvMySQL, err)
	}
	db, err := sql.Open("mysql", cfg.FormatDSN())
	if err != nil {
		return mysqldialect.New(), err
	}
	defer db.Close()
	db.SetMaxOpenConns(1)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	d, err := mysqldialect.Detect(ctx, db)
	if err != nil {
		return mysqldialect.New(), fmt.Errorf("%s: %w", EnvMySQL, err)
	}
	return d, nil
})

// MySQLDialect returns the dialect of the MySQL target's server, as
// mysql.Detect finds it (once per test binary): mysql.NewTiDB() on TiDB,
// mysql.New() on MySQL and MariaDB. It skips t like the target when
// EnvMySQL is not set, and fails it when the server cannot be asked.
func MySQLDialect(t testing.TB) mysqldialect.Dialect {
	t.Helper()
	if os.Getenv(EnvMySQL) == "" {
		Skip(t, EnvMySQL)
	}
	d, err := mysqlServer()
	if err != nil {
		t.Fatalf("detect the MySQL target's server: %v", err)
	}
	return d
}

// TiDB reports whether d is the TiDB variant of the MySQL dialect.
func TiDB(d dialects.Dialect) bool {
	m, ok := d.(mysqldialect.Dialect)
	return ok && m.TiDB()
}

// SkipOnTiDB skips t with a message naming why when d is the TiDB variant
// of the MySQL dialect: for what a test pins of InnoDB (MySQL's and
// MariaDB's engine) that TiDB does differently. What t checked before
// still counts.
func SkipOnTiDB(t testing.TB, d dialects.Dialect, why string) {
	t.Helper()
	if TiDB(d) {
		t.Skipf("InnoDB only, not on TiDB: %s", why)
	}
}
