package mysqldialect

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	gomysql "github.com/go-sql-driver/mysql"

	"github.com/opledger/opledger/dialects"
	"github.com/opledger/opledger/internal/dialectkit"
)

func TestLockWaitSeconds(t *testing.T) {
	cases := map[time.Duration]int64{
		time.Nanosecond:                        1,
		300 * time.Millisecond:                 1,
		time.Second:                            1,
		time.Second + time.Millisecond:         2,
		90 * time.Second:                       90,
		1 << 62:                                1073741824,
		maxLockWaitSeconds * time.Second:       maxLockWaitSeconds,
		(maxLockWaitSeconds + 1) * time.Second: maxLockWaitSeconds,
	}
	for d, want := range cases {
		if got := lockWaitSeconds(d); got != want {
			t.Errorf("lockWaitSeconds(%v) = %d, want %d", d, got, want)
		}
	}
}

// TestMigrationLockName: the named lock is the kit's ("opledger:" and the
// table), within MySQL's 64 characters for every valid table name.
func TestMigrationLockName(t *testing.T) {
	if got := newMySQLLocker("ops").name; got != "opledger:ops" {
		t.Fatalf("lock name %q", got)
	}
	long := strings.Repeat("a", dialectkit.MaxTableNameLen)
	if n := len(newMySQLLocker(long).name); n > 64 {
		t.Fatalf("lock name of %d characters for a %d-byte table", n, len(long))
	}
	if l, ok := New().Migrations().Lock("ops").(mysqlLocker); !ok || l != newMySQLLocker("ops") || l.timeout != mysqlLockTimeout {
		t.Fatalf("Migrations().Lock returns %#v", New().Migrations().Lock("ops"))
	}
}

// TestTiDBTxnVerdict: CheckTx's decision from the two session variables,
// as TiDB answers them (booleans as ON/OFF or 1/0).
func TestTiDBTxnVerdict(t *testing.T) {
	for _, c := range []struct {
		mode, inPlace string
		ok            bool
		names         string // what the refusal must name
	}{
		{"pessimistic", "ON", true, ""},
		{"pessimistic", "1", true, ""},
		{"PESSIMISTIC", "on", true, ""},
		{"optimistic", "ON", false, "tidb_txn_mode = 'pessimistic'"},
		{"", "ON", false, "tidb_txn_mode = 'pessimistic'"},
		{"pessimistic", "OFF", false, "tidb_constraint_check_in_place_pessimistic"},
		{"pessimistic", "0", false, "set it to ON"},
		{"pessimistic", "", false, "tidb_constraint_check_in_place_pessimistic"},
	} {
		err := tidbTxnVerdict(c.mode, c.inPlace)
		if c.ok {
			if err != nil {
				t.Errorf("%q/%q: %v", c.mode, c.inPlace, err)
			}
			continue
		}
		if !errors.Is(err, dialects.ErrUnsuitableTx) || !strings.Contains(err.Error(), c.names) {
			t.Errorf("%q/%q: %v, want ErrUnsuitableTx naming %q", c.mode, c.inPlace, err, c.names)
		}
	}
}

// TestTiDBSessionSQL: BeginBounded's SET on TiDB bounds the wait within
// TiDB's range and forces pessimistic mode; only plain words go back
// between quotes.
func TestTiDBSessionSQL(t *testing.T) {
	for d, want := range map[time.Duration]int64{time.Millisecond: 1, 1500 * time.Millisecond: 2, time.Hour: 3600, 2 * time.Hour: 3600} {
		if got := tidbLockWaitSeconds(d); got != want {
			t.Errorf("tidbLockWaitSeconds(%v) = %d, want %d", d, got, want)
		}
	}
	for s, ok := range map[string]bool{"pessimistic": true, "optimistic": true, "": true, "x'y": false, "A": false, "opt mistic": false} {
		if isPlainWord(s) != ok {
			t.Errorf("isPlainWord(%q) = %v", s, !ok)
		}
	}
}

// TestMigrationLockRetries: the migration lock asks GET_LOCK again after a
// transient lock error (TiDB's "pessimistic lock retry limit reached"
// under contention and its unknown error "lock wait timeout" while the
// holder runs DDL, which arrive instead of 0), within its bound; any
// other error ends it at once; a bound that passes with the error still
// coming names it. (The GET_LOCK itself, waiting, granted and timed out,
// runs against MariaDB in TestMigrationLock.)
func TestMigrationLockRetries(t *testing.T) {
	retryLimit := &gomysql.MySQLError{Number: 1105, Message: "pessimistic lock retry limit reached"}
	copy(retryLimit.SQLState[:], "HY000")
	if !lockContention(retryLimit) || !lockContention(fmt.Errorf("x: %w", retryLimit)) {
		t.Fatal("TiDB's lock retry limit is not a lock conflict")
	}
	if waitTimeout := (&gomysql.MySQLError{Number: 1105, Message: "lock wait timeout"}); !lockContention(waitTimeout) {
		t.Fatal("TiDB's GET_LOCK timing out with an unknown error is not a lock conflict")
	}
	for _, err := range []error{
		&gomysql.MySQLError{Number: 1105, Message: "some other unknown error"},
		&gomysql.MySQLError{Number: 1064, Message: "syntax"},
		errors.New("plain"), context.Canceled,
	} {
		if lockContention(err) {
			t.Errorf("%v read as a lock conflict", err)
		}
	}
	script := func(answers ...any) func(context.Context) (sql.NullInt64, error) {
		return func(context.Context) (sql.NullInt64, error) {
			a := answers[0]
			if len(answers) > 1 {
				answers = answers[1:]
			}
			if err, ok := a.(error); ok {
				return sql.NullInt64{}, err
			}
			return sql.NullInt64{Int64: int64(a.(int)), Valid: true}, nil
		}
	}
	l := newMySQLLocker("ops")
	ctx := context.Background()
	if err := l.wait(ctx, script(retryLimit, 0, retryLimit, retryLimit, 1)); err != nil {
		t.Fatalf("granted after transient errors and a timed-out wait: %v", err)
	}
	other := &gomysql.MySQLError{Number: 1142, Message: "command denied"}
	if err := l.wait(ctx, script(retryLimit, other, 1)); !errors.As(err, new(*gomysql.MySQLError)) || !strings.Contains(err.Error(), "denied") {
		t.Fatalf("another error: %v, want it returned", err)
	}
	l.timeout = 200 * time.Millisecond
	if err := l.wait(ctx, script(retryLimit)); err == nil || !strings.Contains(err.Error(), "not granted within") || !strings.Contains(err.Error(), "retry limit") {
		t.Fatalf("the error until the bound: %v", err)
	}
	cctx, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
	defer cancel()
	l.timeout = time.Hour
	if err := l.wait(cctx, script(retryLimit)); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("the error until the context ends: %v", err)
	}
}

// ddlDB is a dialectkit.DB whose ExecContext answers each statement with
// the next of errs (nil once they run out), recording the statements.
type ddlDB struct {
	errs  []error
	stmts []string
}

func (f *ddlDB) ExecContext(_ context.Context, q string, _ ...any) (sql.Result, error) {
	f.stmts = append(f.stmts, q)
	if len(f.errs) == 0 {
		return nil, nil
	}
	err := f.errs[0]
	f.errs = f.errs[1:]
	return nil, err
}

func (f *ddlDB) QueryContext(context.Context, string, ...any) (*sql.Rows, error) {
	return nil, errors.New("ddlDB: no queries")
}

// TestDropPartitionSchemaChanged: TiDB refuses a DROP PARTITION during
// which another DDL changed the schema (8028, 8027: try again); the TiDB
// variant runs it again, up to ddlAttempts times, and takes a partition
// its earlier run dropped (1507) as dropped. Seen against TiDB when
// other tests created tables meanwhile.
func TestDropPartitionSchemaChanged(t *testing.T) {
	changed := &gomysql.MySQLError{Number: tidbInfoSchemaChanged, Message: "Information schema is changed during the execution of the statement"}
	expired := &gomysql.MySQLError{Number: tidbInfoSchemaExpired, Message: "Information schema is out of date"}
	gone := &gomysql.MySQLError{Number: erDropPartitionNotExist, Message: "Error in list of partitions to DROP"}
	other := &gomysql.MySQLError{Number: 1146, Message: "Table doesn't exist"}
	p := dialectkit.Partition{Name: "p20261206", Kind: dialectkit.Bucket}
	cases := []struct {
		name  string
		errs  []error
		runs  int
		fails bool
	}{
		{"once", nil, 1, false},
		{"after two changes", []error{changed, expired}, 3, false},
		{"dropped by the run that was refused", []error{changed, gone}, 2, false},
		{"changed every time", []error{changed, changed, changed, changed, changed, changed}, ddlAttempts, true},
		{"another error", []error{other}, 1, true},
	}
	for _, c := range cases {
		db := &ddlDB{errs: c.errs}
		err := NewTiDB().DropPartition(context.Background(), db, "ledger", p)
		if (err != nil) != c.fails || len(db.stmts) != c.runs {
			t.Errorf("%s: %v after %d statements, want failure %v after %d", c.name, err, len(db.stmts), c.fails, c.runs)
		}
		for _, s := range db.stmts {
			if s != "ALTER TABLE `ledger` DROP PARTITION `p20261206`" {
				t.Errorf("%s: ran %q", c.name, s)
			}
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	db := &ddlDB{errs: []error{changed, changed}}
	if err := NewTiDB().DropPartition(ctx, db, "ledger", p); !errors.Is(err, changed) || len(db.stmts) != 1 {
		t.Errorf("cancelled: %v after %d statements, want the refusal after 1", err, len(db.stmts))
	}
}
