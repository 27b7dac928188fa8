package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protodesc"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/descriptorpb"

	"github.com/opledger/opledger/examples/payments/paymentspb"
	"github.com/opledger/opledger/internal/testkit/xdstest"
)

const (
	xdsGetTransfer = "/opledger.examples.payments.v1.Payments/GetTransfer"
	xdsTransfer    = "/opledger.examples.payments.v1.Payments/Transfer"
)

// plainPayments answers both methods; the recorder in front of it fails
// the first attempts.
type plainPayments struct{}

func (plainPayments) Transfer(_ context.Context, req *paymentspb.TransferRequest) (*paymentspb.TransferReply, error) {
	return &paymentspb.TransferReply{TransferId: 1, Reference: req.GetReference()}, nil
}

func (plainPayments) GetTransfer(_ context.Context, req *paymentspb.GetTransferRequest) (*paymentspb.TransferReply, error) {
	return &paymentspb.TransferReply{TransferId: req.GetTransferId()}, nil
}

// TestXDSRetriesMatchPolicyCheck runs a real xDS control plane whose route
// retries UNAVAILABLE 3 times, a grpc-go client dialling xds:///payments and
// a plain server that fails the first 3 attempts of each method: grpc-go
// makes the 4 attempts the control plane says, and "policy check --xds" on
// the same RouteConfiguration (protojson, in both field spellings) reports
// those 4 attempts per method, the amplification with the application's
// attempts, and the xDS layer as a second owner when the owner is the
// application.
func TestXDSRetriesMatchPolicyCheck(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second) // hang guard
	defer cancel()
	rec := xdstest.NewRecorder(3, codes.Unavailable)
	addr := xdstest.Backend(t, func(s *grpc.Server) { paymentspb.RegisterPaymentsServer(s, plainPayments{}) },
		grpc.UnaryInterceptor(rec.Interceptor()))
	cp := xdstest.Start(t)
	svc := xdstest.Service{Name: "payments", Endpoints: []string{addr}, Routes: []*routev3.Route{{
		Name:  "all",
		Match: &routev3.RouteMatch{PathSpecifier: &routev3.RouteMatch_Prefix{Prefix: "/"}},
		Action: &routev3.Route_Route{Route: &routev3.RouteAction{
			RetryPolicy: xdstest.RetryPolicy(3, "unavailable"),
		}},
	}}}
	if err := cp.Set(ctx, svc); err != nil {
		t.Fatal(err)
	}
	client := paymentspb.NewPaymentsClient(cp.Dial(t, "payments"))
	if _, err := client.GetTransfer(ctx, &paymentspb.GetTransferRequest{TransferId: 3}, grpc.WaitForReady(true)); err != nil {
		t.Fatalf("GetTransfer: %v (NACKs %q)", err, cp.NACKs())
	}
	if _, err := client.Transfer(ctx, &paymentspb.TransferRequest{Reference: "r"}, grpc.WaitForReady(true)); err != nil {
		t.Fatalf("Transfer: %v", err)
	}
	observed := map[string]int{}
	for _, m := range []string{xdsGetTransfer, xdsTransfer} {
		got := rec.Attempts(m)
		if want := []string{"", "1", "2", "3"}; !slices.Equal(got, want) {
			t.Fatalf("%s: grpc-previous-rpc-attempts per attempt = %q, want %q", m, got, want)
		}
		observed[m] = len(got)
	}
	rec.Reset(1 << 30) // a total outage: still 4 attempts, then the error
	if _, err := client.GetTransfer(ctx, &paymentspb.GetTransferRequest{TransferId: 4}); status.Code(err) != codes.Unavailable || len(rec.Attempts(xdsGetTransfer)) != 4 {
		t.Fatalf("outage: %v after %d attempts", err, len(rec.Attempts(xdsGetTransfer)))
	}

	dir := t.TempDir()
	desc := writeProtoFile(t, dir, paymentspb.File_payments_proto, "Payments")
	rc := svc.RouteConfiguration()
	for _, spelling := range []struct {
		name string
		opts protojson.MarshalOptions
	}{{"camelCase", protojson.MarshalOptions{}}, {"snake_case", protojson.MarshalOptions{UseProtoNames: true}}} {
		js, err := spelling.opts.Marshal(rc)
		if err != nil {
			t.Fatal(err)
		}
		rcPath := filepath.Join(dir, spelling.name+".json")
		if err := os.WriteFile(rcPath, js, 0o600); err != nil {
			t.Fatal(err)
		}
		for _, owner := range []string{"application", "mesh"} {
			var out, errOut bytes.Buffer
			code := runPolicy(ctx, []string{"check", "--descriptors", desc, "--xds", rcPath, "--target", "xds:///payments",
				"--owner", owner, "--keyed", xdsTransfer, "--json"}, &out, &errOut)
			if code != 1 {
				t.Fatalf("%s, owner %s: exit %d: %s%s", spelling.name, owner, code, out.String(), errOut.String())
			}
			var rep struct {
				XDS      bool `json:"xds"`
				Findings []struct {
					Kind, Method, Layer string
				} `json:"findings"`
				Methods []struct {
					Method string `json:"method"`
					Layers []struct {
						Layer    string `json:"layer"`
						Attempts int    `json:"attempts"`
					} `json:"layers"`
					Amplification int `json:"amplification"`
				} `json:"methods"`
			}
			if err := json.Unmarshal(out.Bytes(), &rep); err != nil {
				t.Fatalf("%s: %v\n%s", spelling.name, err, out.String())
			}
			if !rep.XDS || len(rep.Methods) != 2 {
				t.Fatalf("%s: report %+v", spelling.name, rep)
			}
			var kinds []string
			for _, f := range rep.Findings {
				if f.Layer != "xds" {
					t.Errorf("%s: finding on layer %q", spelling.name, f.Layer)
				}
				kinds = append(kinds, f.Kind+" "+f.Method)
			}
			for _, m := range rep.Methods {
				var xds, app int
				for _, l := range m.Layers {
					switch l.Layer {
					case "xds":
						xds = l.Attempts
					case "application":
						app = l.Attempts
					}
				}
				if xds != observed[m.Method] {
					t.Errorf("%s, owner %s: %s xds attempts %d, grpc-go made %d", spelling.name, owner, m.Method, xds, observed[m.Method])
				}
				wantApp := 1
				if owner == "application" {
					wantApp = 5 // the kit client's default attempts: the kit retries a read and a keyed mutation with a ledger
				}
				if app != wantApp || m.Amplification != wantApp*observed[m.Method] {
					t.Errorf("%s, owner %s: %s application %d, amplification %d", spelling.name, owner, m.Method, app, m.Amplification)
				}
			}
			want := []string{"no-budget " + xdsGetTransfer, "no-budget " + xdsTransfer}
			if owner == "application" {
				want = []string{"second-owner " + xdsGetTransfer, "no-budget " + xdsGetTransfer, "second-owner " + xdsTransfer, "no-budget " + xdsTransfer}
			}
			if !slices.Equal(kinds, want) {
				t.Errorf("%s, owner %s: findings %q, want %q", spelling.name, owner, kinds, want)
			}
		}
	}
	// Without the ledger, the keyed Transfer retried on UNAVAILABLE is unsafe.
	js, _ := protojson.Marshal(rc)
	rcPath := filepath.Join(dir, "rc.json")
	if err := os.WriteFile(rcPath, js, 0o600); err != nil {
		t.Fatal(err)
	}
	var out, errOut bytes.Buffer
	runPolicy(ctx, []string{"check", "--descriptors", desc, "--xds", rcPath, "--owner", "mesh", "--keyed-no-ledger", xdsTransfer}, &out, &errOut)
	if !strings.Contains(out.String(), `retry-keyed-without-ledger: RouteConfiguration payments-routes (document 1) virtualHosts[0].routes[0].route.retryPolicy method "`+xdsTransfer+`"`) {
		t.Errorf("no ledger:\n%s", out.String())
	}
}

// writeProtoFile writes a FileDescriptorSet with one file (which must import
// nothing) and only its service named keep, for --descriptors: the catalog
// of a channel to that service.
func writeProtoFile(t *testing.T, dir string, fd protoreflect.FileDescriptor, keep string) string {
	t.Helper()
	// Its imports first (payments.proto imports opledger/v1/opledger.proto
	// for the keyed option), as protoc --include_imports writes them.
	var set descriptorpb.FileDescriptorSet
	var imports func(fd protoreflect.FileDescriptor)
	imports = func(fd protoreflect.FileDescriptor) {
		for i := range fd.Imports().Len() {
			imp := fd.Imports().Get(i).FileDescriptor
			imports(imp)
			if !slices.ContainsFunc(set.File, func(f *descriptorpb.FileDescriptorProto) bool { return f.GetName() == imp.Path() }) {
				set.File = append(set.File, protodesc.ToFileDescriptorProto(imp))
			}
		}
	}
	imports(fd)
	fdp := protodesc.ToFileDescriptorProto(fd)
	var services []*descriptorpb.ServiceDescriptorProto
	for _, s := range fdp.GetService() {
		if s.GetName() == keep {
			services = append(services, s)
		}
	}
	fdp.Service = services
	set.File = append(set.File, fdp)
	b, err := proto.Marshal(&set)
	if err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(dir, "payments.pb")
	if err := os.WriteFile(p, b, 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}
