package grpcint_test

import (
	"context"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"

	"github.com/opledger/opledger/grpcint"
	"github.com/opledger/opledger/internal/testkit/testdb"
	"github.com/opledger/opledger/internal/testkit/wallet/walletpb"
	"github.com/opledger/opledger/keyed"
	"github.com/opledger/opledger/ledger"
	"github.com/opledger/opledger/policy"
)

// TestPoolOfOne: with db.SetMaxOpenConns(1) and a handler stuck inside
// its transaction, a duplicate with the same key gets ABORTED
// OPERATION_IN_PROGRESS and a call with another key UNAVAILABLE
// STORAGE_BUSY, both with pushback, within the lock-wait bound rather than
// at the client's deadline; once the handler ends, the duplicate replays.
func TestPoolOfOne(t *testing.T) {
	for _, tg := range testdb.Targets() {
		t.Run(tg.Name, func(t *testing.T) { testPoolOfOne(t, tg) })
	}
}

func testPoolOfOne(t *testing.T, tg testdb.Target) {
	db := tg.Open(t, 1)
	table, biz := newTables(t, db, tg.Dialect)
	store, err := ledger.New(tg.Dialect, ledger.WithTable(table))
	if err != nil {
		t.Fatal(err)
	}
	e := serveLedger(t, db, store, biz, nil, keyed.WithLockWait(300*time.Millisecond), keyed.WithInProgressPushback(50*time.Millisecond))
	ctx := context.Background()
	first := make(chan error, 1)
	go func() {
		for {
			// On a loaded machine even the first call can find its BEGIN
			// slower than the bound: it is told STORAGE_BUSY, and sent again.
			_, err := e.pc.Deposit(as(ctx, "alice", "k-stuck"), deposit("block", 1))
			if grpcint.ReasonOf(err) != keyed.StorageBusy.Row().Reason {
				first <- err
				return
			}
		}
	}()
	select {
	case <-e.gate.entered:
	case err := <-first:
		t.Fatalf("the call to get stuck ended first: %v", err)
	}

	// A hang guard, far past the bound.
	dctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	var trl metadata.MD
	_, err = e.pc.Deposit(as(dctx, "alice", "k-stuck"), deposit("block", 1), grpc.Trailer(&trl))
	wantStatus(t, err, codes.Aborted, keyed.InProgress.Row().Reason)
	if len(trl.Get(policy.PushbackHeader)) != 1 {
		t.Errorf("in progress without pushback: trailer %v", trl)
	}
	_, err = e.pc.Deposit(as(dctx, "alice", "k-other"), deposit("other", 1), grpc.Trailer(&trl))
	wantStatus(t, err, codes.Unavailable, keyed.StorageBusy.Row().Reason)
	if len(trl.Get(policy.PushbackHeader)) != 1 {
		t.Errorf("storage busy without pushback: trailer %v", trl)
	}
	// A resolve of the stuck key waits for a connection too, and says the
	// call is in progress.
	resolveCtx := metadata.AppendToOutgoingContext(grpcint.WithKey(as(dctx, "alice", ""), "k-stuck"), grpcint.ResolveHeader, "1")
	err = e.conn.Invoke(resolveCtx, walletpb.DepositMethod, deposit("block", 1), new(walletpb.DepositReply))
	wantStatus(t, err, codes.Aborted, keyed.InProgress.Row().Reason)
	// The kit's client retries it after the pushback (nothing was
	// committed), and says so when its attempts run out.
	_, pc := appClient(t, e.addr, fastClient()...)
	_, err = pc.Deposit(as(dctx, "alice", "k-other-2"), deposit("other", 1))
	if ci := wantCallInfo(t, err, keyed.StorageBusy.Row().Reason, policy.Retry); ci.Attempts != 3 || ci.Resolves != 0 {
		t.Errorf("CallInfo %+v: want 3 runs and no resolve", ci)
	}
	close(e.gate.release)
	if err := <-first; err != nil {
		t.Fatal(err)
	}
	if _, err := e.pc.Deposit(as(dctx, "alice", "k-stuck"), deposit("block", 1), grpc.Trailer(&trl)); err != nil || trl.Get(grpcint.ReplayedHeader)[0] != "true" {
		t.Errorf("after the handler ended: %v, trailer %v; want a replay", err, trl)
	}
	if st := e.server.Stats(); st.Executed != 1 {
		t.Errorf("server stats %+v: want one execution", st)
	}
}
