package connectint_test

import (
	"context"
	"errors"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"

	"connectrpc.com/connect"

	"github.com/opledger/opledger/connectint"
	"github.com/opledger/opledger/internal/testkit/wallet/walletpb"
	"github.com/opledger/opledger/keyed"
)

// TestResolveHeaderValue: only 1 and true (any case) make a resolve; any
// other value is refused as request-unreadable (invalid_argument
// INVALID_KEYED_REQUEST) on a keyed and on a non-keyed procedure, on every
// protocol, without running the handler or claiming the key.
func TestResolveHeaderValue(t *testing.T) {
	ctx := context.Background()
	var mu sync.Mutex
	var sent [][]string
	record := front(func(next connect.UnaryFunc) connect.UnaryFunc {
		return func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
			if v := req.Header().Values(connectint.ResolveHeader); len(v) > 0 {
				mu.Lock()
				sent = append(sent, v)
				mu.Unlock()
			}
			return next(ctx, req)
		}
	})
	e, _ := sqliteEnv(t, nil, record)
	unreadable, notKeyed := keyed.RequestUnreadable.Row().Reason, keyed.NotKeyed.Row().Reason
	for _, protocol := range protocols {
		c := e.client(protocol)
		hc := e.h2
		opts := []connect.ClientOption{connect.WithGRPC()}
		switch protocol {
		case "connect":
			hc, opts = e.h1, nil
		case "grpcweb":
			opts = []connect.ClientOption{connect.WithGRPCWeb()}
		}
		get := connect.NewClient[walletpb.GetDepositRequest, walletpb.DepositReply](hc, e.url+walletpb.GetDepositMethod, opts...)
		getWith := func(v string) error {
			r := connect.NewRequest(&walletpb.GetDepositRequest{})
			r.Header().Set(callerHeader, "alice")
			r.Header().Set(connectint.ResolveHeader, v)
			_, err := get.CallUnary(ctx, r)
			return err
		}
		for _, v := range []string{"0", "", "false", "yes", "1 1"} {
			key, ref := protocol+"-k-"+v, protocol+"-bad-"+v
			before := e.runs.Load()
			r := request("alice", key, ref, 1)
			r.Header().Set(connectint.ResolveHeader, v)
			_, err := c.CallUnary(ctx, r)
			if ce := wantError(t, err, connect.CodeInvalidArgument, unreadable); !strings.Contains(ce.Message(), "1 or true") {
				t.Errorf("%s, value %q: message %q", protocol, v, ce.Message())
			}
			if e.runs.Load() != before {
				t.Errorf("%s, value %q: the handler ran", protocol, v)
			}
			// Nothing was claimed: the same key runs the call.
			if _, err := c.CallUnary(ctx, request("alice", key, ref, 1)); err != nil || e.runs.Load() != before+1 {
				t.Fatalf("%s, value %q: the same key after the refusal: %v, %d runs", protocol, v, err, e.runs.Load()-before)
			}
			if ce := wantError(t, getWith(v), connect.CodeInvalidArgument, unreadable); !strings.Contains(ce.Message(), "1 or true") {
				t.Errorf("%s, value %q on a procedure that is not keyed: message %q", protocol, v, ce.Message())
			}
		}
		done := protocol + "-k-done"
		if _, err := c.CallUnary(ctx, request("alice", done, protocol+"-done", 1)); err != nil {
			t.Fatal(err)
		}
		for _, v := range []string{"1", "true", "TRUE", "True"} {
			before := e.runs.Load()
			r := request("alice", protocol+"-k-never", "never", 1)
			r.Header().Set(connectint.ResolveHeader, v)
			_, err := c.CallUnary(ctx, r)
			wantError(t, err, connect.CodeNotFound, keyed.NotFound.Row().Reason)
			r = request("alice", done, "", 0)
			r.Header().Set(connectint.ResolveHeader, v)
			resp, err := c.CallUnary(ctx, r)
			if err != nil {
				t.Fatalf("%s, value %q: %v", protocol, v, err)
			}
			if !replayed(resp.Trailer()) {
				t.Errorf("%s, value %q: no replay marker in %v", protocol, v, resp.Trailer())
			}
			if e.runs.Load() != before {
				t.Errorf("%s, value %q: a resolve ran the handler", protocol, v)
			}
			if ce := wantError(t, getWith(v), connect.CodeInvalidArgument, notKeyed); !strings.Contains(ce.Message(), "nothing to resolve") {
				t.Errorf("%s, value %q on a procedure that is not keyed: message %q", protocol, v, ce.Message())
			}
		}
		// The kit's Resolve sends the accepted value.
		mu.Lock()
		sent = nil
		mu.Unlock()
		if _, err := connectint.Resolve(ctx, c.CallUnary, done, request("alice", "", "", 0)); err != nil {
			t.Fatal(err)
		}
		mu.Lock()
		if len(sent) == 0 {
			t.Errorf("%s: connectint.Resolve sent no resolve header", protocol)
		}
		for _, v := range sent {
			if len(v) != 1 || v[0] != "1" {
				t.Errorf("%s: connectint.Resolve sent %q, want [1]", protocol, v)
			}
		}
		mu.Unlock()
	}
}

// TestResolveHeaderOnStreams: a resolve header on a stream (any value) is
// ignored, the stream served as if it were absent, on every protocol, as
// a tool that sends its headers to every call (server reflection
// included) needs.
func TestResolveHeaderOnStreams(t *testing.T) {
	ctx := context.Background()
	te := sqliteTestEnv(t)
	s, err := connectint.NewServer(te.DB, newStore(t, te), catalog(t), connectint.CallerFromTrustedHeader(callerHeader))
	if err != nil {
		t.Fatal(err)
	}
	const watch, chat = "/opledger.test.Feed/Watch", "/opledger.test.Feed/Chat"
	mux := http.NewServeMux()
	mux.Handle(watch, connect.NewServerStreamHandler(watch, func(ctx context.Context, req *connect.Request[walletpb.GetDepositRequest], st *connect.ServerStream[walletpb.DepositReply]) error {
		return st.Send(&walletpb.DepositReply{DepositId: req.Msg.GetDepositId()})
	}, connect.WithInterceptors(s.Interceptor())))
	mux.Handle(chat, connect.NewBidiStreamHandler(chat, func(ctx context.Context, st *connect.BidiStream[walletpb.GetDepositRequest, walletpb.DepositReply]) error {
		for {
			m, err := st.Receive()
			if errors.Is(err, io.EOF) {
				return nil
			}
			if err != nil {
				return err
			}
			if err := st.Send(&walletpb.DepositReply{DepositId: m.GetDepositId()}); err != nil {
				return err
			}
		}
	}, connect.WithInterceptors(s.Interceptor())))
	url := serveHTTP(t, mux)
	h1, h2 := httpClients(t)
	for _, protocol := range protocols {
		hc, opts := h2, []connect.ClientOption{connect.WithGRPC()}
		switch protocol {
		case "connect":
			hc, opts = h1, nil
		case "grpcweb":
			opts = []connect.ClientOption{connect.WithGRPCWeb()}
		}
		for _, v := range []string{"1", "0", "anything"} {
			w := connect.NewClient[walletpb.GetDepositRequest, walletpb.DepositReply](hc, url+watch, opts...)
			r := connect.NewRequest(&walletpb.GetDepositRequest{DepositId: 7})
			r.Header().Set(connectint.ResolveHeader, v)
			r.Header().Set(connectint.KeyHeader, "k")
			st, err := w.CallServerStream(ctx, r)
			if err != nil {
				t.Fatalf("%s, value %q: %v", protocol, v, err)
			}
			n := 0
			for st.Receive() {
				n++
			}
			if err := st.Err(); err != nil || n != 1 {
				t.Errorf("%s, value %q: server stream: %d messages, %v (%s)", protocol, v, n, err, connectint.ReasonOf(err))
			}
			if protocol == "connect" {
				continue // a bidi stream needs HTTP/2: gRPC and gRPC-Web
			}
			b := connect.NewClient[walletpb.GetDepositRequest, walletpb.DepositReply](hc, url+chat, opts...).CallBidiStream(ctx)
			b.RequestHeader().Set(connectint.ResolveHeader, v)
			if err := b.Send(&walletpb.GetDepositRequest{DepositId: 9}); err != nil {
				t.Fatalf("%s, value %q: %v", protocol, v, err)
			}
			m, err := b.Receive()
			if err != nil || m.GetDepositId() != 9 {
				t.Errorf("%s, value %q: bidi stream: %v, %v (%s)", protocol, v, m, err, connectint.ReasonOf(err))
			}
			_ = b.CloseRequest()
			_ = b.CloseResponse()
		}
	}
	if st := s.Stats(); st.Refused != 0 || st.Resolves != 0 {
		t.Errorf("a stream counted as a keyed call: %+v", st)
	}
}
