package connectint_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"connectrpc.com/connect"
	"go.opentelemetry.io/otel/attribute"

	"github.com/opledger/opledger/internal/harness/otelread"
	"github.com/opledger/opledger/internal/keyedcore"
	"github.com/opledger/opledger/internal/testkit/wallet/walletpb"
	"github.com/opledger/opledger/keyed"
	"github.com/opledger/opledger/policy"
)

// failFirst fails the first attempt of every Deposit whose reference
// starts with "fail-first", in front of the kit's interceptor.
func failFirst() connect.HandlerOption {
	var failed sync.Map
	return connect.WithInterceptors(connect.UnaryInterceptorFunc(func(next connect.UnaryFunc) connect.UnaryFunc {
		return func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
			if r, ok := req.Any().(*walletpb.DepositRequest); ok && strings.HasPrefix(r.GetReference(), "fail-first") {
				if _, seen := failed.LoadOrStore(r.GetReference(), true); !seen {
					return nil, connect.NewError(connect.CodeUnavailable, errors.New("injected: not now"))
				}
			}
			return next(ctx, req)
		}
	}))
}

// TestRetryOwnerAtRunTime: the connect server reads who retried each call:
// a service config's retries on the gRPC protocol under a client that
// declares application, and a mesh's attempt count under it, are
// second owners (logged once per procedure and layer); the owner's own
// retries are counted and not logged; an undeclared call is judged
// against WithRetryOwner.
func TestRetryOwnerAtRunTime(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute) // hang guard
	defer cancel()
	m, logs := otelread.NewMetrics(), otelread.NewLogs()
	e, _ := sqliteEnv(t, nil, []connect.HandlerOption{failFirst()}, keyed.WithRetryOwner(policy.OwnerMesh),
		keyed.WithMeterProvider(m.Provider), keyed.WithLogger(logs.Logger))
	points := func() map[string]float64 {
		t.Helper()
		ps, err := m.Collect(ctx)
		if err != nil {
			t.Fatal(err)
		}
		out := map[string]float64{}
		for _, p := range otelread.Select(ps, "opledger.server.retries_by_layer", attribute.String("opledger.method", walletpb.DepositMethod)) {
			out[p.Attr("opledger.retry.layer")+" "+p.Attr("opledger.retry.second_owner")+" "+p.Attr("opledger.owner")] += p.Value
		}
		return out
	}
	want := func(w map[string]float64) {
		t.Helper()
		got := points()
		if len(got) != len(w) {
			t.Fatalf("retries_by_layer %v, want %v", got, w)
		}
		for k, v := range w {
			if got[k] != v {
				t.Fatalf("retries_by_layer %v, want %v", got, w)
			}
		}
	}
	// send makes a call with header and checks the answer's trailer
	// naming the second owners: want's, "" for none (a ref starting
	// with the layer's name and "-second" wants that layer).
	send := func(c *connect.Client[walletpb.DepositRequest, walletpb.DepositReply], ref string, header ...string) {
		t.Helper()
		req := request("alice", keyed.NewKey(), ref, 1)
		for i := 0; i+1 < len(header); i += 2 {
			req.Header().Set(header[i], header[i+1])
		}
		res, err := c.CallUnary(ctx, req)
		if err != nil {
			t.Fatalf("%s: %v", ref, err)
		}
		want, _, _ := strings.Cut(ref, "-second")
		if want == ref {
			want = ""
		}
		if got := res.Trailer().Get(keyedcore.HTTPSecondOwner); got != want {
			t.Errorf("%s: trailer %s %q, want %q", ref, keyedcore.HTTPSecondOwner, got, want)
		}
		for _, h := range []string{keyedcore.HTTPRetryOwnerHeader, keyedcore.HTTPAttemptHeader} {
			if v := req.Header().Values(h); len(v) > 0 {
				t.Fatalf("%s: the request keeps %s %q after the call", ref, h, v)
			}
		}
	}

	// The owners' own retries: counted, not second owners.
	_, app := e.kitClient(t, policy.OwnerApplication, "connect", fastClient()...)
	send(app, "fail-first-app") // the kit's loop retries
	_, mesh := e.kitClient(t, policy.OwnerMesh, "grpc")
	send(mesh, "mesh", keyedcore.EnvoyAttemptCountHeader, "2")
	send(e.client("connect"), "undeclared-mesh", keyedcore.EnvoyAttemptCountHeader, "3") // the server's owner: mesh
	want(map[string]float64{"application false application": 1, "mesh false mesh": 2})
	if n := logs.Count(map[string]string{"msg": "opledger: second retry owner"}); n != 0 {
		t.Fatalf("%d second-owner events with the owners' own retries:\n%s", n, logs.Text())
	}

	// A gRPC client's service-config retry on the gRPC protocol, under a
	// client that declares application. (grpc-go itself never retries a
	// connect-go server's error: net/http cannot send a trailers-only
	// response, so grpc-go reads every answer as committed. Its retries
	// of attempts that got no answer carry the header as set here.)
	_, declared := e.kitClient(t, policy.OwnerApplication, "grpc", fastClient()...)
	send(declared, "service-config-second-1", keyedcore.PreviousAttemptsHeader, "1")
	send(declared, "service-config-second-2", keyedcore.PreviousAttemptsHeader, "2")
	// A mesh retry under the owner application, on every protocol, and an
	// undeclared retry by a service config (the server's owner is mesh).
	for _, protocol := range protocols {
		_, c := e.kitClient(t, policy.OwnerApplication, protocol, fastClient()...)
		send(c, "mesh-second-"+protocol, keyedcore.EnvoyAttemptCountHeader, "2")
	}
	send(e.client("grpc"), "service-config-second-undeclared", keyedcore.PreviousAttemptsHeader, "1")
	want(map[string]float64{"application false application": 1, "mesh false mesh": 2,
		"service-config true application": 2, "mesh true application": 3, "service-config true mesh": 1})
	// A refusal names the second owner too, in the error's metadata, on
	// every protocol.
	for _, protocol := range protocols {
		req := request("alice", "", "no-key-"+protocol, 1)
		req.Header().Set(keyedcore.HTTPRetryOwnerHeader, "application")
		req.Header().Set(keyedcore.PreviousAttemptsHeader, "1")
		_, err := e.client(protocol).CallUnary(ctx, req)
		ce := wantError(t, err, connect.CodeInvalidArgument, keyed.KeyMissing.Row().Reason)
		if got := ce.Meta().Get(keyedcore.HTTPSecondOwner); got != "service-config" {
			t.Errorf("%s: a refusal's %s %q, want service-config", protocol, keyedcore.HTTPSecondOwner, got)
		}
	}

	var got []string
	for _, ev := range logs.Events() {
		if ev["msg"] == "opledger: second retry owner" {
			got = append(got, ev["method"].(string)+" "+ev["layer"].(string)+" owner "+ev["owner"].(string)+" from "+ev["owner_from"].(string))
		}
	}
	wantEvents := []string{
		walletpb.DepositMethod + " service-config owner application from declared",
		walletpb.DepositMethod + " mesh owner application from declared",
	}
	if strings.Join(got, "\n") != strings.Join(wantEvents, "\n") {
		t.Fatalf("second-owner events:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(wantEvents, "\n"))
	}
	// One method key on every transport: opledger.method, the full
	// procedure, on the calls too; never rpc.method or grpc.method.
	ps, err := m.Collect(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range ps {
		if p.Attr("rpc.method") != "" || p.Attr("grpc.method") != "" || p.Attr("opledger.method") != walletpb.DepositMethod {
			t.Errorf("%s: want opledger.method %s and no other method attribute", p, walletpb.DepositMethod)
		}
	}
	if n := otelread.Sum(ps, "opledger.server.calls", attribute.String("opledger.method", walletpb.DepositMethod)); n == 0 {
		t.Errorf("no opledger.server.calls with opledger.method %s", walletpb.DepositMethod)
	}
}
