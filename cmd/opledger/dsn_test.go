package main

import (
	"bytes"
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"os"
	"strings"
	"sync"
	"testing"
	"time"
)

// testPassword is the password in the DSNs below; no output may hold it.
const testPassword = "s3cr3tpw"

// TestParseDSNAccepts: each accepted form selects its driver and dialect,
// and the display never shows the password.
func TestParseDSNAccepts(t *testing.T) {
	cases := []struct {
		dsn, driver, display string // display "" is not checked
	}{
		{"postgres://u:" + testPassword + "@h:5432/db", "pgx", "postgres://u:xxxxx@h:5432/db"},
		{"POSTGRES://u:" + testPassword + "@h/db?sslmode=disable", "pgx", "postgres://u:xxxxx@h/db"},
		{"postgresql://h/db", "pgx", "postgresql://h/db"},
		{"postgres://u@h/db?password=" + testPassword, "pgx", "postgres://u@h/db"},
		{"postgres://u:p%40ss%2Fw@h/db", "pgx", "postgres://u:xxxxx@h/db"},
		{"mysql://root@127.0.0.1/test", "mysql", "mysql://root@127.0.0.1:3306/test"},
		{"MariaDB://u:" + testPassword + "@h/d", "mysql", "mysql://u:xxxxx@h:3306/d"},
		{"tidb://root@127.0.0.1/test", "mysql", "tidb://root@127.0.0.1:4000/test"},
		{"TiDB://u:" + testPassword + "@h:4001/d?tidb_txn_mode=%27optimistic%27", "mysql", "tidb://u:xxxxx@h:4001/d"},
		// go-sql-driver's own format.
		{"u:" + testPassword + "@tcp(127.0.0.1:1)/x", "mysql", "mysql://u:xxxxx@127.0.0.1:1/x"},
		{"u:" + testPassword + "@tcp6([::1]:3306)/x", "mysql", ""},
		{"u:" + testPassword + "@tcp4(127.0.0.1:3306)/x?clientFoundRows=true", "mysql", ""},
		{"user@unix(/run/mysqld/mysqld.sock)/db", "mysql", "mysql://user@/db?socket=%2Frun%2Fmysqld%2Fmysqld.sock"},
		{"@tcp(127.0.0.1:3306)/db", "mysql", "mysql://127.0.0.1:3306/db"},
		{"user:pass@/db", "mysql", "mysql://user:xxxxx@127.0.0.1:3306/db"},
		{"tcp(db.internal:3306)/db", "mysql", "mysql://db.internal:3306/db"},
		{"u:p@ss/w@tcp(h:1)/x", "mysql", "mysql://u:xxxxx@h:1/x"},
		// A driver DSN whose user is named like a scheme.
		{"postgres:" + testPassword + "@tcp(h:1)/x", "mysql", "mysql://postgres:xxxxx@h:1/x"},
		// SQLite.
		{"opledger.db", "sqlite3", "sqlite:opledger.db"},
		{"./x.db", "sqlite3", "sqlite:./x.db"},
		{"/tmp/x.db", "sqlite3", "sqlite:/tmp/x.db"},
		{"/db", "sqlite3", "sqlite:/db"},
		{"tcp/x.db", "sqlite3", "sqlite:tcp/x.db"},
		{"sqlite:x.db", "sqlite3", "sqlite:x.db"},
		{"sqlite:/tmp/x.db?mode=ro", "sqlite3", "sqlite:/tmp/x.db"},
		{"sqlite:///tmp/x.db", "sqlite3", "sqlite:/tmp/x.db"},
		{"sqlite3:x.db", "sqlite3", "sqlite:x.db"},
		{"file:x.db?mode=rwc", "sqlite3", "sqlite:x.db"},
		{`C:\data\x.db`, "sqlite3", `sqlite:C:\data\x.db`},
		{"c:/x.db", "sqlite3", "sqlite:c:/x.db"},
		{`.\bob@corp\x.db`, "sqlite3", `sqlite:.\bob@corp\x.db`},
		{"./dir@2/x.db", "sqlite3", "sqlite:./dir@2/x.db"},
		{"/srv/a@b/x.db", "sqlite3", ""},
		{"./user@host.db", "sqlite3", "sqlite:./user@host.db"},
		{"x.db:1", "sqlite3", "sqlite:x.db:1"},
		{"  opledger.db\n", "sqlite3", "sqlite:opledger.db"},
	}
	for _, c := range cases {
		tg, err := parseDSN(c.dsn)
		if err != nil {
			t.Errorf("%q: %v", c.dsn, err)
			continue
		}
		if tg.driver != c.driver {
			t.Errorf("%q: driver %q, want %q", c.dsn, tg.driver, c.driver)
		}
		want := map[string]string{"pgx": "postgres", "mysql": "mysql", "sqlite3": "sqlite"}[c.driver]
		if strings.HasPrefix(strings.ToLower(c.dsn), "tidb://") {
			want = "tidb"
		}
		if tg.dialect == nil || tg.dialect.Name() != want {
			t.Errorf("%q: dialect %v, want %s", c.dsn, tg.dialect, want)
		}
		if c.display != "" && tg.display != c.display {
			t.Errorf("%q: display %q, want %q", c.dsn, tg.display, c.display)
		}
		if strings.Contains(tg.display, testPassword) {
			t.Errorf("%q: display %q shows the password", c.dsn, tg.display)
		}
	}
	// pgx recognises URLs by their lower-case scheme only.
	if tg, _ := parseDSN("PostgreSQL://h/db"); !strings.HasPrefix(tg.dsn, "postgresql://") {
		t.Errorf("upper-case scheme passed to pgx as %q", tg.dsn)
	}
	// The driver gets parseTime=true.
	if tg, _ := parseDSN("u:" + testPassword + "@tcp(127.0.0.1:1)/x"); tg.dsn != "u:"+testPassword+"@tcp(127.0.0.1:1)/x?parseTime=true" {
		t.Errorf("driver DSN %q", tg.dsn)
	}
}

// TestParseDSNRejects: what is not an accepted form is an error that holds
// neither the password nor the DSN.
func TestParseDSNRejects(t *testing.T) {
	pw := testPassword
	cases := []struct {
		dsn, want string // want: a part of the error
	}{
		{"", "empty DSN"},
		{"   ", "empty DSN"},
		{"sqlite:", "names no file"},
		{"file:", "names no file"},
		{"bogus://x", `unknown DSN scheme "bogus"`},
		{"u:x", `unknown DSN scheme "u"`},
		{"c:x.db", `unknown DSN scheme "c"`},
		// The reported defect: a one-letter user is not a drive letter.
		{"u:" + pw + "@db.internal", "sqlite:PATH or a file path"},
		{"u:" + pw + "@db.internal:3306/x", "user:pass@tcp(host:port)/db"},
		{"u:" + pw + "@host/db", "not recognised"},
		{"app:" + pw + "@db.internal", "not recognised"},
		{"user@db.internal", "not recognised"},
		{"://u:" + pw + "@h/db", "not recognised"},
		{"u:" + pw + "@foo(h:1)/db", "not recognised"},
		{"u:pa/" + pw + "@tcp(h:1)", "not recognised"},
		{"redis://u:" + pw + "@h", `unknown DSN scheme "redis"`},
		{"postgres:u:" + pw + "@h/db", "a postgres DSN is a URL"},
		{"mysql:u:" + pw + "@h/db", "a mysql DSN is a URL"},
		// Malformed postgres URLs, rejected by net/url or by parseDSN.
		{"postgres://u:" + pw + "@[::1", "bad postgres URL"},
		{"postgres://u:" + pw + "@h:12ab/db", "invalid port after host"},
		{"postgres://u:12ab" + pw + "/x@h/db", "invalid port after host"},
		{"postgres://u:" + pw + "%zz@h/db", "invalid URL escape"},
		{"postgres://u:" + pw + "@h h/db", "invalid character"},
		{"postgres://u:p w" + pw + "@h/db", "invalid userinfo"},
		{"postgresql://u:12/" + pw + "@h/db", "after the host"},
		{"postgres://u:1234?" + pw + "@h", "after the host"},
		{"postgres://u:1234#" + pw + "@h", "a '#'"},
		{"postgres://u@h/x#?password=" + pw, "a '#'"},
		{"postgres://u:s@" + pw + "@h/db", "an '@' in the user name"},
		// mysql:// URLs and driver DSNs.
		{"mysql://u:" + pw + "@h/d?parseTime=perhaps", "bad mysql URL"},
		{"mysql://u:12/" + pw + "@h/db", "after the host"},
		{"mysql://u:" + pw + "@h:port/d", "bad mysql URL"},
		{"u:" + pw + "@tcp(127.0.0.1:1/x", "bad mysql DSN"},
		{"u:" + pw + "@tcp(h:1)/d?parseTime=perhaps", "invalid bool value"},
		{"u:" + pw + "@tcp(h:1)/d?tls=" + pw, "bad mysql DSN"},
		{"mysql://u@h/d?password=" + pw, "a password parameter"},
		{"mysql://u@h/d?password=&" + pw, "a password parameter"},
		{"tidb://u:" + pw + "@h:port/d", "bad mysql URL"},
		{"tidb://u:12/" + pw + "@h/db", "after the host"},
		{"tidb:u:" + pw + "@h/db", "a tidb DSN is a URL"},
		// SQLite forms that may hold a password.
		{"sqlite://u:" + pw + "@h/db", "with an '@' is refused"},
		{"file:u:" + pw + "@h", "with an '@' is refused"},
		{"C:/u:" + pw + "@h/x", "not recognised"},
		{"u:/" + pw + "@h/x", "not recognised"},
		{`C:\Users\bob@corp\x.db`, "not recognised"},
		{`sqlite:C:\Users\bob@corp\x.db`, "with an '@' is refused"},
		{"sqlite:u:/" + pw + "@h/x", "with an '@' is refused"},
		{"sqlite:" + pw + "@h", "with an '@' is refused"},
		{"file:" + pw + "@h/x.db", "with an '@' is refused"},
		{"sqlite:u:" + pw + "?@h/x", "with an '@' is refused"},
		{"sqlite:" + pw + "/@h", "with an '@' is refused"},
		{"sqlite:/" + pw + "@h", "with an '@' is refused"},
		{"sqlite:./dir@2/x.db", "with an '@' is refused"},
		{"./x.db?_auth_pass=" + pw, "not recognised"},
		{"sqlite:x.db&password=" + pw, "not recognised"},
		{"host=db user=u password=" + pw + " dbname=x", "keyword/value"},
		{"host=db user=u dbname=x", "keyword/value"},
		{"host=@/ user=u password=" + pw, "keyword/value"},
	}
	for _, c := range cases {
		tg, err := parseDSN(c.dsn)
		if err == nil {
			t.Errorf("%q accepted: %+v", c.dsn, tg)
			continue
		}
		msg := err.Error()
		if !strings.Contains(msg, c.want) {
			t.Errorf("%q: error %q, want it to contain %q", c.dsn, msg, c.want)
		}
		if strings.Contains(msg, pw) || (len(strings.TrimSpace(c.dsn)) > len("sqlite:") && strings.Contains(msg, strings.TrimSpace(c.dsn))) {
			t.Errorf("%q: error %q holds the password or the DSN", c.dsn, msg)
		}
		if strings.Contains(msg, "\n") {
			t.Errorf("%q: error %q is not one line", c.dsn, msg)
		}
	}
}

func TestScrub(t *testing.T) {
	tg := target{secrets: []string{testPassword}}
	for _, msg := range []string{
		"password authentication failed: password=" + testPassword + "\n\tat line 2",
		`cannot parse "u:` + testPassword + `@h"`,
		"echo " + testPassword + testPassword,
	} {
		got := tg.scrub(msg)
		if strings.Contains(got, testPassword) || strings.Contains(got, "\n") {
			t.Errorf("scrub(%q) = %q", msg, got)
		}
	}
	if got := tg.scrub("connection refused"); got != "connection refused" {
		t.Errorf("scrub changed a message without the password: %q", got)
	}
	// Every form a driver may print a password in.
	odd := target{secrets: []string{"p@ss w/\"rd\\"}}
	for _, msg := range []string{
		`p@ss w/"rd\`, `"p@ss w/\"rd\\"`, "p%40ss%20w%2F%22rd%5C", "p%40ss+w%2F%22rd%5C", "p@ss%20w%2F%22rd%5C",
	} {
		if got := odd.scrub("x " + msg + " y"); strings.Contains(got, msg) || got != "x xxxxx y" && got != `x "xxxxx" y` {
			t.Errorf("scrub(%q) = %q", msg, got)
		}
	}
	// Spaces collapsed by oneLine.
	spaced := target{secrets: []string{"se  cret"}}
	if got := spaced.scrub("x se\n\ncret y"); strings.Contains(got, "se cret") {
		t.Errorf("collapsed spaces: %q", got)
	}
	// A short password cannot be replaced without garbling the message.
	short := target{secrets: []string{"abc"}}
	if got := short.scrub("failed for abc"); got != withheld {
		t.Errorf("short password: %q", got)
	}
	if got := short.scrub("connection refused"); got != "connection refused" {
		t.Errorf("short password not in message: %q", got)
	}
	// A replacement that leaves the password behind (xabx: xxxxx|abx).
	residue := target{secrets: []string{"xabx"}}
	if got := residue.scrub("xabxabx"); strings.Contains(got, "xabx") {
		t.Errorf("residue: %q", got)
	}
}

// registerEcho registers echoDriver: sql.Register panics on a second
// registration of a name.
var registerEcho sync.Once

// echoDriver is a driver whose every connection fails with a message that
// quotes its DSN, as some drivers do.
type echoDriver struct{}

func (echoDriver) Open(name string) (driver.Conn, error) {
	return nil, errors.New("cannot connect with " + name + "\n(password " + testPassword + ")")
}

// TestOpenDBScrubsDriverMessages: the "cannot reach" error of a driver that
// echoes the password does not hold it.
func TestOpenDBScrubsDriverMessages(t *testing.T) {
	registerEcho.Do(func() { sql.Register("opledger-test-echo", echoDriver{}) }) // once per binary, also under -count
	extraSchemes["echotest"] = func(dsn string) (target, error) {
		return target{driver: "opledger-test-echo", dsn: dsn, display: "echotest://u:xxxxx@h", secrets: []string{testPassword}}, nil
	}
	t.Cleanup(func() { delete(extraSchemes, "echotest") })
	_, _, err := openDB(context.Background(), "echotest://u:"+testPassword+"@h")
	if err == nil || !strings.HasPrefix(err.Error(), "cannot reach echotest://u:xxxxx@h: cannot connect with") {
		t.Fatalf("openDB: %v", err)
	}
	if strings.Contains(err.Error(), testPassword) || strings.Contains(err.Error(), "\n") {
		t.Fatalf("openDB: %q", err)
	}
}

// runCmdTimeout runs the command in-process with a deadline.
func runCmdTimeout(t *testing.T, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	var out, errb bytes.Buffer
	code = run(ctx, args, &out, &errb)
	return code, out.String(), errb.String()
}

// TestSQLiteFormsCommands: the SQLite forms still create their file.
func TestSQLiteFormsCommands(t *testing.T) {
	for _, c := range []struct{ dsn, file string }{
		{"x.db", "x.db"},
		{"./x.db", "x.db"},
		{"sqlite:x.db", "x.db"},
		{"file:x.db?mode=rwc", "x.db"},
		{"./dir@2/x.db", "dir@2/x.db"},
	} {
		dir := t.TempDir()
		t.Chdir(dir)
		t.Setenv("OPLEDGER_DSN", "")
		if err := os.Mkdir("dir@2", 0o755); err != nil {
			t.Fatal(err)
		}
		code, out, errs := runCmdTimeout(t, "migrate", "up", "--dsn", c.dsn)
		if code != 0 || !strings.Contains(out, "00001_create_operations.sql") {
			t.Errorf("%q: exit %d %q %q", c.dsn, code, out, errs)
		}
		if _, err := os.Stat(c.file); err != nil {
			t.Errorf("%q: %v", c.dsn, err)
		}
		if code, out, errs := runCmdTimeout(t, "sweep", "--dsn", c.dsn); code != 0 || !strings.Contains(out, "swept 0") {
			t.Errorf("%q: sweep: exit %d %q %q", c.dsn, code, out, errs)
		}
	}
}
