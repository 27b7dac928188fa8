package httpint_test

import (
	"context"
	"testing"
	"time"

	"github.com/opledger/opledger/httpint"
	"github.com/opledger/opledger/internal/testkit/testdb"
	"github.com/opledger/opledger/keyed"
)

// TestPoolOfOne: with db.SetMaxOpenConns(1) and a handler stuck inside
// its transaction, a duplicate with the same key gets 409
// (operation-in-progress) and a request with another key 503
// (storage-busy), both with Retry-After, within the lock-wait bound
// rather than at the client's timeout; once the handler ends, the
// duplicate replays.
func TestPoolOfOne(t *testing.T) {
	for _, tg := range testdb.Targets() {
		t.Run(tg.Name, func(t *testing.T) { testPoolOfOne(t, tg) })
	}
}

func testPoolOfOne(t *testing.T, tg testdb.Target) {
	te := testdb.NewEnv(t, tg.Name, tg.Dialect, tg.Open(t, 1))
	e := newEnv(t, te, nil, keyed.WithLockWait(300*time.Millisecond))
	// A hang guard, far past the bound.
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	stuck := req{caller: "alice", key: "k-stuck", body: "r", header: map[string]string{testHeader: "block"}}
	done := make(chan response, 1)
	go func() {
		for {
			// On a loaded machine even the first request can find its
			// BEGIN slower than the bound: it is told storage-busy, and
			// sends again.
			r, _ := e.send(ctx, stuck)
			if r.status != 503 || ctx.Err() != nil {
				done <- r
				return
			}
		}
	}()
	select {
	case <-e.entered:
	case r := <-done:
		t.Fatalf("the request to get stuck ended first: %d %q", r.status, r.body)
	}

	r, err := e.send(ctx, req{caller: "alice", key: "k-stuck", body: "r"})
	if err != nil {
		t.Fatalf("duplicate behind a stuck handler: %v", err)
	}
	wantProblem(t, r, keyed.InProgress.String(), "k-stuck")
	r, err = e.send(ctx, req{caller: "alice", key: "k-other", body: "other"})
	if err != nil {
		t.Fatalf("another key behind a stuck handler: %v", err)
	}
	wantProblem(t, r, keyed.StorageBusy.String(), "k-other")
	// A resolve of the stuck key waits for a connection too, and says the
	// request is in progress.
	r, err = e.send(ctx, req{caller: "alice", key: "k-stuck", header: map[string]string{httpint.ResolveHeader: "1"}})
	if err != nil {
		t.Fatal(err)
	}
	wantProblem(t, r, keyed.InProgress.String(), "k-stuck")
	close(e.release)
	if r := <-done; r.status != 201 {
		t.Fatalf("the stuck request: %d %q", r.status, r.body)
	}
	if r := e.do(t, req{caller: "alice", key: "k-stuck", body: "r"}); !r.replayed() {
		t.Errorf("after the stuck request committed: %d, want a replay", r.status)
	}
	if r := e.do(t, req{caller: "alice", key: "k-other", body: "other"}); r.status != 201 || r.replayed() {
		t.Errorf("another key once the pool is free: %d (replayed %v), want it run", r.status, r.replayed())
	}
}
