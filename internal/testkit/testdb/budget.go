package testdb

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// Connection budgets per database server, shared by every test process of
// the machine: `go test ./...` runs several test binaries at once, and
// PostgreSQL allows 100 connections (3 of them for superusers) and MariaDB
// 151. A reservation larger than the budget is granted when nothing else
// is reserved.
const (
	PostgresBudget = 85
	MySQLBudget    = 130
)

var serverBudgets = map[string]int{"postgres": PostgresBudget, "mysql": MySQLBudget}

// budgetWait bounds how long a reservation waits: past it, the test goes
// ahead anyway and says so (a wait that long means tests that each hold
// part of the budget wait for more, and going ahead beats a deadlock).
const budgetWait = 3 * time.Minute

// reserved marks the tests that hold a reservation made by Reserve, so
// that Open does not reserve again for them.
var reserved sync.Map // testing.TB → struct{}

// Reserve holds n connections of family's server budget ("postgres" or
// "mysql"; other families have none) until t ends, waiting while other
// tests, in this process or any other, hold too much of it. Target.Open
// reserves its pool's size by itself; call Reserve first, with the sum,
// in a test that opens several pools (after t.Parallel, never before: a
// paused test must not hold connections), or for a pool opened without
// Target.Open.
func Reserve(t testing.TB, family string, n int) {
	t.Helper()
	if reserve(t, family, n) {
		reserved.Store(t, struct{}{})
		t.Cleanup(func() { reserved.Delete(t) })
	}
}

// reserveForOpen is Open's reservation: none when t reserved already.
func reserveForOpen(t testing.TB, family string, n int) {
	if _, ok := reserved.Load(t); !ok {
		reserve(t, family, n)
	}
}

// reserve takes n connections of the budget until t ends and reports
// whether family has a budget. A reservation is a file in a directory of
// the system's temporary folder, named after its size and locked with
// flock for as long as it is held: a process that dies lets go of its
// locks, and the next reservation removes its files.
func reserve(t testing.TB, family string, n int) bool {
	t.Helper()
	limit, ok := serverBudgets[family]
	if !ok || n <= 0 {
		return ok
	}
	dir := filepath.Join(os.TempDir(), "opledger-testdb-budget-"+family)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatalf("connection budget: %v", err)
	}
	start := time.Now()
	for {
		f, err := tryReserve(dir, limit, n, time.Since(start) > budgetWait)
		if err != nil {
			t.Fatalf("connection budget: %v", err)
		}
		if f != nil {
			if waited := time.Since(start); waited > budgetWait {
				t.Logf("connection budget: went ahead after %v without %d %s connections free", waited.Round(time.Second), n, family)
			}
			t.Cleanup(func() {
				_ = os.Remove(f.Name())
				_ = f.Close() // releases the lock
			})
			return true
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// tryReserve takes the reservation if it fits (or force), under the
// directory's lock, and returns its locked file; nil when it must wait.
func tryReserve(dir string, limit, n int, force bool) (*os.File, error) {
	lock, err := os.OpenFile(filepath.Join(dir, ".lock"), os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return nil, err
	}
	defer lock.Close()
	if err := syscall.Flock(int(lock.Fd()), syscall.LOCK_EX); err != nil {
		return nil, err
	}
	defer syscall.Flock(int(lock.Fd()), syscall.LOCK_UN)
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	used := 0
	for _, e := range entries {
		name := e.Name()
		if !strings.HasPrefix(name, "r-") {
			continue
		}
		size, _ := strconv.Atoi(name[strings.LastIndexByte(name, '-')+1:])
		held, err := isHeld(filepath.Join(dir, name))
		if err != nil {
			continue // removed meanwhile
		}
		if !held {
			_ = os.Remove(filepath.Join(dir, name))
			continue
		}
		used += size
	}
	if used > 0 && used+n > limit && !force {
		return nil, nil
	}
	var b [6]byte
	_, _ = rand.Read(b[:])
	f, err := os.OpenFile(filepath.Join(dir, fmt.Sprintf("r-%d-%s-%d", os.Getpid(), hex.EncodeToString(b[:]), n)), os.O_CREATE|os.O_EXCL|os.O_RDWR, 0o644)
	if err != nil {
		return nil, err
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		f.Close()
		return nil, err
	}
	return f, nil
}

// isHeld reports whether the reservation file's lock is held: flock locks
// belong to an open file, so even this process's own reservations show as
// held to a new open.
func isHeld(path string) (bool, error) {
	f, err := os.Open(path)
	if err != nil {
		return false, err
	}
	defer f.Close()
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		return true, nil
	}
	_ = syscall.Flock(int(f.Fd()), syscall.LOCK_UN)
	return false, nil
}
