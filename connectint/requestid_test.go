package connectint_test

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"net/http"
	"regexp"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/proto"

	"github.com/opledger/opledger/connectint"
	"github.com/opledger/opledger/internal/testkit/aippb"
	"github.com/opledger/opledger/internal/testkit/testdb"
	"github.com/opledger/opledger/keyed"
	"github.com/opledger/opledger/policy"
	"github.com/opledger/opledger/txmiddleware"
)

var uuidForm = regexp.MustCompile(`^[0-9a-f]{8}-[0-9a-f]{4}-7[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$`)

// ordersCatalog is the AIP-155 test service's catalog from connect Specs
// of its descriptors: CreateOrder is keyed by its request_id, nothing else
// marks it.
func ordersCatalog(t testing.TB) *policy.Catalog {
	t.Helper()
	c, err := connectint.CatalogFromSpecs(connectint.ServiceSpecs(aippb.File_orders_proto.Services().ByName("Orders"))...)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// ordersEnv is a connect server of CreateOrder behind the kit's server
// interceptor: one business row (k = the item) per run, an order with a
// fresh serial and the request_id the handler saw.
type ordersEnv struct {
	te     *testdb.Env
	server *connectint.Server
	url    string
	h1, h2 *http.Client
	runs   atomic.Int64
}

func (e *ordersEnv) createOrder(ctx context.Context, req *connect.Request[aippb.CreateOrderRequest]) (*connect.Response[aippb.Order], error) {
	m := req.Msg
	if m.GetQuantity() <= 0 {
		return nil, connect.NewError(connect.CodeInvalidArgument, errors.New("quantity must be positive"))
	}
	tx, ok := txmiddleware.TxFromContext(ctx)
	if !ok {
		return nil, connect.NewError(connect.CodeInternal, errors.New("no transaction in the handler's context"))
	}
	if err := e.te.WriteBiz(ctx, tx, m.GetItem(), int(m.GetQuantity())); err != nil {
		return nil, err
	}
	e.runs.Add(1)
	var b [8]byte
	_, _ = rand.Read(b[:])
	return connect.NewResponse(&aippb.Order{Serial: int64(binary.BigEndian.Uint64(b[:]) >> 1), Item: m.GetItem(),
		Quantity: m.GetQuantity(), RequestId: m.GetRequestId()}), nil
}

func serveOrders(t *testing.T, te *testdb.Env, opts ...keyed.ServerOption) *ordersEnv {
	t.Helper()
	s, err := connectint.NewServer(te.DB, newStore(t, te), ordersCatalog(t), connectint.CallerFromTrustedHeader(callerHeader), opts...)
	if err != nil {
		t.Fatal(err)
	}
	e := &ordersEnv{te: te, server: s}
	mux := http.NewServeMux()
	mux.Handle(aippb.CreateOrderMethod, connect.NewUnaryHandler(aippb.CreateOrderMethod, e.createOrder, connect.WithInterceptors(s.Interceptor())))
	e.url = serveHTTP(t, mux)
	e.h1, e.h2 = httpClients(t)
	return e
}

func sqliteOrders(t *testing.T) *ordersEnv {
	t.Helper()
	tg := testdb.Targets()[0]
	return serveOrders(t, testdb.NewEnv(t, tg.Name, tg.Dialect, tg.Open(t, 8)),
		keyed.WithLockWait(300*time.Millisecond), keyed.WithInProgressPushback(20*time.Millisecond))
}

// client is a CreateOrder client on protocol (see protocols).
func (e *ordersEnv) client(protocol string, opts ...connect.ClientOption) *connect.Client[aippb.CreateOrderRequest, aippb.Order] {
	hc := e.h1
	switch protocol {
	case "grpc":
		hc, opts = e.h2, append(opts, connect.WithGRPC())
	case "grpcweb":
		hc, opts = e.h2, append(opts, connect.WithGRPCWeb())
	}
	return connect.NewClient[aippb.CreateOrderRequest, aippb.Order](hc, e.url+aippb.CreateOrderMethod, opts...)
}

// orderRequest is a CreateOrder request from alice with header key key
// ("" for none).
func orderRequest(key, item, requestID string, quantity int64) *connect.Request[aippb.CreateOrderRequest] {
	r := connect.NewRequest(&aippb.CreateOrderRequest{Item: item, Quantity: quantity, RequestId: requestID})
	r.Header().Set(callerHeader, "alice")
	if key != "" {
		r.Header().Set(connectint.KeyHeader, key)
	}
	return r
}

// TestRequestIDCatalogFromSpecs: the catalog from connect Specs marks a
// non-idempotent unary procedure with AIP-155's request_id keyed with a
// durable ledger, and nothing else; a Spec without Schema cannot say so.
func TestRequestIDCatalogFromSpecs(t *testing.T) {
	t.Parallel()
	c := ordersCatalog(t)
	const svc = "/opledger.testkit.aip.v1.Orders/"
	keyedOnes := map[string]bool{"CreateOrder": true, "ShipOrder": true}
	for _, p := range c.Methods() {
		m := p.Method()
		if got := p.Kind == policy.KindKeyed && p.DurableLedger; got != keyedOnes[m] {
			t.Errorf("%s: %+v, keyed %v", m, p, keyedOnes[m])
		}
	}
	if len(c.Methods()) != 9 {
		t.Errorf("%d procedures, want 9", len(c.Methods()))
	}
	bare, err := connectint.CatalogFromSpecs(connect.Spec{Procedure: svc + "CreateOrder"})
	if err != nil {
		t.Fatal(err)
	}
	if p, _ := bare.Lookup(svc + "CreateOrder"); p.Kind != policy.KindNonIdempotent {
		t.Errorf("without a Schema: %+v", p)
	}
}

// TestRequestIDOutcomes: on every protocol, a call whose request carries
// its key in request_id is executed and then replayed with the marker; a
// reused request_id with another request is FAILED_PRECONDITION; the same
// key in the header is the same call; two different keys are
// INVALID_ARGUMENT, neither is the missing key, and neither runs the
// handler.
func TestRequestIDOutcomes(t *testing.T) {
	t.Parallel()
	e := sqliteOrders(t)
	ctx := context.Background()
	for _, p := range protocols {
		c := e.client(p)
		rid, item := "rid-"+p, "book-"+p
		first, err := c.CallUnary(ctx, orderRequest("", item, rid, 2))
		if err != nil || replayed(first.Trailer()) || first.Msg.GetRequestId() != rid {
			t.Fatalf("%s: first call: %v, %v", p, first, err)
		}
		again, err := c.CallUnary(ctx, orderRequest("", item, rid, 2))
		if err != nil || !replayed(again.Trailer()) || !proto.Equal(again.Msg, first.Msg) {
			t.Fatalf("%s: again: %v, %v; want %v replayed", p, again, err, first.Msg)
		}
		both, err := c.CallUnary(ctx, orderRequest(rid, item, rid, 2))
		if err != nil || !replayed(both.Trailer()) || !proto.Equal(both.Msg, first.Msg) {
			t.Fatalf("%s: header and request_id alike: %v, %v", p, both, err)
		}
		_, err = c.CallUnary(ctx, orderRequest("", item, rid, 3))
		wantError(t, err, connect.CodeFailedPrecondition, "IDEMPOTENCY_KEY_REUSED")
		runs := e.runs.Load()
		_, err = c.CallUnary(ctx, orderRequest("header-"+p, "pen-"+p, "other-"+p, 1))
		ce := wantError(t, err, connect.CodeInvalidArgument, "INVALID_IDEMPOTENCY_KEY")
		if regexp.MustCompile(`header-|other-`).MatchString(ce.Message()) {
			t.Errorf("%s: the refusal shows a key: %q", p, ce.Message())
		}
		_, err = c.CallUnary(ctx, orderRequest("", "pen-"+p, "", 1))
		wantError(t, err, connect.CodeInvalidArgument, "MISSING_IDEMPOTENCY_KEY")
		if e.runs.Load() != runs || e.te.BizRows(t, "pen-"+p) != 0 || e.te.BizRows(t, item) != 1 {
			t.Errorf("%s: a refused call ran, or %d rows for %s", p, e.te.BizRows(t, item), rid)
		}
	}
	if s := e.server.Stats(); s.Executed != 3 || s.Replayed != 6 || s.Refused != 9 {
		t.Errorf("stats %+v: want 3 executed, 6 replayed, 9 refused", s)
	}
}

// TestRequestIDClient: the kit's client fills an empty request_id with the
// call's key (a new UUID, or the WithKey key) in a copy of the message,
// the same on every attempt, and gives the request its own message back;
// takes a request's own request_id as the key; and a WithKey key that
// differs from the request's request_id is refused after one attempt.
func TestRequestIDClient(t *testing.T) {
	t.Parallel()
	e := sqliteOrders(t)
	ctx := context.Background()
	var (
		mu       sync.Mutex
		attempts = map[string][][2]string{} // item -> (request_id, key header) per attempt
		lost     atomic.Bool
	)
	// Closest to the wire, after the kit's interceptor: records every
	// attempt and loses the first answer of item "lost".
	wire := connect.UnaryInterceptorFunc(func(next connect.UnaryFunc) connect.UnaryFunc {
		return func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
			m, _ := req.Any().(*aippb.CreateOrderRequest)
			mu.Lock()
			attempts[m.GetItem()] = append(attempts[m.GetItem()], [2]string{m.GetRequestId(), req.Header().Get(connectint.KeyHeader)})
			mu.Unlock()
			resp, err := next(ctx, req)
			if err == nil && m.GetItem() == "lost" && lost.CompareAndSwap(false, true) {
				return nil, connect.NewError(connect.CodeUnavailable, errors.New("injected: answer lost"))
			}
			return resp, err
		}
	})
	kit, err := connectint.NewClient(ordersCatalog(t), policy.OwnerApplication, fastClient()...)
	if err != nil {
		t.Fatal(err)
	}
	c := e.client("connect", connect.WithInterceptors(kit.Interceptor(), wire))

	req := orderRequest("", "fresh", "", 1)
	msg := req.Msg
	resp, err := c.CallUnary(ctx, req)
	if err != nil || !uuidForm.MatchString(resp.Msg.GetRequestId()) {
		t.Fatalf("no key: %v, %v; want the handler to see a UUID request_id", resp, err)
	}
	if req.Msg != msg || msg.GetRequestId() != "" || req.Header().Get(connectint.KeyHeader) != "" {
		t.Errorf("the caller's request was changed: %v, header %v", req.Msg, req.Header())
	}
	resp, err = c.CallUnary(connectint.WithKey(ctx, "chosen-key"), orderRequest("", "chosen", "", 1))
	if err != nil || resp.Msg.GetRequestId() != "chosen-key" {
		t.Fatalf("WithKey: %v, %v", resp, err)
	}
	mine, err := c.CallUnary(ctx, orderRequest("", "own", "own-rid", 1))
	if err != nil {
		t.Fatal(err)
	}
	raw, err := e.client("connect").CallUnary(ctx, orderRequest("own-rid", "own", "own-rid", 1))
	if err != nil || !replayed(raw.Trailer()) || !proto.Equal(raw.Msg, mine.Msg) {
		t.Fatalf("the request_id as the key: %v, %v; want %v replayed", raw, err, mine.Msg)
	}
	runs := e.runs.Load()
	resp, err = c.CallUnary(ctx, orderRequest("", "lost", "", 1))
	if err != nil || e.runs.Load()-runs != 1 || e.te.BizRows(t, "lost") != 1 {
		t.Fatalf("lost answer: %v, %v; the handler ran %d times", resp, err, e.runs.Load()-runs)
	}
	mu.Lock()
	seen := attempts["lost"]
	mu.Unlock()
	if len(seen) < 2 {
		t.Fatalf("lost answer: %d attempts, want a retry or a resolve", len(seen))
	}
	for i, a := range seen {
		if a[0] != resp.Msg.GetRequestId() || a[1] != a[0] || !uuidForm.MatchString(a[0]) {
			t.Errorf("attempt %d: request_id %q, key %q; want both %q", i, a[0], a[1], resp.Msg.GetRequestId())
		}
	}
	_, err = c.CallUnary(connectint.WithKey(ctx, "key-a"), orderRequest("", "conflict", "rid-b", 1))
	wantError(t, err, connect.CodeInvalidArgument, "INVALID_IDEMPOTENCY_KEY")
	mu.Lock()
	n := len(attempts["conflict"])
	mu.Unlock()
	if n != 1 || e.te.BizRows(t, "conflict") != 0 {
		t.Errorf("conflict: %d attempts, %d rows; want 1 and 0", n, e.te.BizRows(t, "conflict"))
	}
}

// TestRequestIDHerd: a small herd with the key in request_id: 32
// concurrent calls per key across the three protocols, 10 keys, in
// lockstep, on every database but lib/pq's: one run and one business row per key, one
// answer executed and the others replayed, all the same order.
func TestRequestIDHerd(t *testing.T) {
	t.Parallel()
	const callers = 32
	keys := testdb.Keys(t, 10)
	testdb.ForEachParallel(t, herdConns, func(t *testing.T, te *testdb.Env) {
		if te.Name == "postgres/pq" {
			t.Skip("lib/pq: nothing connect-specific (grpcint's request_id herd runs it)")
		}
		e := serveOrders(t, te, keyed.WithLockWait(10*time.Second), keyed.WithInProgressPushback(20*time.Millisecond))
		ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute) // a hang guard
		defer cancel()
		clients := make([]*connect.Client[aippb.CreateOrderRequest, aippb.Order], len(protocols))
		for i, p := range protocols {
			clients[i] = e.client(p)
		}
		for k := range keys {
			rid, item := fmt.Sprintf("rid-%d", k), fmt.Sprintf("item-%d", k)
			before := e.runs.Load()
			var wg sync.WaitGroup
			start := make(chan struct{})
			got := make([]*connect.Response[aippb.Order], callers)
			errs := make([]error, callers)
			for w := range callers {
				wg.Add(1)
				go func() {
					defer wg.Done()
					<-start
					for {
						got[w], errs[w] = clients[w%len(clients)].CallUnary(ctx, orderRequest("", item, rid, 1))
						if r := connectint.ReasonOf(errs[w]); r != "OPERATION_IN_PROGRESS" && r != "STORAGE_BUSY" {
							return
						}
						time.Sleep(20 * time.Millisecond) // past the wait bound: again, as the answer says
					}
				}()
			}
			close(start)
			wg.Wait()
			executed := 0
			var first *aippb.Order
			for w := range callers {
				if errs[w] != nil {
					t.Fatalf("request_id %s call %d (%s): %v", rid, w, protocols[w%len(protocols)], errs[w])
				}
				if !replayed(got[w].Trailer()) {
					executed++
					first = got[w].Msg
				}
			}
			if executed != 1 || e.runs.Load()-before != 1 {
				t.Fatalf("request_id %s: %d answers not replayed, the handler ran %d times; want 1 and 1", rid, executed, e.runs.Load()-before)
			}
			for w := range callers {
				if !proto.Equal(got[w].Msg, first) {
					t.Fatalf("request_id %s call %d: %v; the executed one: %v", rid, w, got[w].Msg, first)
				}
			}
			if n := te.BizRows(t, item); n != 1 {
				t.Fatalf("request_id %s: %d business rows", rid, n)
			}
		}
		if s := e.server.Stats(); s.Executed != int64(keys) || s.Replayed < int64(keys*(callers-1)) {
			t.Errorf("stats %+v: want %d executed, at least %d replayed", s, keys, keys*(callers-1))
		}
	})
}
