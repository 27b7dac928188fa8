package grpcint_test

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"fmt"
	"net"
	"regexp"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoregistry"

	"github.com/opledger/opledger/grpcint"
	"github.com/opledger/opledger/internal/testkit/aippb"
	"github.com/opledger/opledger/internal/testkit/testdb"
	"github.com/opledger/opledger/keyed"
	"github.com/opledger/opledger/ledger"
	"github.com/opledger/opledger/policy"
	"github.com/opledger/opledger/txmiddleware"
)

// ordersCatalog is the catalog of the AIP-155 test service read from its
// descriptors: CreateOrder is keyed by its request_id, nothing else
// marks it.
func ordersCatalog(t testing.TB) *policy.Catalog {
	t.Helper()
	files := new(protoregistry.Files)
	if err := files.RegisterFile(aippb.File_orders_proto); err != nil {
		t.Fatal(err)
	}
	c, err := policy.CatalogFromFiles(files)
	if err != nil {
		t.Fatal(err)
	}
	if p, _ := c.Lookup(aippb.CreateOrderMethod); p.Kind != policy.KindKeyed || !p.DurableLedger {
		t.Fatalf("CreateOrder from its descriptors: %+v, want keyed with a durable ledger", p)
	}
	return c
}

// orders serves CreateOrder on a test database: one business row (k =
// the order's item) in the call's transaction, and an order with a fresh
// serial and the request_id the handler saw.
type orders struct {
	te   *testdb.Env
	runs atomic.Int64
}

func (o *orders) CreateOrder(ctx context.Context, req *aippb.CreateOrderRequest) (*aippb.Order, error) {
	if req.GetQuantity() <= 0 {
		return nil, status.Error(codes.InvalidArgument, "quantity must be positive")
	}
	tx, ok := txmiddleware.TxFromContext(ctx)
	if !ok {
		return nil, status.Error(codes.Internal, "no transaction in the handler's context")
	}
	if err := o.te.WriteBiz(ctx, tx, req.GetItem(), int(req.GetQuantity())); err != nil {
		return nil, err
	}
	o.runs.Add(1)
	var b [8]byte
	_, _ = rand.Read(b[:])
	return &aippb.Order{Serial: int64(binary.BigEndian.Uint64(b[:]) >> 1), Item: req.GetItem(),
		Quantity: req.GetQuantity(), RequestId: req.GetRequestId()}, nil
}

type ordersEnv struct {
	*orders
	server *grpcint.Server
	conn   *grpc.ClientConn // no kit client interceptor
	oc     aippb.OrdersClient
	addr   string
}

// serveOrders serves CreateOrder on te behind the kit's server (with
// opts) on loopback, with a raw client connection.
func serveOrders(t *testing.T, te *testdb.Env, opts ...keyed.ServerOption) *ordersEnv {
	t.Helper()
	store, err := ledger.New(te.Dialect, ledger.WithTable(te.Table))
	if err != nil {
		t.Fatal(err)
	}
	s, err := grpcint.NewServer(te.DB, store, ordersCatalog(t), grpcint.CallerFromTrustedHeader(callerHeader), opts...)
	if err != nil {
		t.Fatal(err)
	}
	o := &orders{te: te}
	srv := grpc.NewServer(grpc.ChainUnaryInterceptor(s.UnaryServerInterceptor()))
	aippb.RegisterOrdersServer(srv, o)
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
	return &ordersEnv{orders: o, server: s, conn: conn, oc: aippb.NewOrdersClient(conn), addr: lis.Addr().String()}
}

func sqliteOrders(t *testing.T) *ordersEnv {
	t.Helper()
	tg := testdb.Targets()[0]
	return serveOrders(t, testdb.NewEnv(t, tg.Name, tg.Dialect, tg.Open(t, 8)),
		keyed.WithLockWait(300*time.Millisecond), keyed.WithInProgressPushback(20*time.Millisecond))
}

func order(item, requestID string, quantity int64) *aippb.CreateOrderRequest {
	return &aippb.CreateOrderRequest{Item: item, Quantity: quantity, RequestId: requestID}
}

// TestRequestIDHerd: the herd with the key in request_id instead of the
// header: 64 concurrent raw calls per key, 50 keys, in lockstep, on every
// database: the handler runs once per key, one business row per key,
// every answer the same order, one executed and 63 replayed with the
// marker.
func TestRequestIDHerd(t *testing.T) {
	t.Parallel()
	const callers, conns = 64, 16
	keys := testdb.Keys(t, 50)
	testdb.ForEachParallel(t, conns, func(t *testing.T, te *testdb.Env) {
		e := serveOrders(t, te, keyed.WithLockWait(10*time.Second), keyed.WithInProgressPushback(20*time.Millisecond))
		ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute) // a hang guard
		defer cancel()
		actx := metadata.AppendToOutgoingContext(ctx, callerHeader, "tenant")
		var busy atomic.Int64
		for k := range keys {
			id := fmt.Sprintf("%s-rid-%d", te.Table, k)
			item := fmt.Sprintf("item-%d", k)
			before := e.runs.Load()
			var wg sync.WaitGroup
			start := make(chan struct{})
			got := make([]*aippb.Order, callers)
			replays := make([]bool, callers)
			errs := make([]error, callers)
			for w := range callers {
				wg.Add(1)
				go func() {
					defer wg.Done()
					<-start
					for {
						var trl metadata.MD
						got[w], errs[w] = e.oc.CreateOrder(actx, order(item, id, 3), grpc.Trailer(&trl))
						replays[w] = len(trl.Get(grpcint.ReplayedHeader)) > 0 && trl.Get(grpcint.ReplayedHeader)[0] == "true"
						if r := grpcint.ReasonOf(errs[w]); r != keyed.InProgress.Row().Reason && r != keyed.StorageBusy.Row().Reason {
							return
						}
						busy.Add(1) // past the wait bound: again with the same request_id, as the answer says
						time.Sleep(20 * time.Millisecond)
					}
				}()
			}
			close(start)
			wg.Wait()
			executed := 0
			var first *aippb.Order
			for w := range callers {
				if errs[w] != nil {
					t.Fatalf("request_id %s call %d: %v", id, w, errs[w])
				}
				if !replays[w] {
					executed++
					first = got[w]
				}
			}
			if executed != 1 || e.runs.Load()-before != 1 {
				t.Fatalf("request_id %s: %d answers not replayed, the handler ran %d times; want 1 and 1", id, executed, e.runs.Load()-before)
			}
			for w := range callers {
				if !proto.Equal(got[w], first) || got[w].GetRequestId() != id {
					t.Fatalf("request_id %s call %d: %v; the executed one: %v", id, w, got[w], first)
				}
			}
			if n := te.BizRows(t, item); n != 1 {
				t.Fatalf("request_id %s: %d business rows", id, n)
			}
		}
		st := e.server.Stats()
		if st.Executed != int64(keys) || st.Replayed < int64(keys*(callers-1)) {
			t.Errorf("stats %+v: want %d executed, at least %d replayed", st, keys, keys*(callers-1))
		}
		t.Logf("%s: %d request_ids × %d concurrent calls: %+v, %d answered busy and sent again", te.Name, keys, callers, st, busy.Load())
	})
}

// TestRequestIDOutcomes: what a raw call whose request carries its key in
// request_id gets: executed, then replayed with the marker; a reused
// request_id with another request is FAILED_PRECONDITION; the same key in
// the header and the request_id is one key; two different ones are
// INVALID_ARGUMENT and run nothing; neither is the missing key; a resolve
// takes the header's key.
func TestRequestIDOutcomes(t *testing.T) {
	t.Parallel()
	e := sqliteOrders(t)
	ctx := metadata.AppendToOutgoingContext(context.Background(), callerHeader, "alice")
	replayed := func(trl metadata.MD) bool { v := trl.Get(grpcint.ReplayedHeader); return len(v) > 0 && v[0] == "true" }

	var trl metadata.MD
	first, err := e.oc.CreateOrder(ctx, order("book", "rid-1", 2), grpc.Trailer(&trl))
	if err != nil || replayed(trl) || first.GetRequestId() != "rid-1" {
		t.Fatalf("first call: %v, %v, replayed %v", first, err, replayed(trl))
	}
	again, err := e.oc.CreateOrder(ctx, order("book", "rid-1", 2), grpc.Trailer(&trl))
	if err != nil || !replayed(trl) || !proto.Equal(again, first) {
		t.Fatalf("the same request_id again: %v, %v, replayed %v; want %v replayed", again, err, replayed(trl), first)
	}
	// The same key in the header and in request_id: the same call.
	both, err := e.oc.CreateOrder(grpcint.WithKey(ctx, "rid-1"), order("book", "rid-1", 2), grpc.Trailer(&trl))
	if err != nil || !replayed(trl) || !proto.Equal(both, first) {
		t.Fatalf("header and request_id alike: %v, %v, replayed %v", both, err, replayed(trl))
	}
	// A reused request_id with another request.
	_, err = e.oc.CreateOrder(ctx, order("book", "rid-1", 3))
	wantStatus(t, err, codes.FailedPrecondition, keyed.KeyReused.Row().Reason)
	// Two different keys: refused before the handler.
	runs := e.runs.Load()
	_, err = e.oc.CreateOrder(grpcint.WithKey(ctx, "header-1"), order("pen", "rid-2", 1))
	st := wantStatus(t, err, codes.InvalidArgument, keyed.KeyInvalid.Row().Reason)
	if regexp.MustCompile(`header-1|rid-2`).MatchString(st.Message()) {
		t.Errorf("the refusal shows a key: %q", st.Message())
	}
	// Neither key.
	_, err = e.oc.CreateOrder(ctx, order("pen", "", 1))
	wantStatus(t, err, codes.InvalidArgument, keyed.KeyMissing.Row().Reason)
	if e.runs.Load() != runs || e.te.BizRows(t, "pen") != 0 {
		t.Errorf("a refused call ran the handler")
	}
	// The header alone keys a request with an empty request_id.
	h, err := e.oc.CreateOrder(grpcint.WithKey(ctx, "header-2"), order("pen", "", 1))
	if err != nil || h.GetRequestId() != "" {
		t.Fatalf("header alone: %v, %v", h, err)
	}
	// A resolve: the header is the key, whatever the request carries; the
	// request_id alone too.
	var reply aippb.Order
	if err := grpcint.Resolve(ctx, e.conn, aippb.CreateOrderMethod, "rid-1", order("", "something-else", 0), &reply); err != nil || !proto.Equal(&reply, first) {
		t.Fatalf("resolve: %v, %v; want %v", &reply, err, first)
	}
	if n := e.te.BizRows(t, "book"); n != 1 {
		t.Errorf("%d business rows for rid-1, want 1", n)
	}
	if s := e.server.Stats(); s.Executed != 2 || s.Replayed != 2 || s.Refused != 3 || s.Resolves != 1 {
		t.Errorf("stats %+v: want 2 executed, 2 replayed, 3 refused, 1 resolve", s)
	}
}

// TestRequestIDClient: the kit's client fills an empty request_id with the
// call's key (a new UUID, or the WithKey key) on a copy of the request, the
// same on every attempt; takes a request's own request_id as its key; and a
// WithKey key that differs from the request's request_id is refused by the
// server, without a retry.
func TestRequestIDClient(t *testing.T) {
	t.Parallel()
	e := sqliteOrders(t)
	ctx := metadata.AppendToOutgoingContext(context.Background(), callerHeader, "alice")
	uuid := regexp.MustCompile(`^[0-9a-f]{8}-[0-9a-f]{4}-7[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$`)

	// The transport loses the first answer of item "lost" after the server
	// committed; every attempt's request_id and key header are recorded.
	var (
		mu       sync.Mutex
		attempts = map[string][][2]string{} // item -> (request_id, key header) per attempt
		lost     atomic.Bool
	)
	lossy := func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
		r, _ := req.(*aippb.CreateOrderRequest)
		md, _ := metadata.FromOutgoingContext(ctx)
		var key string
		if v := md.Get(grpcint.KeyHeader); len(v) > 0 {
			key = v[len(v)-1]
		}
		mu.Lock()
		attempts[r.GetItem()] = append(attempts[r.GetItem()], [2]string{r.GetRequestId(), key})
		mu.Unlock()
		err := invoker(ctx, method, req, reply, cc, opts...)
		if err == nil && r.GetItem() == "lost" && lost.CompareAndSwap(false, true) {
			return status.Error(codes.Unavailable, "injected: answer lost")
		}
		return err
	}
	c, err := grpcint.NewClient(ordersCatalog(t), policy.OwnerApplication,
		keyed.WithBackoff(policy.Backoff{Initial: time.Millisecond, Max: 5 * time.Millisecond}))
	if err != nil {
		t.Fatal(err)
	}
	oc := aippb.NewOrdersClient(dialKit(t, c, e.addr, lossy))

	// No key anywhere: a new UUID, in the header and in request_id; the
	// caller's message is not changed.
	req := order("fresh", "", 1)
	o, err := oc.CreateOrder(ctx, req)
	if err != nil || !uuid.MatchString(o.GetRequestId()) {
		t.Fatalf("no key: %v, %v; want the handler to see a UUID request_id", o, err)
	}
	if req.GetRequestId() != "" {
		t.Errorf("the caller's request was changed: %v", req)
	}
	// WithKey: that key fills request_id.
	if o, err := oc.CreateOrder(grpcint.WithKey(ctx, "chosen-key"), order("chosen", "", 1)); err != nil || o.GetRequestId() != "chosen-key" {
		t.Fatalf("WithKey: %v, %v", o, err)
	}
	// The request's own request_id is the key: a raw call with it as the
	// header replays.
	mine, err := oc.CreateOrder(ctx, order("own", "own-rid", 1))
	if err != nil {
		t.Fatal(err)
	}
	var trl metadata.MD
	raw, err := e.oc.CreateOrder(grpcint.WithKey(ctx, "own-rid"), order("own", "own-rid", 1), grpc.Trailer(&trl))
	if err != nil || !proto.Equal(raw, mine) || trl.Get(grpcint.ReplayedHeader) == nil {
		t.Fatalf("the request_id as the key: %v, %v; want %v replayed", raw, err, mine)
	}
	// A lost answer: the retry (or resolve) carries the same request_id and
	// key, and the handler ran once.
	runs := e.runs.Load()
	o, err = oc.CreateOrder(ctx, order("lost", "", 1))
	if err != nil || e.runs.Load()-runs != 1 || e.te.BizRows(t, "lost") != 1 {
		t.Fatalf("lost answer: %v, %v; the handler ran %d times", o, err, e.runs.Load()-runs)
	}
	mu.Lock()
	seen := attempts["lost"]
	mu.Unlock()
	if len(seen) < 2 {
		t.Fatalf("lost answer: %d attempts, want a retry or a resolve", len(seen))
	}
	for i, a := range seen {
		if a[0] != o.GetRequestId() || a[1] != a[0] || !uuid.MatchString(a[0]) {
			t.Errorf("attempt %d: request_id %q, key %q; want both %q", i, a[0], a[1], o.GetRequestId())
		}
	}
	// WithKey and a different request_id: INVALID_ARGUMENT, one attempt.
	_, err = oc.CreateOrder(grpcint.WithKey(ctx, "key-a"), order("conflict", "rid-b", 1))
	wantStatus(t, err, codes.InvalidArgument, keyed.KeyInvalid.Row().Reason)
	mu.Lock()
	n := len(attempts["conflict"])
	mu.Unlock()
	if n != 1 || e.te.BizRows(t, "conflict") != 0 {
		t.Errorf("conflict: %d attempts, %d rows; want 1 and 0", n, e.te.BizRows(t, "conflict"))
	}
}
