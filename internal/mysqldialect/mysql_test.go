package mysqldialect_test

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
	"github.com/opledger/opledger/internal/dialectkit"
	"github.com/opledger/opledger/internal/mysqldialect"
	"github.com/opledger/opledger/internal/testkit/testdb"
)

// TestQueries: both variants use the same statements but for the
// read-back's lock: a shared lock on InnoDB (FOR UPDATE would deadlock
// concurrent replays, which hold the shared lock their 1062 left), FOR
// UPDATE on TiDB (which implements shared locks only as refused no-ops,
// and whose 1062 leaves no lock).
func TestQueries(t *testing.T) {
	for _, c := range []struct {
		d          mysqldialect.Dialect
		name, lock string
		tidb       bool
	}{
		{mysqldialect.New(), "mysql", "LOCK IN SHARE MODE", false},
		{mysqldialect.Dialect{}, "mysql", "LOCK IN SHARE MODE", false},
		{mysqldialect.NewTiDB(), "tidb", "FOR UPDATE", true},
	} {
		d := c.d
		if d.Name() != c.name || d.TiDB() != c.tidb {
			t.Fatal(d.Name(), d.TiDB())
		}
		if got := d.QuoteIdent("a`b"); got != "`a``b`" {
			t.Fatal(got)
		}
		q := d.Queries("ops")
		for name, s := range map[string]string{"insert": q.Insert, "select": q.Select, "take over": q.TakeOver, "complete": q.Complete, "lookup": q.Lookup, "sweep": q.Sweep} {
			if !strings.Contains(s, "`ops`") || strings.Contains(s, "$1") {
				t.Errorf("%s %s: %s", c.name, name, s)
			}
			up := strings.ToUpper(s)
			if strings.Contains(up, "IGNORE") || strings.Contains(up, "ON DUPLICATE") {
				t.Errorf("%s %s uses INSERT IGNORE or ON DUPLICATE KEY UPDATE: %s", c.name, name, s)
			}
		}
		if !strings.HasSuffix(q.Select, " "+c.lock) {
			t.Errorf("%s: the read-back must end in %s: %s", c.name, c.lock, q.Select)
		}
		if strings.Contains(q.Lookup, "LOCK") || strings.Contains(q.Lookup, "FOR ") {
			t.Errorf("%s: Lookup must not lock: %s", c.name, q.Lookup)
		}
		other := mysqldialect.New().Queries("ops")
		if q.Insert != other.Insert || q.TakeOver != other.TakeOver || q.Complete != other.Complete ||
			q.Lookup != other.Lookup || q.Sweep != other.Sweep {
			t.Errorf("%s: statements other than the read-back differ from InnoDB's", c.name)
		}
	}
	if mysqldialect.New() != (mysqldialect.Dialect{}) || mysqldialect.NewTiDB() == mysqldialect.New() {
		t.Error("Dialect values do not compare as documented")
	}
}

// TestForVersion: the server kind comes from VERSION() as each server
// answers it.
func TestForVersion(t *testing.T) {
	for v, tidb := range map[string]bool{
		"8.0.11-TiDB-v8.5.3":            true,
		"8.0.11-TiDB-v7.5.2-serverless": true,
		"5.7.25-TiDB-v6.5.0":            true,
		"TiDB Server (Apache License 2.0) Community Edition, MySQL 8.0 compatible": true,
		"MySQL Community Server - GPL":                                             false,
		"mariadb.org binary distribution":                                          false,
		"10.11.6-MariaDB-0+deb12u1":                                                false,
		"8.0.36":                                                                   false,
		"8.0.36-0ubuntu0.22.04.1":                                                  false,
		"5.7.44-log":                                                               false,
		"":                                                                         false,
	} {
		if got := mysqldialect.ForVersion(v); got.TiDB() != tidb {
			t.Errorf("ForVersion(%q) = %s, want TiDB %v", v, got.Name(), tidb)
		}
	}
}

// TestDetect asks the real server: the TiDB variant exactly when the
// server says it is TiDB (in VERSION() or @@version_comment), the
// MySQL/MariaDB dialect otherwise; and the detected dialect's transaction
// check passes a transaction of the test pool (pessimistic on TiDB, as
// the pool's DSN sets).
func TestDetect(t *testing.T) {
	testdb.Parallel(t, "mysql", 1)
	db := testdb.OpenMySQL(nil)(t, 1)
	ctx := context.Background()
	d, err := mysqldialect.Detect(ctx, db)
	if err != nil {
		t.Fatal(err)
	}
	var version, comment string
	if err := db.QueryRowContext(ctx, "SELECT VERSION(), @@version_comment").Scan(&version, &comment); err != nil {
		t.Fatal(err)
	}
	tidb := strings.Contains(strings.ToLower(version+" "+comment), "tidb")
	if want := map[bool]mysqldialect.Dialect{false: mysqldialect.New(), true: mysqldialect.NewTiDB()}[tidb]; d != want {
		t.Fatalf("Detect on %q (%q): %s, want %s", version, comment, d.Name(), want.Name())
	}
	if d != testdb.MySQLDialect(t) {
		t.Fatalf("the test target's dialect is %s, Detect's %s", testdb.MySQLDialect(t).Name(), d.Name())
	}
	t.Logf("%s (%s): %s", version, comment, d.Name())
	if !tidb {
		// The InnoDB variant checks nothing and costs no round trip.
		if err := d.CheckTx(ctx, nil); err != nil {
			t.Fatal(err)
		}
	}
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback()
	if err := d.CheckTx(ctx, tx); err != nil {
		t.Fatalf("CheckTx on a transaction of the test pool: %v", err)
	}
}

// TestExplainTiDBServer: the MySQL/MariaDB dialect explains TiDB's
// refusal of its read-back (1235) with ErrTiDBServer, naming the TiDB
// variant and Detect, and keeps the driver's error; other errors, and the
// TiDB variant's, stay as they are.
func TestExplainTiDBServer(t *testing.T) {
	refused := tidb(1235, "function LOCK IN SHARE MODE has only noop implementation in tidb now, use tidb_enable_noop_functions to enable these functions")
	got := dialectkit.Explain(mysqldialect.New(), refused)
	var me *gomysql.MySQLError
	if !errors.Is(got, mysqldialect.ErrTiDBServer) || !errors.As(got, &me) || me.Number != 1235 {
		t.Fatalf("Explain(New, 1235) = %v", got)
	}
	for _, want := range []string{"mysql.NewTiDB()", "mysql.Detect", "tidb://"} {
		if !strings.Contains(got.Error(), want) {
			t.Errorf("%q does not name %s", got, want)
		}
	}
	if again := dialectkit.Explain(mysqldialect.New(), got); again != got {
		t.Errorf("explained twice: %v", again)
	}
	if mysqldialect.New().Classify(got) != dialects.ClassOther {
		t.Errorf("the explained error is classified %v, want other (not retryable)", mysqldialect.New().Classify(got))
	}
	for _, err := range []error{
		nil, errors.New("plain"), tidb(1235, "function GET_LOCK has only noop implementation in tidb now"), tidb(1062, "Duplicate entry"),
	} {
		if got := dialectkit.Explain(mysqldialect.New(), err); got != err {
			t.Errorf("Explain(New, %v) = %v, want it unchanged", err, got)
		}
	}
	if got := dialectkit.Explain(mysqldialect.NewTiDB(), refused); got != refused {
		t.Errorf("Explain(NewTiDB, 1235) = %v, want it unchanged", got)
	}
}

// TestConfigure: the TiDB variant adds tidb_txn_mode = 'pessimistic' to a
// configuration that lacks it, and leaves one that sets it alone; the
// InnoDB variant adds nothing (the variable is unknown there).
func TestConfigure(t *testing.T) {
	cfg, err := mysqldialect.Config("mysql://root@127.0.0.1:4000/test")
	if err != nil {
		t.Fatal(err)
	}
	if mysqldialect.New().Configure(cfg) || len(cfg.Params) != 0 {
		t.Fatalf("InnoDB variant changed the config: %v", cfg.Params)
	}
	if !mysqldialect.NewTiDB().Configure(cfg) || cfg.Params["tidb_txn_mode"] != "'pessimistic'" {
		t.Fatalf("TiDB variant: %v", cfg.Params)
	}
	if mysqldialect.NewTiDB().Configure(cfg) {
		t.Fatal("second Configure changed the config again")
	}
	if got := cfg.FormatDSN(); got != "root@tcp(127.0.0.1:4000)/test?parseTime=true&tidb_txn_mode=%27pessimistic%27" {
		t.Fatal(got)
	}
	own, err := mysqldialect.Config("mysql://root@h:4000/test?TiDB_Txn_Mode=%27optimistic%27")
	if err != nil {
		t.Fatal(err)
	}
	if mysqldialect.NewTiDB().Configure(own) || len(own.Params) != 1 {
		t.Fatalf("a config that sets the mode was changed: %v", own.Params)
	}
	if mysqldialect.NewTiDB().Configure(nil) {
		t.Fatal("nil config")
	}
}

func TestClassifySynthetic(t *testing.T) {
	d := mysqldialect.New()
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
		// TiDB's own codes, with the messages TiDB sends.
		{tidb(9007, "Write conflict, txnStartTS=459000000000000001, conflictStartTS=459000000000000002, conflictCommitTS=459000000000000003, key={tableID=104, handle=1} primary={tableID=104, handle=1}, reason=Optimistic [try again later]"), dialects.ClassSerialization},
		{tidb(8005, "Write conflict, txnStartTS is stale [try again later]"), dialects.ClassSerialization},
		{tidb(8002, "[1] can not retry select for update statement"), dialects.ClassSerialization},
		{tidb(8022, "Error: KV error safe to retry Txn(Mvcc(WriteConflict)) [try again later]"), dialects.ClassSerialization},
		{tidb(8027, "Information schema is out of date: schema failed to update in 1 lease, please make sure TiDB can connect to TiKV"), dialects.ClassSerialization},
		{tidb(8028, "Information schema is changed during the execution of the statement(for example, table definition may be updated by other DDL ran in parallel). If you see this error often, try increasing `tidb_max_delta_schema_count`. [try again later]"), dialects.ClassSerialization},
		{tidb(9004, "Resolve lock timeout[try again later]"), dialects.ClassLockTimeout},
		{tidb(1205, "Lock wait timeout exceeded; try restarting transaction"), dialects.ClassLockTimeout},
		{tidb(1213, "Deadlock found when trying to get lock; try restarting transaction"), dialects.ClassDeadlock},
		{tidb(3572, "Statement aborted because lock(s) could not be acquired immediately and NOWAIT is set."), dialects.ClassLockTimeout},
		{tidb(1062, "Duplicate entry '\\x01' for key 'opledger_operations.PRIMARY'"), dialects.ClassUniqueViolation},
		{tidb(1105, "execution result undetermined"), dialects.ClassConnection},
		{tidb(1105, "some other unknown error"), dialects.ClassOther},
		{tidb(1105, "pessimistic lock retry limit reached"), dialects.ClassSerialization},
		// What the InnoDB variant's read-back gets on TiDB, and what a
		// lazy unique check reports at COMMIT: neither is retryable.
		{tidb(1235, "function LOCK IN SHARE MODE has only noop implementation in tidb now, use tidb_enable_noop_functions to enable these functions"), dialects.ClassOther},
		{tidb(8147, "transaction aborted because lazy uniqueness check is enabled and an error occurred: [kv:1062]Duplicate entry '1' for key 't.PRIMARY'"), dialects.ClassOther},
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
		if got := mysqldialect.NewTiDB().Classify(c.err); got != c.want {
			t.Errorf("TiDB variant: %v: %v, want %v", c.err, got, c.want)
		}
	}
}

// tidb builds the error TiDB sends: its code, SQLSTATE HY000 (TiDB's
// default for codes without a state of their own) or MySQL's for MySQL's
// codes, and its message.
func tidb(n uint16, msg string) error {
	state := map[uint16]string{1062: "23000", 1213: "40001", 1235: "42000"}[n]
	if state == "" {
		state = "HY000"
	}
	e := &gomysql.MySQLError{Number: n, Message: msg}
	copy(e.SQLState[:], state)
	return fmt.Errorf("ledger: claim: %w", e)
}

// TestClassifyRealErrors provokes each error on the real server.
func TestClassifyRealErrors(t *testing.T) {
	testdb.Parallel(t, "mysql", 6)
	d := testdb.MySQLDialect(t)
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

	// Lock wait timeout, on a connection with a 1 s bound, in an explicit
	// transaction (TiDB runs an autocommit statement optimistically, past
	// the bound).
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
	waiter, err := conn.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	_, err = waiter.ExecContext(ctx, "UPDATE "+tbl+" SET v = 8 WHERE k = 1")
	waiter.Rollback()
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
		// tidb://: port 4000 and pessimistic transactions, unless set.
		{"tidb://root@127.0.0.1/test", "root@tcp(127.0.0.1:4000)/test?parseTime=true&tidb_txn_mode=%27pessimistic%27"},
		{"TiDB://u:p@h:4001/d?clientFoundRows=true", "u:p@tcp(h:4001)/d?clientFoundRows=true&parseTime=true&tidb_txn_mode=%27pessimistic%27"},
		{"tidb://u@h/d?tidb_txn_mode=%27optimistic%27", "u@tcp(h:4000)/d?parseTime=true&tidb_txn_mode=%27optimistic%27"},
		{"tidb://u@/d?socket=/tmp/tidb.sock", "u@unix(/tmp/tidb.sock)/d?parseTime=true&tidb_txn_mode=%27pessimistic%27"},
		// mysql:// to a TiDB port stays as given: Detect finds TiDB.
		{"mysql://root@127.0.0.1:4000/test", "root@tcp(127.0.0.1:4000)/test?parseTime=true"},
	}
	for _, c := range cases {
		got, err := mysqldialect.DSN(c.in)
		if err != nil || got != c.want {
			t.Errorf("DSN(%q) = %q, %v; want %q", c.in, got, err, c.want)
			continue
		}
		// The result parses back to the same thing.
		if _, err := gomysql.ParseDSN(got); err != nil {
			t.Errorf("%q does not parse: %v", got, err)
		}
	}
	cfg, err := mysqldialect.Config("mysql://u:p%40ss%2Fw%3Ard@h/d?loc=Europe%2FBerlin&clientFoundRows=true")
	if err != nil || cfg.Passwd != "p@ss/w:rd" || cfg.Loc.String() != "Europe/Berlin" || !cfg.ClientFoundRows || !cfg.ParseTime {
		t.Fatalf("config: %+v %v", cfg, err)
	}
	for _, bad := range []string{
		"", "   ", "mysql://u:s3cret@h/d?clientFoundRows=maybe", "mysql://u:s3cret@h/a/b",
		"mysql://u:s3cret@h/d#frag", "mysql://u:s3cret@h/d?socket=/x.sock", "mysql://u:s3cret@h:port/d",
		"u:s3cret@tcp(h/d", "u:s3cret@h", "tidb://u:s3cret@h:port/d", "tidb://u:s3cret@h/a/b",
	} {
		_, err := mysqldialect.DSN(bad)
		if !errors.Is(err, mysqldialect.ErrBadDSN) {
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
		"mysql://u:s3cret@h:3307/d?clientFoundRows=true":   "mysql://u:xxxxx@h:3307/d",
		"root@tcp(127.0.0.1:3306)/test":                    "mysql://root@127.0.0.1:3306/test",
		"mysql://u@/d?socket=/run/m.sock":                  "mysql://u@/d?socket=%2Frun%2Fm.sock",
		"mysql://u:s3cret@h:bad/d":                         "mysql://(invalid DSN)",
		"tidb://u:s3cret@h/d":                              "tidb://u:xxxxx@h:4000/d",
		"TIDB://u@h:4001/d?tidb_txn_mode=%27optimistic%27": "tidb://u@h:4001/d",
		"tidb://u:s3cret@h:bad/d":                          "mysql://(invalid DSN)",
	}
	for in, want := range cases {
		if got := mysqldialect.Display(in); got != want {
			t.Errorf("Display(%q) = %q, want %q", in, got, want)
		}
	}
	for in, tidb := range map[string]bool{
		"tidb://u@h/d": true, " TiDB://u@h/d": true, "mysql://u@h:4000/d": false,
		"mariadb://u@h/d": false, "u@tcp(h:4000)/d": false, "tidb:x": false, "": false,
	} {
		if got := mysqldialect.SchemeDialect(in); got.TiDB() != tidb {
			t.Errorf("SchemeDialect(%q) = %s", in, got.Name())
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
	cfg, err := mysqldialect.Config(os.Getenv(testdb.EnvMySQL))
	if err != nil {
		t.Fatal(err)
	}
	u := (&url.URL{Scheme: "mysql", User: url.UserPassword(cfg.User, cfg.Passwd), Host: cfg.Addr, Path: "/" + cfg.DBName}).String()
	if cfg.Net == "unix" {
		u = (&url.URL{Scheme: "mysql", User: url.UserPassword(cfg.User, cfg.Passwd), Path: "/" + cfg.DBName, RawQuery: "socket=" + url.QueryEscape(cfg.Addr)}).String()
	}
	dsn, err := mysqldialect.DSN(u)
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
		t.Fatalf("URL form %s: %v (parseTime must be on)", mysqldialect.Display(u), err)
	}
}

// FuzzConfig: no input panics, every error matches ErrBadDSN, and what
// parses formats to a DSN the driver accepts.
func FuzzConfig(f *testing.F) {
	for _, s := range []string{
		"root@tcp(127.0.0.1:3306)/test", "mysql://u:p@h:1/d?clientFoundRows=true", "mysql://u@/d?socket=/s",
		"mysql://[::1", "mysql://u:%zz@h/d", "u:p@tcp(h/d", "/", "mariadb://", "mysql://u:p@h/d?loc=%",
		"tidb://root@127.0.0.1:4000/test", "tidb://u@/d?socket=/s&tidb_txn_mode=x", "tidb://",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		cfg, err := mysqldialect.Config(s)
		if err != nil {
			if !errors.Is(err, mysqldialect.ErrBadDSN) {
				t.Fatalf("%q: error %v does not match ErrBadDSN", s, err)
			}
			return
		}
		if _, err := gomysql.ParseDSN(cfg.FormatDSN()); err != nil {
			t.Fatalf("%q: formatted DSN does not parse: %v", s, err)
		}
		_ = mysqldialect.Display(s)
	})
}
