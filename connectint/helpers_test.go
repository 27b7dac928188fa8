package connectint_test

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"connectrpc.com/connect"

	"github.com/opledger/opledger/connectint"
	"github.com/opledger/opledger/internal/testkit/testdb"
	"github.com/opledger/opledger/internal/testkit/wallet"
	"github.com/opledger/opledger/internal/testkit/wallet/walletpb"
	"github.com/opledger/opledger/keyed"
	"github.com/opledger/opledger/ledger"
	"github.com/opledger/opledger/pgxledger"
	"github.com/opledger/opledger/policy"
	"github.com/opledger/opledger/txmiddleware"
)

const callerHeader = "X-Test-Caller"

func catalog(t testing.TB) *policy.Catalog {
	t.Helper()
	c, err := wallet.Catalog()
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// env is a connect server of the test's Deposit handler behind the kit's
// server interceptor, on loopback with HTTP/1.1 and h2c.
type env struct {
	*testdb.Env
	server *connectint.Server
	url    string
	h1, h2 *http.Client
	gate   *gate
	runs   atomic.Int64 // the handler's runs that wrote
}

// gate blocks Deposit calls whose reference is "block" until released.
type gate struct {
	entered chan struct{}
	release chan struct{}
}

func newID() int64 {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return int64(binary.BigEndian.Uint64(b[:]) >> 1)
}

// deposit is the test's Deposit handler: it writes one business row
// (reference, amount) in the call's transaction (database/sql's or pgx's)
// and answers with a fresh deposit id. A non-positive amount is
// INVALID_ARGUMENT (final); reference "block" waits at the gate,
// "not-final" writes and then fails with UNAVAILABLE, "panic" writes and
// panics.
func (e *env) deposit(ctx context.Context, req *connect.Request[walletpb.DepositRequest]) (*connect.Response[walletpb.DepositReply], error) {
	m := req.Msg
	if m.GetAmount() <= 0 {
		return nil, connect.NewError(connect.CodeInvalidArgument, errors.New("amount must be positive"))
	}
	if m.GetReference() == "block" {
		e.gate.entered <- struct{}{}
		<-e.gate.release
	}
	if err := e.write(ctx, m.GetReference(), int(m.GetAmount())); err != nil {
		return nil, err
	}
	e.runs.Add(1)
	switch m.GetReference() {
	case "not-final":
		return nil, connect.NewError(connect.CodeUnavailable, errors.New("injected: not final"))
	case "panic":
		panic("injected: handler panic")
	}
	return connect.NewResponse(&walletpb.DepositReply{DepositId: newID(), Account: m.GetAccount(), Amount: m.GetAmount(), Reference: m.GetReference()}), nil
}

func (e *env) write(ctx context.Context, ref string, worker int) error {
	if tx, ok := txmiddleware.TxFromContext(ctx); ok {
		return e.WriteBiz(ctx, tx, ref, worker)
	}
	if tx, ok := pgxledger.TxFromContext(ctx); ok {
		_, err := tx.Exec(ctx, "INSERT INTO "+e.Biz+" (k, worker) VALUES ($1, $2)", ref, worker)
		return err
	}
	return connect.NewError(connect.CodeInternal, errors.New("no transaction in the handler's context"))
}

// getDeposit is a NO_SIDE_EFFECTS procedure that is not keyed.
func getDeposit(context.Context, *connect.Request[walletpb.GetDepositRequest]) (*connect.Response[walletpb.DepositReply], error) {
	return connect.NewResponse(&walletpb.DepositReply{}), nil
}

// sqliteEnv serves on a fresh SQLite target with the ledger l builds
// (nil: the plain store) and server options.
func sqliteEnv(t *testing.T, wrap func(*ledger.Store) ledger.Ledger, front []connect.HandlerOption, opts ...keyed.ServerOption) (*env, *ledger.Store) {
	t.Helper()
	tg := testdb.Targets()[0]
	te := testdb.NewEnv(t, tg.Name, tg.Dialect, tg.Open(t, 8))
	store := newStore(t, te)
	var l ledger.Ledger = store
	if wrap != nil {
		l = wrap(store)
	}
	return serveOn(t, te, keyed.SQL(te.DB, l), front, opts...), store
}

func newStore(t testing.TB, te *testdb.Env, opts ...ledger.Option) *ledger.Store {
	t.Helper()
	store, err := ledger.New(te.Dialect, append([]ledger.Option{ledger.WithTable(te.Table)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	return store
}

// serveOn serves the handlers on tx, with the kit's server built with
// opts (after a short lock wait and pushback) and front handler options.
func serveOn(t *testing.T, te *testdb.Env, tx keyed.Transactions, front []connect.HandlerOption, opts ...keyed.ServerOption) *env {
	t.Helper()
	return serveExactly(t, te, tx, front, append([]keyed.ServerOption{keyed.WithLockWait(300 * time.Millisecond),
		keyed.WithInProgressPushback(20 * time.Millisecond)}, opts...)...)
}

// serveExactly is serveOn with only opts.
func serveExactly(t *testing.T, te *testdb.Env, tx keyed.Transactions, front []connect.HandlerOption, opts ...keyed.ServerOption) *env {
	t.Helper()
	s, err := connectint.NewServerFor(tx, catalog(t), connectint.CallerFromTrustedHeader(callerHeader), opts...)
	if err != nil {
		t.Fatal(err)
	}
	return serveServer(t, te, s, front...)
}

func serveServer(t *testing.T, te *testdb.Env, s *connectint.Server, front ...connect.HandlerOption) *env {
	t.Helper()
	e := &env{Env: te, server: s, gate: &gate{entered: make(chan struct{}, 1), release: make(chan struct{})}}
	hopts := append(append([]connect.HandlerOption(nil), front...), connect.WithInterceptors(s.Interceptor()))
	mux := http.NewServeMux()
	mux.Handle(walletpb.DepositMethod, connect.NewUnaryHandler(walletpb.DepositMethod, e.deposit, hopts...))
	mux.Handle(walletpb.GetDepositMethod, connect.NewUnaryHandler(walletpb.GetDepositMethod, getDeposit,
		append(hopts, connect.WithIdempotency(connect.IdempotencyNoSideEffects))...))
	e.url = serveHTTP(t, mux)
	e.h1, e.h2 = httpClients(t)
	return e
}

// serveHTTP serves h on loopback with HTTP/1.1 and h2c until the test
// ends, and returns its URL.
func serveHTTP(t testing.TB, h http.Handler) string {
	t.Helper()
	srv := httptest.NewUnstartedServer(h)
	srv.Config.Protocols = new(http.Protocols)
	srv.Config.Protocols.SetHTTP1(true)
	srv.Config.Protocols.SetUnencryptedHTTP2(true)
	srv.Start()
	t.Cleanup(srv.Close)
	return srv.URL
}

// httpClients returns an HTTP/1.1 client and an h2c one.
func httpClients(t testing.TB) (h1, h2 *http.Client) {
	t.Helper()
	t1 := &http.Transport{DialContext: (&net.Dialer{}).DialContext, MaxIdleConnsPerHost: 64}
	t2 := &http.Transport{DialContext: (&net.Dialer{}).DialContext}
	t2.Protocols = new(http.Protocols)
	t2.Protocols.SetUnencryptedHTTP2(true)
	t.Cleanup(func() { t1.CloseIdleConnections(); t2.CloseIdleConnections() })
	return &http.Client{Transport: t1}, &http.Client{Transport: t2}
}

// protocols are the wire protocols the tests run: Connect over HTTP/1.1,
// gRPC and gRPC-Web over h2c.
var protocols = []string{"connect", "grpc", "grpcweb"}

// client returns a Deposit client on protocol (see protocols) with the
// given options.
func (e *env) client(protocol string, opts ...connect.ClientOption) *connect.Client[walletpb.DepositRequest, walletpb.DepositReply] {
	return depositClient(e.url, e.h1, e.h2, protocol, opts...)
}

func depositClient(url string, h1, h2 *http.Client, protocol string, opts ...connect.ClientOption) *connect.Client[walletpb.DepositRequest, walletpb.DepositReply] {
	hc := h1
	switch protocol {
	case "grpc":
		hc, opts = h2, append(opts, connect.WithGRPC())
	case "grpcweb":
		hc, opts = h2, append(opts, connect.WithGRPCWeb())
	}
	return connect.NewClient[walletpb.DepositRequest, walletpb.DepositReply](hc, url+walletpb.DepositMethod, opts...)
}

// kitClient is a Deposit client with the kit's client interceptor.
func (e *env) kitClient(t testing.TB, owner policy.RetryOwner, protocol string, opts ...keyed.ClientOption) (*connectint.Client, *connect.Client[walletpb.DepositRequest, walletpb.DepositReply]) {
	t.Helper()
	c, err := connectint.NewClient(catalog(t), owner, opts...)
	if err != nil {
		t.Fatal(err)
	}
	return c, e.client(protocol, c.ClientOptions()...)
}

func fastClient() []keyed.ClientOption {
	return []keyed.ClientOption{keyed.WithMaxAttempts(3),
		keyed.WithBackoff(policy.Backoff{Initial: time.Millisecond, Max: 5 * time.Millisecond})}
}

// request is a Deposit request from caller with key ("" for none).
func request(caller, key, ref string, amount int64) *connect.Request[walletpb.DepositRequest] {
	r := connect.NewRequest(&walletpb.DepositRequest{Account: "a", Amount: amount, Reference: ref})
	if caller != "" {
		r.Header().Set(callerHeader, caller)
	}
	if key != "" {
		r.Header().Set(connectint.KeyHeader, key)
	}
	return r
}

// wantError checks an error's code and the kit's reason in it.
func wantError(t *testing.T, err error, code connect.Code, reason string) *connect.Error {
	t.Helper()
	var ce *connect.Error
	if !errors.As(err, &ce) || ce.Code() != code {
		t.Fatalf("error %v, want code %s", err, code)
	}
	if got := connectint.ReasonOf(err); got != reason {
		t.Fatalf("reason %q (%v), want %q", got, err, reason)
	}
	return ce
}

// wantCallInfo checks the client's reading of a keyed call's error.
func wantCallInfo(t *testing.T, err error, reason string, next policy.Action) keyed.CallInfo {
	t.Helper()
	ci, ok := connectint.CallInfoOf(err)
	if !ok || ci.Reason != reason || ci.Next != next || connectint.ReasonOf(err) != reason {
		t.Fatalf("err %v: CallInfo %+v (%v); want reason %s, next %s", err, ci, ok, reason, next)
	}
	if ci.Key == "" || ci.Attempts < 1 {
		t.Errorf("CallInfo %+v: want the key and the attempts", ci)
	}
	return ci
}

// replayed reports whether a response carries the replay marker.
func replayed(h http.Header) bool { return h.Get(connectint.ReplayedHeader) == "true" }
