package mysql

import (
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
