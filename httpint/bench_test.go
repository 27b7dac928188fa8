package httpint_test

import (
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/opledger/opledger/httpint"
	"github.com/opledger/opledger/internal/testkit/testdb"
	"github.com/opledger/opledger/keyed"
)

// BenchmarkPassThrough: a request to a route that is not keyed, straight
// to the handler and through the middleware.
func BenchmarkPassThrough(b *testing.B) {
	tg := testdb.Targets()[0]
	e := newEnv(b, testdb.NewEnv(b, tg.Name, tg.Dialect, tg.Open(b, 2)), nil)
	ok := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusNoContent) })
	for name, h := range map[string]http.Handler{"bare": ok, "middleware": e.mw.Handler(ok)} {
		b.Run(name, func(b *testing.B) {
			r := httptest.NewRequest(http.MethodGet, "/items", nil)
			for b.Loop() {
				h.ServeHTTP(httptest.NewRecorder(), r)
			}
		})
	}
}

// BenchmarkKeyed: keyed POST /items on SQLite in process (no network): a
// new key each time (claim, handler's insert, completion, commit) and a
// replay of a stored response.
func BenchmarkKeyed(b *testing.B) {
	tg := testdb.Targets()[0]
	e := newEnv(b, testdb.NewEnv(b, tg.Name, tg.Dialect, tg.Open(b, 4)), nil, keyed.WithLockWait(10*time.Second))
	h := e.srv.Config.Handler
	post := func(key string) int {
		r := httptest.NewRequest(http.MethodPost, "/items", strings.NewReader("bench"))
		r.Header.Set(callerHeader, "bench")
		r.Header.Set(httpint.KeyHeader, `"`+key+`"`)
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		return w.Code
	}
	b.Run("execute", func(b *testing.B) {
		n := 0
		for b.Loop() {
			n++
			if c := post("exec-" + strconv.Itoa(n)); c != http.StatusCreated {
				b.Fatalf("status %d", c)
			}
		}
	})
	b.Run("replay", func(b *testing.B) {
		if c := post("replay"); c != http.StatusCreated {
			b.Fatalf("status %d", c)
		}
		for b.Loop() {
			if c := post("replay"); c != http.StatusCreated {
				b.Fatalf("status %d", c)
			}
		}
	})
}
