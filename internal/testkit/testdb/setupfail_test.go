package testdb

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"runtime"
	"strings"
	"testing"
)

// fatalTB is a testing.TB whose Fatal stops the goroutine and is recorded,
// and whose cleanups are kept for the test to run, so that a set-up that
// fails the test can itself be tested.
type fatalTB struct {
	testing.TB
	fatal    string
	errors   []string
	cleanups []func()
}

func (f *fatalTB) Helper()                      {}
func (f *fatalTB) Cleanup(fn func())            { f.cleanups = append(f.cleanups, fn) }
func (f *fatalTB) Fatal(args ...any)            { f.fatal = fmt.Sprint(args...); runtime.Goexit() }
func (f *fatalTB) Errorf(s string, args ...any) { f.errors = append(f.errors, fmt.Sprintf(s, args...)) }
func (f *fatalTB) Fatalf(s string, args ...any) {
	f.fatal = fmt.Sprintf(s, args...)
	runtime.Goexit()
}

// run calls fn as a test body would, on a goroutine of its own, and then
// the cleanups it registered, last first.
func (f *fatalTB) run(fn func(t testing.TB)) {
	done := make(chan struct{})
	go func() {
		defer close(done)
		fn(f)
	}()
	<-done
}

func (f *fatalTB) cleanUp() {
	for i := len(f.cleanups) - 1; i >= 0; i-- {
		f.cleanups[i]()
	}
}

// TestNewTableFailedSetUp: on every target, a ledger table whose
// migrations fail (the last one, after the ledger's and the outbox's
// tables exist) fails the test with nothing left behind, neither when it
// fails nor after the test's cleanups, and no error from them.
func TestNewTableFailedSetUp(t *testing.T) {
	ParallelOn(t, map[string]int{"postgres": 2, "mysql": 2})
	for _, tg := range Targets() {
		t.Run(tg.Name, func(t *testing.T) {
			db := tg.Open(t, 2)
			var b [5]byte
			_, _ = rand.Read(b[:])
			table := "opl_tfail_" + hex.EncodeToString(b[:])
			ft := &fatalTB{TB: t}
			ft.run(func(tb testing.TB) { newTable(tb, db, FailingSchema(tg.Dialect), table) })
			if !strings.Contains(ft.fatal, "migrate up") || !strings.Contains(ft.fatal, "no_such_column") {
				t.Fatalf("the set-up failed with %q, want the failing migration's error", ft.fatal)
			}
			if left := TablesLike(t, db, tg.Dialect, table); len(left) != 0 {
				ft.cleanUp()
				t.Fatalf("the failed set-up left %v behind", left)
			}
			ft.cleanUp()
			if left := TablesLike(t, db, tg.Dialect, table); len(left) != 0 || len(ft.errors) != 0 {
				t.Fatalf("after the cleanups: tables %v, errors %q", left, ft.errors)
			}
		})
	}
}
