package mysql

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/opledger/opledger/dialects"
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
	long := strings.Repeat("a", dialects.MaxTableNameLen)
	if n := len(newMySQLLocker(long).name); n > 64 {
		t.Fatalf("lock name of %d characters for a %d-byte table", n, len(long))
	}
	if l, ok := New().Migrations().Lock("ops").(mysqlLocker); !ok || l != newMySQLLocker("ops") {
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
