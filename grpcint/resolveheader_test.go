package grpcint_test

import (
	"context"
	"net"
	"strings"
	"sync"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/reflection"
	reflectionpb "google.golang.org/grpc/reflection/grpc_reflection_v1"
	"google.golang.org/grpc/status"

	"github.com/opledger/opledger/grpcint"
	"github.com/opledger/opledger/internal/testkit/testdb"
	"github.com/opledger/opledger/internal/testkit/wallet"
	"github.com/opledger/opledger/internal/testkit/wallet/walletpb"
	"github.com/opledger/opledger/keyed"
	"github.com/opledger/opledger/ledger"
)

// resolving is ctx with the resolve header's value v.
func resolving(ctx context.Context, v string) context.Context {
	return metadata.AppendToOutgoingContext(ctx, grpcint.ResolveHeader, v)
}

// TestResolveHeaderValue: only 1 and true (any case) make a resolve; any
// other value is refused as request-unreadable (INVALID_ARGUMENT
// INVALID_KEYED_REQUEST) on a keyed and on a non-keyed unary method,
// without running the handler or claiming the key.
func TestResolveHeaderValue(t *testing.T) {
	var mu sync.Mutex
	var sent [][]string
	record := func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		md, _ := metadata.FromIncomingContext(ctx)
		if v := md.Get(grpcint.ResolveHeader); len(v) > 0 {
			mu.Lock()
			sent = append(sent, v)
			mu.Unlock()
		}
		return handler(ctx, req)
	}
	e, _, _ := sqliteEnv(t, nil, record)
	ctx := context.Background()
	for _, v := range []string{"0", "", "false", "yes", "2", "1 1"} {
		_, err := e.pc.Deposit(resolving(as(ctx, "alice", "k-"+v), v), deposit("bad-"+v, 1))
		st := wantStatus(t, err, codes.InvalidArgument, keyed.RequestUnreadable.Row().Reason)
		if !strings.Contains(st.Message(), "1 or true") {
			t.Errorf("value %q: message %q does not say which values resolve", v, st.Message())
		}
		if n := e.rows(t, "bad-"+v); n != 0 {
			t.Errorf("value %q: the handler ran (%d rows)", v, n)
		}
		// Nothing was claimed: the same key runs the call.
		if _, err := e.pc.Deposit(as(ctx, "alice", "k-"+v), deposit("bad-"+v, 1)); err != nil {
			t.Fatalf("value %q: the key was claimed by the refused request: %v", v, err)
		}
		// A unary method that is not keyed refuses it alike.
		_, err = e.pc.GetDeposit(resolving(as(ctx, "alice", ""), v), &walletpb.GetDepositRequest{})
		st = wantStatus(t, err, codes.InvalidArgument, keyed.RequestUnreadable.Row().Reason)
		if !strings.Contains(st.Message(), "1 or true") {
			t.Errorf("value %q on a method that is not keyed: message %q", v, st.Message())
		}
	}
	if _, err := e.pc.Deposit(as(ctx, "alice", "k-done"), deposit("done", 1)); err != nil {
		t.Fatal(err)
	}
	for _, v := range []string{"1", "true", "TRUE", "True"} {
		// A resolve of a key never sent: not found, and nothing runs.
		_, err := e.pc.Deposit(resolving(as(ctx, "alice", "k-never"), v), deposit("never", 1))
		wantStatus(t, err, codes.NotFound, keyed.NotFound.Row().Reason)
		// A resolve of a committed key: the stored answer, marked.
		var trl metadata.MD
		if _, err := e.pc.Deposit(resolving(as(ctx, "alice", "k-done"), v), &walletpb.DepositRequest{}, grpc.Trailer(&trl)); err != nil {
			t.Fatalf("value %q: %v", v, err)
		}
		if got := trl.Get(grpcint.ReplayedHeader); len(got) != 1 || got[0] != "true" {
			t.Errorf("value %q: replay marker %q", v, got)
		}
		// On a unary method that is not keyed it keeps its refusal.
		_, err = e.pc.GetDeposit(resolving(as(ctx, "alice", ""), v), &walletpb.GetDepositRequest{})
		st := wantStatus(t, err, codes.InvalidArgument, keyed.NotKeyed.Row().Reason)
		if !strings.Contains(st.Message(), "nothing to resolve") {
			t.Errorf("value %q on a method that is not keyed: message %q", v, st.Message())
		}
	}
	if n := e.rows(t, "never"); n != 0 {
		t.Errorf("a resolve ran the handler (%d rows)", n)
	}
	// The kit's client sends the accepted value.
	mu.Lock()
	sent = nil
	mu.Unlock()
	var reply walletpb.DepositReply
	if err := grpcint.Resolve(as(ctx, "alice", ""), e.conn, walletpb.DepositMethod, "k-done", &walletpb.DepositRequest{}, &reply); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(sent) == 0 {
		t.Fatal("grpcint.Resolve sent no resolve header")
	}
	for _, v := range sent {
		if len(v) != 1 || v[0] != "1" {
			t.Errorf("grpcint.Resolve sent %q, want [1]", v)
		}
	}
}

// TestResolveHeaderOnStreams: a resolve header on a stream is ignored, so
// that a tool sending its headers to every call (grpcurl -H
// 'idempotency-resolve: 1') can use server reflection; the unary calls it
// makes keep their meaning.
func TestResolveHeaderOnStreams(t *testing.T) {
	tg := testdb.Targets()[0]
	db := tg.Open(t, 8)
	table, biz := newTables(t, db, tg.Dialect)
	store, err := ledger.New(tg.Dialect, ledger.WithTable(table))
	if err != nil {
		t.Fatal(err)
	}
	cat, err := wallet.Catalog()
	if err != nil {
		t.Fatal(err)
	}
	s, err := grpcint.NewServer(db, store, cat, grpcint.CallerFromTrustedHeader(callerHeader))
	if err != nil {
		t.Fatal(err)
	}
	svc, err := wallet.NewService(db, tg.Dialect, biz)
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer(grpc.ChainUnaryInterceptor(s.UnaryServerInterceptor()), grpc.ChainStreamInterceptor(s.StreamServerInterceptor()))
	walletpb.RegisterWalletServer(srv, svc)
	reflection.Register(srv)
	if err := s.CheckRegistered(srv); err != nil {
		t.Fatal(err)
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = srv.Serve(lis) }()
	conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close(); srv.Stop() })

	ctx := context.Background()
	for _, v := range []string{"1", "0", "anything"} {
		// What grpcurl -H does: the header on the reflection stream too.
		rc, err := reflectionpb.NewServerReflectionClient(conn).ServerReflectionInfo(resolving(as(ctx, "alice", "k-reflect"), v))
		if err != nil {
			t.Fatal(err)
		}
		if err := rc.Send(&reflectionpb.ServerReflectionRequest{MessageRequest: &reflectionpb.ServerReflectionRequest_ListServices{ListServices: ""}}); err != nil {
			t.Fatal(err)
		}
		resp, err := rc.Recv()
		if err != nil {
			t.Fatalf("value %q: the reflection stream failed: %v (%s)", v, err, grpcint.ReasonOf(err))
		}
		var names []string
		for _, svc := range resp.GetListServicesResponse().GetService() {
			names = append(names, svc.GetName())
		}
		if !strings.Contains(strings.Join(names, " "), "Wallet") {
			t.Errorf("value %q: reflection listed %v", v, names)
		}
		if err := rc.CloseSend(); err != nil {
			t.Fatal(err)
		}
	}
	// The invoked keyed method still resolves: not found, nothing runs.
	pc := walletpb.NewWalletClient(conn)
	_, err = pc.Deposit(resolving(as(ctx, "alice", "k-reflect"), "1"), deposit("reflect", 1))
	wantStatus(t, err, codes.NotFound, keyed.NotFound.Row().Reason)
	// A unary method that is not keyed keeps its refusal.
	_, err = pc.GetDeposit(resolving(as(ctx, "alice", ""), "1"), &walletpb.GetDepositRequest{})
	if st := wantStatus(t, err, codes.InvalidArgument, keyed.NotKeyed.Row().Reason); !strings.Contains(st.Message(), "nothing to resolve") {
		t.Errorf("message %q", st.Message())
	}
	if got := status.Code(err); got != codes.InvalidArgument {
		t.Errorf("code %s", got)
	}
}
