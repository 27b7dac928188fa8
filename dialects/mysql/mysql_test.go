package mysql_test

import (
	"context"
	"crypto/rand"
	"database/sql"
	"database/sql/driver"
	"encoding/hex"
	"errors"
	"fmt"
	"net/url"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	gomysql "github.com/go-sql-driver/mysql"

	"github.com/opledger/opledger/dialects"
	"github.com/opledger/opledger/dialects/mysql"
	"github.com/opledger/opledger/internal/testdb"
)

func TestQueries(t *testing.T) {
	d := mysql.New()
	if d.Name() != "mysql" {
		t.Fatal(d.Name())
	}
	if got := d.QuoteIdent("a`b"); got != "`a``b`" {
		t.Fatal(got)
	}
	q := d.Queries("ops")
	for name, s := range map[string]string{"insert": q.Insert, "select": q.Select, "reacquire": q.Reacquire, "complete": q.Complete, "lookup": q.Lookup, "sweep": q.Sweep} {
		if !strings.Contains(s, "`ops`") || strings.Contains(s, "$1") {
			t.Errorf("%s: %s", name, s)
		}
		up := strings.ToUpper(s)
		if strings.Contains(up, "IGNORE") || strings.Contains(up, "ON DUPLICATE") {
			t.Errorf("%s uses INSERT IGNORE or ON DUPLICATE KEY UPDATE: %s", name, s)
		}
	}
	if !strings.HasSuffix(q.Select, "LOCK IN SHARE MODE") {
		t.Errorf("the read-back must be a locking read: %s", q.Select)
	}
	if strings.Contains(q.Lookup, "LOCK") {
		t.Errorf("Lookup must not lock: %s", q.Lookup)
	}
}

func TestClassifySynthetic(t *testing.T) {
	d := mysql.New()
	me := func(n uint16, state string) error {
		e := &gomysql.MySQLError{Number: n, Message: "x"}
		copy(e.SQLState[:], state)
		return fmt.Errorf("wrapped: %w", e)
	}
	cases := []struct {
		err  error
		want dialects.Class
	}{
		{nil, dialects.ClassOther},
		{errors.New("plain"), dialects.ClassOther},
		{context.Canceled, dialects.ClassOther},
		{me(1062, "23000"), dialects.ClassUniqueViolation},
		{me(1586, "23000"), dialects.ClassUniqueViolation},
		{me(1213, "40001"), dialects.ClassDeadlock},
		{me(1205, "HY000"), dialects.ClassLockTimeout},
		{me(3572, "HY000"), dialects.ClassLockTimeout},
		{me(3024, "HY000"), dialects.ClassLockTimeout},
		{me(1969, "70100"), dialects.ClassLockTimeout},
		{me(9007, "HY000"), dialects.ClassSerialization},
		{me(8022, "HY000"), dialects.ClassSerialization},
		{me(1105, "40001"), dialects.ClassSerialization},
		{me(4031, "HY000"), dialects.ClassConnection},
		{me(2006, "HY000"), dialects.ClassConnection},
		{me(2013, "HY000"), dialects.ClassConnection},
		{me(1927, "70100"), dialects.ClassConnection},
		{me(1053, "08S01"), dialects.ClassConnection},
		{me(1040, "08004"), dialects.ClassConnection},
		{me(1048, "23000"), dialects.ClassOther}, // NOT NULL: never a conflict
		{me(1452, "23000"), dialects.ClassOther}, // foreign key
		{me(1064, "42000"), dialects.ClassOther},
		{gomysql.ErrInvalidConn, dialects.ClassConnection},
		{fmt.Errorf("x: %w", driver.ErrBadConn), dialects.ClassConnection},
		{(*gomysql.MySQLError)(nil), dialects.ClassOther},
	}
	for _, c := range cases {
		if got := d.Classify(c.err); got != c.want {
			t.Errorf("%v: %v, want %v", c.err, got, c.want)
		}
	}
}

// TestClassifyRealErrors provokes each error on the real server.
func TestClassifyRealErrors(t *testing.T) {
	testdb.Parallel(t, "mysql", 6)
	d := mysql.New()
	db := testdb.OpenMySQL(nil)(t, 6)
	ctx := context.Background()
	var b [4]byte
	_, _ = rand.Read(b[:])
	tbl := "opl_classify_" + hex.EncodeToString(b[:])
	if _, err := db.ExecContext(ctx, "CREATE TABLE "+tbl+" (k INT PRIMARY KEY, v INT NOT NULL)"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Exec("DROP TABLE " + tbl) })
	if _, err := db.ExecContext(ctx, "INSERT INTO "+tbl+" VALUES (1, 0), (2, 0)"); err != nil {
		t.Fatal(err)
	}
	check := func(name string, err error, want dialects.Class) {
		t.Helper()
		if err == nil {
			t.Fatalf("%s: no error", name)
		}
		if got := d.Classify(fmt.Errorf("wrapped: %w", err)); got != want {
			t.Errorf("%s: %v classified %v, want %v", name, err, got, want)
		}
	}

	_, err := db.ExecContext(ctx, "INSERT INTO "+tbl+" VALUES (1, 1)")
	check("duplicate", err, dialects.ClassUniqueViolation)
	_, err = db.ExecContext(ctx, "INSERT INTO "+tbl+" (k, v) VALUES (3, NULL)")
	check("not null", err, dialects.ClassOther)
	_, err = db.ExecContext(ctx, "SELEC 1")
	check("syntax", err, dialects.ClassOther)

	// Deadlock: two transactions lock rows 1 and 2 in opposite orders.
	t1, err := db.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer t1.Rollback()
	t2, err := db.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer t2.Rollback()
	if _, err := t1.ExecContext(ctx, "UPDATE "+tbl+" SET v = 1 WHERE k = 1"); err != nil {
		t.Fatal(err)
	}
	if _, err := t2.ExecContext(ctx, "UPDATE "+tbl+" SET v = 2 WHERE k = 2"); err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	var e1, e2 error
	wg.Add(2)
	go func() { defer wg.Done(); _, e1 = t1.ExecContext(ctx, "UPDATE "+tbl+" SET v = 1 WHERE k = 2") }()
	go func() { defer wg.Done(); _, e2 = t2.ExecContext(ctx, "UPDATE "+tbl+" SET v = 2 WHERE k = 1") }()
	wg.Wait()
	if (e1 == nil) == (e2 == nil) {
		t.Fatalf("want exactly one deadlock victim: %v / %v", e1, e2)
	}
	check("deadlock", errors.Join(e1, e2), dialects.ClassDeadlock)
	t1.Rollback()
	t2.Rollback()

	// Lock wait timeout, on a connection with a 1 s bound.
	conn, err := db.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if _, err := conn.ExecContext(ctx, "SET SESSION innodb_lock_wait_timeout = 1"); err != nil {
		t.Fatal(err)
	}
	holder, err := db.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer holder.Rollback()
	if _, err := holder.ExecContext(ctx, "UPDATE "+tbl+" SET v = 9 WHERE k = 1"); err != nil {
		t.Fatal(err)
	}
	_, err = conn.ExecContext(ctx, "UPDATE "+tbl+" SET v = 8 WHERE k = 1")
	check("lock wait timeout", err, dialects.ClassLockTimeout)
	holder.Rollback()

	var version string
	if err := db.QueryRowContext(ctx, "SELECT VERSION()").Scan(&version); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(version, "MariaDB") {
		_, err = conn.ExecContext(ctx, "SET STATEMENT max_statement_time = 0.01 FOR SELECT SLEEP(1)")
		check("statement timeout", err, dialects.ClassLockTimeout)
	}

	// A killed connection: a statement waits for holder's row lock (as the
	// server shows) when its session is killed.
	holder, err = db.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer holder.Rollback()
	if _, err := holder.ExecContext(ctx, "UPDATE "+tbl+" SET v = 9 WHERE k = 2"); err != nil {
		t.Fatal(err)
	}
	victim, err := db.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer victim.Rollback()
	id := testdb.SessionID(t, d, victim)
	done := make(chan struct{})
	var killed error
	go func() {
		defer close(done)
		_, killed = victim.ExecContext(ctx, "UPDATE "+tbl+" SET v = 8 WHERE k = 2")
	}()
	testdb.WaitBlocked(t, db, d, testdb.SessionID(t, d, holder), 1, done)
	if err := d.Kill(ctx, db, id); err != nil {
		t.Fatal(err)
	}
	<-done
	check("killed connection", killed, dialects.ClassConnection)
}

func TestDSN(t *testing.T) {
	cases := []struct{ in, want string }{
		{"root@tcp(127.0.0.1:3306)/test", "root@tcp(127.0.0.1:3306)/test?parseTime=true"},
		{"mysql://root@127.0.0.1:3306/test", "root@tcp(127.0.0.1:3306)/test?parseTime=true"},
		{"mysql://root@db.example/test", "root@tcp(db.example:3306)/test?parseTime=true"},
		{"MariaDB://u:p@h:3307/d?clientFoundRows=true", "u:p@tcp(h:3307)/d?clientFoundRows=true&parseTime=true"},
		{"mysql://u:p%40ss%2Fw%3Ard@h/d", "u:p@ss/w:rd@tcp(h:3306)/d?parseTime=true"},
		{"mysql://u@[::1]/d", "u@tcp([::1]:3306)/d?parseTime=true"},
		{"mysql://u@/d?socket=/run/mysqld/mysqld.sock", "u@unix(/run/mysqld/mysqld.sock)/d?parseTime=true"},
		{"mysql://u@h/d?time_zone=%27%2B00%3A00%27", "u@tcp(h:3306)/d?parseTime=true&time_zone=%27%2B00%3A00%27"},
		{"mysql://u@h/", "u@tcp(h:3306)/?parseTime=true"},
	}
	for _, c := range cases {
		got, err := mysql.DSN(c.in)
		if err != nil || got != c.want {
			t.Errorf("DSN(%q) = %q, %v; want %q", c.in, got, err, c.want)
			continue
		}
		// The result parses back to the same thing.
		if _, err := gomysql.ParseDSN(got); err != nil {
			t.Errorf("%q does not parse: %v", got, err)
		}
	}
	cfg, err := mysql.Config("mysql://u:p%40ss%2Fw%3Ard@h/d?loc=Europe%2FBerlin&clientFoundRows=true")
	if err != nil || cfg.Passwd != "p@ss/w:rd" || cfg.Loc.String() != "Europe/Berlin" || !cfg.ClientFoundRows || !cfg.ParseTime {
		t.Fatalf("config: %+v %v", cfg, err)
	}
	for _, bad := range []string{
		"", "   ", "mysql://u:s3cret@h/d?clientFoundRows=maybe", "mysql://u:s3cret@h/a/b",
		"mysql://u:s3cret@h/d#frag", "mysql://u:s3cret@h/d?socket=/x.sock", "mysql://u:s3cret@h:port/d",
		"u:s3cret@tcp(h/d", "u:s3cret@h",
	} {
		_, err := mysql.DSN(bad)
		if !errors.Is(err, mysql.ErrBadDSN) {
			t.Errorf("DSN(%q): %v, want ErrBadDSN", bad, err)
			continue
		}
		if strings.Contains(err.Error(), "s3cret") {
			t.Errorf("DSN(%q): error %q contains the password", bad, err)
		}
	}
}

func TestDisplay(t *testing.T) {
	cases := map[string]string{
		"mysql://u:s3cret@h:3307/d?clientFoundRows=true": "mysql://u:xxxxx@h:3307/d",
		"root@tcp(127.0.0.1:3306)/test":                  "mysql://root@127.0.0.1:3306/test",
		"mysql://u@/d?socket=/run/m.sock":                "mysql://u@/d?socket=%2Frun%2Fm.sock",
		"mysql://u:s3cret@h:bad/d":                       "mysql://(invalid DSN)",
	}
	for in, want := range cases {
		if got := mysql.Display(in); got != want {
			t.Errorf("Display(%q) = %q, want %q", in, got, want)
		}
	}
}

// The URL form works against the real server.
func TestURLFormConnects(t *testing.T) {
	testdb.Parallel(t, "mysql", 2)
	db := testdb.OpenMySQL(nil)(t, 1)
	var one int
	if err := db.QueryRow("SELECT 1").Scan(&one); err != nil || one != 1 {
		t.Fatal(one, err)
	}
	cfg, err := mysql.Config(os.Getenv(testdb.EnvMySQL))
	if err != nil {
		t.Fatal(err)
	}
	u := (&url.URL{Scheme: "mysql", User: url.UserPassword(cfg.User, cfg.Passwd), Host: cfg.Addr, Path: "/" + cfg.DBName}).String()
	if cfg.Net == "unix" {
		u = (&url.URL{Scheme: "mysql", User: url.UserPassword(cfg.User, cfg.Passwd), Path: "/" + cfg.DBName, RawQuery: "socket=" + url.QueryEscape(cfg.Addr)}).String()
	}
	dsn, err := mysql.DSN(u)
	if err != nil {
		t.Fatal(err)
	}
	db2, err := sql.Open("mysql", dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer db2.Close()
	var now time.Time
	if err := db2.QueryRow("SELECT NOW()").Scan(&now); err != nil {
		t.Fatalf("URL form %s: %v (parseTime must be on)", mysql.Display(u), err)
	}
}

// FuzzConfig: no input panics, every error matches ErrBadDSN, and what
// parses formats to a DSN the driver accepts.
func FuzzConfig(f *testing.F) {
	for _, s := range []string{
		"root@tcp(127.0.0.1:3306)/test", "mysql://u:p@h:1/d?clientFoundRows=true", "mysql://u@/d?socket=/s",
		"mysql://[::1", "mysql://u:%zz@h/d", "u:p@tcp(h/d", "/", "mariadb://", "mysql://u:p@h/d?loc=%",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		cfg, err := mysql.Config(s)
		if err != nil {
			if !errors.Is(err, mysql.ErrBadDSN) {
				t.Fatalf("%q: error %v does not match ErrBadDSN", s, err)
			}
			return
		}
		if _, err := gomysql.ParseDSN(cfg.FormatDSN()); err != nil {
			t.Fatalf("%q: formatted DSN does not parse: %v", s, err)
		}
		_ = mysql.Display(s)
	})
}
