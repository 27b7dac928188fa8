package httpint_test

import (
	"context"
	"fmt"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/opledger/opledger/internal/testkit/testdb"
	"github.com/opledger/opledger/keyed"
)

// herdTargets are SQLite, PostgreSQL through pgx and MariaDB (lib/pq adds
// nothing HTTP-specific; the ledger's own herd runs through it).
func herdTargets(t *testing.T, conns int, f func(t *testing.T, e *env), opts ...keyed.ServerOption) {
	testdb.ForEachParallel(t, conns, func(t *testing.T, te *testdb.Env) {
		if te.Name == "postgres/pq" {
			t.Skip("lib/pq: covered by the ledger's and txmiddleware's herds")
		}
		f(t, newEnv(t, te, nil, append([]keyed.ServerOption{keyed.WithLockWait(10 * time.Second)}, opts...)...))
	})
}

// TestHerd: 64 concurrent requests per key, 50 keys, through real HTTP
// over loopback: the handler runs once per key, one business row per key,
// one response executed and 63 replayed, all with the same status,
// replayed headers and body.
func TestHerd(t *testing.T) { herd(t, 50, false) }

// TestHerdClaimAtCommit: the same herd with the route claimed at commit
// (WithClaimAtCommit): the handler runs for concurrent duplicates too, but
// one business row per key, one response executed, the others replayed
// byte for byte.
func TestHerdClaimAtCommit(t *testing.T) { herd(t, 20, true) }

func herd(t *testing.T, keys int, atCommit bool) {
	const callers = 64
	var opts []keyed.ServerOption
	if atCommit {
		opts = append(opts, keyed.WithClaimAtCommit("POST /items"))
	}
	herdTargets(t, 16, func(t *testing.T, e *env) {
		ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
		defer cancel()
		var (
			mu        sync.Mutex
			conflicts int
		)
		for k := range keys {
			key := fmt.Sprintf("herd-%d", k)
			ref := "ref-" + key
			before := e.runs.Load()
			var (
				wg    sync.WaitGroup
				start = make(chan struct{})
				got   = make([]response, callers)
				errs  = make([]error, callers)
			)
			for w := range callers {
				wg.Add(1)
				go func() {
					defer wg.Done()
					<-start
					for {
						got[w], errs[w] = e.send(ctx, req{caller: "tenant", key: key, body: ref})
						if errs[w] != nil || got[w].status != http.StatusConflict {
							return
						}
						// Past the wait bound: retry, as the 409 says.
						mu.Lock()
						conflicts++
						mu.Unlock()
						time.Sleep(50 * time.Millisecond)
					}
				}()
			}
			close(start)
			wg.Wait()
			executed := 0
			var first response
			for w := range callers {
				if errs[w] != nil {
					t.Fatalf("key %s request %d: %v", key, w, errs[w])
				}
				if !got[w].replayed() {
					executed++
					first = got[w]
				}
			}
			if executed != 1 || (!atCommit && e.runs.Load()-before != 1) {
				t.Fatalf("key %s: %d responses not replayed, handler ran %d times; want 1 and 1", key, executed, e.runs.Load()-before)
			}
			for w, r := range got {
				if r.status != http.StatusCreated || r.body != first.body ||
					r.header.Get("Content-Type") != first.header.Get("Content-Type") || r.header.Get("Location") != first.header.Get("Location") {
					t.Fatalf("key %s request %d: %d %v %q; the executed one: %d %v %q", key, w, r.status, r.header, r.body, first.status, first.header, first.body)
				}
				if r.replayed() && (r.header.Get("Set-Cookie") != "" || r.header.Get("X-Not-Replayed") != "") {
					t.Fatalf("key %s request %d: a replay carries headers that are not allow-listed: %v", key, w, r.header)
				}
			}
			if n := e.BizRows(t, ref); n != 1 {
				t.Fatalf("key %s: %d business rows", key, n)
			}
		}
		s := e.mw.Stats()
		if s.Executed != int64(keys) || s.Replayed < int64(keys*(callers-1)) {
			t.Errorf("stats %+v: want %d executed, at least %d replayed", s, keys, keys*(callers-1))
		}
		t.Logf("%s: %d keys × %d concurrent requests: %+v, %d answered 409 and retried; the handler ran %d times", e.Name, keys, callers, s, conflicts, e.runs.Load())
	}, opts...)
}
