package main

import (
	"database/sql"
	"net/url"
	"os"
	"strings"
	"testing"

	"github.com/opledger/opledger/dialects/mysql"
	"github.com/opledger/opledger/internal/migrationfs"
	"github.com/opledger/opledger/internal/testkit/testdb"
)

func TestParseMySQLDSN(t *testing.T) {
	tg, err := parseDSN("mysql://app:s3cret@db.internal:3307/orders?clientFoundRows=true")
	if err != nil {
		t.Fatal(err)
	}
	if tg.driver != "mysql" || tg.dialect.Name() != "mysql" {
		t.Fatalf("%+v", tg)
	}
	if tg.dsn != "app:s3cret@tcp(db.internal:3307)/orders?clientFoundRows=true&parseTime=true" {
		t.Fatalf("driver DSN %q", tg.dsn)
	}
	if strings.Contains(tg.display, "s3cret") || tg.display != "mysql://app:xxxxx@db.internal:3307/orders" {
		t.Fatalf("display %q", tg.display)
	}
	if tg, err := parseDSN("MariaDB://root@localhost/test"); err != nil || tg.dialect.Name() != "mysql" {
		t.Fatalf("mariadb://: %+v %v", tg, err)
	}
	_, err = parseDSN("mysql://app:s3cret@h/d?parseTime=perhaps")
	if err == nil || strings.Contains(err.Error(), "s3cret") {
		t.Fatalf("bad option: %v", err)
	}
}

// TestParseTiDBDSN: a tidb:// URL selects the TiDB dialect with
// pessimistic transactions on every connection, and needs no detection; a
// mysql:// URL or a driver DSN leaves the server to be asked.
func TestParseTiDBDSN(t *testing.T) {
	tg, err := parseDSN("tidb://app:s3cret@tidb.internal/orders")
	if err != nil {
		t.Fatal(err)
	}
	if tg.driver != "mysql" || tg.dialect != mysql.NewTiDB() || tg.detect != nil {
		t.Fatalf("%+v", tg)
	}
	if tg.dsn != "app:s3cret@tcp(tidb.internal:4000)/orders?parseTime=true&tidb_txn_mode=%27pessimistic%27" {
		t.Fatalf("driver DSN %q", tg.dsn)
	}
	if tg.display != "tidb://app:xxxxx@tidb.internal:4000/orders" {
		t.Fatalf("display %q", tg.display)
	}
	for _, dsn := range []string{"mysql://root@127.0.0.1:4000/test", "root@tcp(127.0.0.1:4000)/test"} {
		tg, err := parseDSN(dsn)
		if err != nil || tg.dialect != mysql.New() || tg.detect == nil {
			t.Fatalf("%s: %+v %v", dsn, tg, err)
		}
	}
}

// TestDetectMySQL: behind a mysql:// URL openDB asks the server; MariaDB
// keeps the InnoDB dialect and the DSN as given, TiDB gets the TiDB
// dialect and pessimistic transactions in the DSN.
func TestDetectMySQL(t *testing.T) {
	raw := os.Getenv(testdb.EnvMySQL)
	if raw == "" {
		testdb.Skip(t, testdb.EnvMySQL)
	}
	testdb.Reserve(t, "mysql", 2)
	cfg, err := mysql.Config(raw)
	if err != nil {
		t.Fatal(err)
	}
	db, tg, err := openDB(t.Context(), cfg.FormatDSN())
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if testdb.TiDB(testdb.MySQLDialect(t)) {
		if tg.dialect != mysql.NewTiDB() || tg.detect != nil || !strings.Contains(tg.dsn, "tidb_txn_mode=%27pessimistic%27") {
			t.Fatalf("on TiDB: %+v", tg)
		}
		return
	}
	if tg.dialect != mysql.New() || tg.detect != nil || tg.dsn != cfg.FormatDSN() {
		t.Fatalf("%+v", tg)
	}
}

// TestMigrateMySQL runs the command against the real server with a
// mysql:// URL: up, status, down.
func TestMigrateMySQL(t *testing.T) {
	raw := os.Getenv(testdb.EnvMySQL)
	if raw == "" {
		testdb.Skip(t, testdb.EnvMySQL)
	}
	cfg, err := mysql.Config(raw)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Net != "tcp" {
		t.Skip("the URL form is tested over TCP")
	}
	u := &url.URL{Scheme: "mysql", User: url.User(cfg.User), Host: cfg.Addr, Path: "/" + cfg.DBName}
	if cfg.Passwd != "" {
		u.User = url.UserPassword(cfg.User, cfg.Passwd)
	}
	dsn := u.String()
	const table = "opl_cmd_mysql"
	t.Cleanup(func() {
		db, err := sql.Open("mysql", cfg.FormatDSN())
		if err != nil {
			return
		}
		defer db.Close()
		db.Exec("DROP TABLE IF EXISTS " + table)
		db.Exec("DROP TABLE IF EXISTS " + migrationfs.VersionTable(table))
	})
	for _, step := range [][]string{
		{"migrate", "up", "--dsn", dsn, "--table", table},
		{"migrate", "status", "--dsn", dsn, "--table", table},
		{"migrate", "down", "--dsn", dsn, "--table", table},
	} {
		code, out, errs := runCmd(t, step...)
		if code != 0 {
			t.Fatalf("%v: exit %d\n%s\n%s", step, code, out, errs)
		}
		if cfg.Passwd != "" && strings.Contains(out+errs, cfg.Passwd) {
			t.Fatalf("%v printed the password", step)
		}
		if step[1] == "status" && !strings.Contains(out, "00001_create_operations.sql") {
			t.Fatalf("status: %s", out)
		}
	}
}
