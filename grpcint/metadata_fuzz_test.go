package grpcint_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/opledger/opledger/grpcint"
	"github.com/opledger/opledger/internal/testkit/testdb"
	"github.com/opledger/opledger/internal/testkit/wallet"
	"github.com/opledger/opledger/internal/testkit/wallet/walletpb"
	"github.com/opledger/opledger/ledger"
)

// FuzzServerMetadata drives the server interceptor with any idempotency
// key, caller header and resolve marker: it never panics, every error is a
// status with a reason of the kit's (or the handler's own), no message
// contains the key, and a call that succeeded replays when sent again.
func FuzzServerMetadata(f *testing.F) {
	tg := testdb.Targets()[0] // SQLite
	db := tg.Open(f, 4)
	table, biz := newTables(f, db, tg.Dialect)
	store, err := ledger.New(tg.Dialect, ledger.WithTable(table))
	if err != nil {
		f.Fatal(err)
	}
	cat, err := wallet.Catalog()
	if err != nil {
		f.Fatal(err)
	}
	svc, err := wallet.NewService(db, tg.Dialect, biz)
	if err != nil {
		f.Fatal(err)
	}
	s, err := grpcint.NewServer(db, store, cat, grpcint.CallerFromTrustedHeader(callerHeader))
	if err != nil {
		f.Fatal(err)
	}
	ic := s.UnaryServerInterceptor()
	info := &grpc.UnaryServerInfo{FullMethod: walletpb.DepositMethod}
	handler := func(ctx context.Context, req any) (any, error) {
		return svc.Deposit(ctx, req.(*walletpb.DepositRequest))
	}
	for _, seed := range []struct {
		key, caller string
		resolve     bool
	}{
		{"K7XQ2M4PLD3RTY6WZ5NB8VC9HJ", "alice", false},
		{"", "alice", false},
		{"k", "", false},
		{"k", "alice", true},
		{strings.Repeat("k", 256), "alice", false},
		{"key with spaces", "bob\x00", false},
		{"ünïcode", "alice", false},
	} {
		f.Add(seed.key, seed.caller, seed.resolve)
	}
	f.Fuzz(func(t *testing.T, key, caller string, resolve bool) {
		md := metadata.MD{}
		if key != "" {
			md.Append(grpcint.KeyHeader, key)
		}
		if caller != "" {
			md.Append(callerHeader, caller)
		}
		if resolve {
			md.Append(grpcint.ResolveHeader, "1")
		}
		ctx, cancel := context.WithTimeout(metadata.NewIncomingContext(context.Background(), md), 10*time.Second)
		defer cancel()
		req := &walletpb.DepositRequest{Account: "a", Amount: 1, Reference: "fuzz"}
		call := func() (any, error) { return ic(ctx, req, info, handler) }
		resp, err := call()
		if err != nil {
			st, ok := status.FromError(err)
			if !ok {
				t.Fatalf("not a status: %v", err)
			}
			if ctx.Err() != nil {
				t.Fatalf("key %q caller %q resolve %v: the call did not end: %v (pool %+v)", key, caller, resolve, err, db.Stats())
			}
			if grpcint.ReasonOf(err) == "" {
				t.Fatalf("a keyed call's error without the kit's reason: %v", err)
			}
			// Eight bytes or more: a shorter key can be a word of the
			// kit's own message ("with" in "running the call again with
			// it is safe"), which is no leak.
			if len(key) >= 8 && strings.Contains(st.Message(), key) {
				t.Fatalf("the message contains the key: %q", st.Message())
			}
			return
		}
		if resolve {
			return // a resolve that found a stored response
		}
		again, err := call()
		if err != nil || !sameReply(resp, again) {
			t.Fatalf("retry of a call that succeeded: %v, %v; want the same response", again, err)
		}
	})
}

func sameReply(a, b any) bool {
	ra, ok1 := a.(*walletpb.DepositReply)
	rb, ok2 := b.(*walletpb.DepositReply)
	return ok1 && ok2 && ra.GetDepositId() == rb.GetDepositId() && ra.GetReference() == rb.GetReference()
}
