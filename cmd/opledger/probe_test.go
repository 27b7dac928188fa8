package main

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/reflection"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protodesc"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/descriptorpb"
	"google.golang.org/protobuf/types/known/anypb"

	"github.com/opledger/opledger/examples/payments/paymentspb"
	"github.com/opledger/opledger/internal/keybirth"
)

// runProbeJSON runs opledger probe with args and --json; it returns the
// exit code and the report.
func runProbeJSON(t *testing.T, args ...string) (int, probeJSON, string) {
	t.Helper()
	var out, errb bytes.Buffer
	code := run(context.Background(), append(append([]string{"probe"}, args...), "--json"), &out, &errb)
	var rep probeJSON
	if err := json.Unmarshal(out.Bytes(), &rep); err != nil {
		t.Fatalf("probe --json exited %d with %q (stderr %q): %v", code, out.String(), errb.String(), err)
	}
	return code, rep, errb.String()
}

func verdicts(rep probeJSON) map[string]string {
	v := map[string]string{}
	for _, c := range rep.Checks {
		v[c.Name] = c.Verdict
	}
	return v
}

const (
	probeRequest  = `{"from_account":"alice","to_account":"bob","amount_cents":100,"reference":"probe-1"}`
	probeRequest2 = `{"from_account":"alice","to_account":"bob","amount_cents":200,"reference":"probe-2"}`
)

// TestProbeServe: every check passes against opledger serve, on each of
// its three transports, and the token given with --header never shows.
func TestProbeServe(t *testing.T) {
	const token = "probe-secret-token"
	s := startServe(t, token)
	method := strings.TrimPrefix(paymentspb.TransferMethod, "/")
	auth := "Authorization: Bearer " + token
	common := []string{"--request", probeRequest, "--request2", probeRequest2, "--header", auth, "--concurrency", "6"}

	_, descs := paymentsDescriptorSet(t)
	for _, tc := range []struct {
		name string
		args []string
	}{
		{"grpc-reflection", []string{"--grpc", s.endpoints["grpc"], "--method", method}},
		{"grpc-reflection-keyed-option", []string{"--grpc", s.endpoints["grpc"]}},
		{"grpc-descriptors", []string{"--grpc", s.endpoints["grpc"], "--method", "/" + method, "--descriptors", descs}},
		{"connect", []string{"--connect", s.endpoints["connect"], "--method", method}},
		{"http", []string{"--http", s.endpoints["http"] + "/transfers"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, rep, stderr := runProbeJSON(t, append(tc.args, common...)...)
			if code != 0 || !rep.Passed {
				t.Fatalf("exit %d, stderr %q, report %+v", code, stderr, rep)
			}
			if tc.args[0] != "--http" && strings.TrimPrefix(rep.Method, "/") != method {
				t.Errorf("the report's method %q, want %q", rep.Method, method)
			}
			if len(rep.Checks) != len(probeCheckNames) {
				t.Fatalf("%d checks, want %d", len(rep.Checks), len(probeCheckNames))
			}
			for _, c := range rep.Checks {
				if c.Verdict != "pass" {
					t.Errorf("%s: %s %s", c.Name, c.Verdict, c.Detail)
				}
			}
		})
	}
	// The table, on one transport: every check's row, and no token.
	var out, errb bytes.Buffer
	code := run(context.Background(), append([]string{"probe", "--http", s.endpoints["http"] + "/transfers"}, common...), &out, &errb)
	if code != 0 {
		t.Fatalf("exit %d: %s %s", code, out.String(), errb.String())
	}
	for _, n := range probeCheckNames {
		if !strings.Contains(out.String(), n+" ") {
			t.Errorf("the table has no row %s:\n%s", n, out.String())
		}
	}
	if strings.Contains(out.String()+errb.String(), token) {
		t.Errorf("the output shows the token:\n%s", out.String())
	}
}

// paymentsDescriptorSet is a descriptor set of the payments' protos and
// their imports, as protoc --include_imports -o writes it, and the file it
// is written to.
func paymentsDescriptorSet(t *testing.T) (*descriptorpb.FileDescriptorSet, string) {
	set := &descriptorpb.FileDescriptorSet{}
	var add func(fd protoreflect.FileDescriptor)
	add = func(fd protoreflect.FileDescriptor) {
		for i := range fd.Imports().Len() {
			add(fd.Imports().Get(i).FileDescriptor)
		}
		if !slices.ContainsFunc(set.File, func(f *descriptorpb.FileDescriptorProto) bool { return f.GetName() == fd.Path() }) {
			set.File = append(set.File, protodesc.ToFileDescriptorProto(fd))
		}
	}
	add(paymentspb.File_payments_proto)
	b, err := proto.Marshal(set)
	if err != nil {
		t.Fatal(err)
	}
	descs := filepath.Join(t.TempDir(), "payments.pb")
	if err := os.WriteFile(descs, b, 0o600); err != nil {
		t.Fatal(err)
	}
	return set, descs
}

// TestProbeMethodFromOption: without --method, a gRPC probe takes the
// one method that carries the option (opledger.v1.keyed), among the
// services the server's reflection lists (TestProbeServe runs it against
// serve) or every service of --descriptors; several are refused, each
// named, and so is none.
func TestProbeMethodFromOption(t *testing.T) {
	set, descs := paymentsDescriptorSet(t)
	files, err := protodesc.NewFiles(set)
	if err != nil {
		t.Fatal(err)
	}
	transfer := strings.TrimPrefix(paymentspb.TransferMethod, "/")
	for _, tc := range []struct {
		served  []string
		want    string
		wantErr []string
	}{
		{served: []string{"grpc.reflection.v1.ServerReflection", "opledger.examples.payments.v1.Payments"}, want: transfer},
		{served: []string{"opledger.examples.payments.v1.Fraud"}, want: "opledger.examples.payments.v1.Fraud/Check"},
		{served: nil, wantErr: []string{"2 methods of --descriptors", "opledger.examples.payments.v1.Fraud/Check, " + transfer}},
		{served: []string{"grpc.reflection.v1.ServerReflection"}, wantErr: []string{"no method of the server's reflection carries"}},
	} {
		got, err := keyedMethodOf(files, tc.served)
		if got != tc.want || (err == nil) != (tc.wantErr == nil) {
			t.Errorf("%q: %q, %v; want %q", tc.served, got, err, tc.want)
			continue
		}
		for _, w := range tc.wantErr {
			if !strings.Contains(err.Error(), w) || !strings.HasPrefix(err.Error(), "--method is required") {
				t.Errorf("%q: %v, want it to say %q", tc.served, err, w)
			}
		}
	}

	// The command: payments.proto's descriptors declare two keyed methods
	// (Payments.Transfer and Fraud.Check): a usage error naming both, and
	// nothing sent (no server listens on the target).
	var out, errb bytes.Buffer
	code := run(context.Background(), []string{"probe", "--grpc", "127.0.0.1:1", "--descriptors", descs, "--request", "{}"}, &out, &errb)
	if code != 2 || !strings.Contains(errb.String(), "opledger.examples.payments.v1.Fraud/Check, "+transfer) {
		t.Errorf("exit %d, stderr %q: want 2 naming both keyed methods", code, errb.String())
	}
}

// fakeMode is how a fake keyed server gets idempotency wrong.
type fakeMode int

const (
	fakeCorrect      fakeMode = iota // the control: claim, run, record; duplicates in progress
	fakeNoLedger                     // runs every call
	fakeRacy                         // reads, then runs, then inserts: a check-then-act race
	fakeClaimOutside                 // records the key before the handler runs, outside its "transaction"
	fakeNoRetryJudge                 // a correct ledger, but it never names a second retry owner in its answers
)

// fakeServer is the transport-neutral core of a small keyed server,
// built without the kit, that speaks the protocol's outcomes
// (docs/protocol.md) and gets one promise wrong by its mode; fakeHTTP
// and fakeGRPC put it on net/http and on plain grpc-go.
type fakeServer struct {
	mode     fakeMode
	render   func(id int64) []byte // a new transfer's answer, as the transport encodes it
	mu       sync.Mutex
	entries  map[string]*fakeEntry
	arrived  map[string]chan struct{} // closed when a second call reaches the key
	arrivals map[string]int
	next     atomic.Int64
	failed   atomic.Bool // fakeClaimOutside: the handler failed once already
}

type fakeEntry struct {
	req     []byte
	status  int
	resp    []byte
	pending bool // fakeCorrect: claimed, not yet recorded
}

// fakeAnswer is the core's answer; the transports render it.
type fakeAnswer struct {
	status   int    // HTTP's status: 2xx a success
	outcome  string // the protocol's outcome name of a refusal, "" for none
	body     []byte
	replayed bool
	lifetime bool // the answer reached the "ledger"
	failed   bool // the handler failed: no outcome of the kit's
}

func newFakeServer(mode fakeMode, render func(int64) []byte) *fakeServer {
	return &fakeServer{mode: mode, render: render, entries: map[string]*fakeEntry{}, arrived: map[string]chan struct{}{}, arrivals: map[string]int{}}
}

// arrive counts a call that reached key (f.mu held).
func (f *fakeServer) arrive(key string) {
	ch := f.arrived[key]
	if ch == nil {
		ch = make(chan struct{})
		f.arrived[key] = ch
	}
	f.arrivals[key]++
	if f.arrivals[key] == 2 {
		close(ch)
	}
}

// await makes concurrent duplicates overlap without a sleep: the call
// that runs key waits until a second call reached the key too, or a
// bounded while for a call that stays alone.
func (f *fakeServer) await(key string) {
	f.mu.Lock()
	ch := f.arrived[key]
	f.mu.Unlock()
	select {
	case <-ch:
	case <-time.After(2 * time.Second):
	}
}

// execute is the business handler: a new transfer each time it runs.
func (f *fakeServer) execute(req []byte) *fakeEntry {
	return &fakeEntry{req: req, status: http.StatusCreated, resp: f.render(f.next.Add(1))}
}

func refused(status int, outcome string, lifetime bool) fakeAnswer {
	return fakeAnswer{status: status, outcome: outcome, lifetime: lifetime}
}

func answered(e *fakeEntry, replayed bool) fakeAnswer {
	return fakeAnswer{status: e.status, body: e.resp, replayed: replayed, lifetime: true}
}

// stored answers a key seen before: its replay, or key reuse.
func stored(e *fakeEntry, req []byte) fakeAnswer {
	if !bytes.Equal(e.req, req) {
		return refused(422, "idempotency-key-reused", true)
	}
	return answered(e, true)
}

// handle is one call: key ("" for none, already unquoted), the
// request's bytes, and whether it is a resolve.
func (f *fakeServer) handle(key string, req []byte, resolve bool) fakeAnswer {
	switch {
	case key == "":
		return refused(400, "idempotency-key-missing", false)
	case len(key) > 255:
		return refused(400, "idempotency-key-invalid", false)
	}
	if birth, ok := keybirth.Birth(key); ok && birth.Before(time.Now().Add(-24*time.Hour)) {
		return refused(422, "idempotency-key-expired", true)
	}
	if resolve {
		f.mu.Lock()
		defer f.mu.Unlock()
		e := f.entries[key]
		if e == nil || e.pending || f.mode == fakeNoLedger {
			return refused(404, "operation-not-found", true)
		}
		return answered(e, true)
	}
	switch f.mode {
	case fakeCorrect, fakeNoRetryJudge:
		return f.claimRunRecord(key, req)
	case fakeNoLedger:
		return answered(f.execute(req), false)
	case fakeRacy:
		f.mu.Lock()
		f.arrive(key)
		e := f.entries[key]
		f.mu.Unlock()
		if e != nil {
			return stored(e, req)
		}
		f.await(key) // both duplicates read nothing before either inserts
		e = f.execute(req)
		f.mu.Lock()
		f.entries[key] = e
		f.mu.Unlock()
		return answered(e, false)
	default: // fakeClaimOutside
		f.mu.Lock()
		defer f.mu.Unlock()
		if e := f.entries[key]; e != nil {
			return stored(e, req)
		}
		// The claim, committed on its own before the handler runs: an
		// empty answer that the handler's failure leaves in place.
		f.entries[key] = &fakeEntry{req: req, status: http.StatusOK}
		if !f.failed.Swap(true) {
			return fakeAnswer{status: 500, failed: true} // its transaction rolled back; the claim did not
		}
		// The handler runs under the lock, so that a concurrent duplicate
		// meets its answer and never the empty claim: this fake breaks the
		// failed call's promise alone, however the duplicates interleave
		// (with the claim visible meanwhile, a loaded run saw
		// concurrent-duplicates fail as well).
		e := f.execute(req)
		f.entries[key] = e
		return answered(e, false)
	}
}

// claimRunRecord is the correct order: claim (a pending entry), run,
// record; a duplicate that finds the claim is told the call is in
// progress, with pushback.
func (f *fakeServer) claimRunRecord(key string, req []byte) fakeAnswer {
	f.mu.Lock()
	f.arrive(key)
	e := f.entries[key]
	switch {
	case e == nil:
		e = &fakeEntry{req: req, pending: true}
		f.entries[key] = e
	case e.pending:
		f.mu.Unlock()
		return refused(409, "operation-in-progress", true)
	default:
		defer f.mu.Unlock()
		return stored(e, req)
	}
	f.mu.Unlock()
	f.await(key)
	done := f.execute(req)
	f.mu.Lock()
	defer f.mu.Unlock()
	e.status, e.resp, e.pending = done.status, done.resp, false
	return answered(e, false)
}

// secondOwner is the fake's judgement of a request's retry headers (get
// reads one): service-config when a gRPC library retried it
// (grpc-previous-rpc-attempts over 0) under a client that declares
// another owner; "" otherwise, and always with fakeNoRetryJudge.
func (f *fakeServer) secondOwner(get func(string) string) string {
	n, err := strconv.Atoi(get("grpc-previous-rpc-attempts"))
	if f.mode == fakeNoRetryJudge || err != nil || n < 1 {
		return ""
	}
	if o := get("opledger-retry-owner"); o != "" && o != "service-config" {
		return "service-config"
	}
	return ""
}

// fakeHTTP serves a fakeServer over net/http: POST, a JSON body, the key
// a structured-field string, problems as RFC 9457.
func fakeHTTP(t *testing.T, mode fakeMode) string {
	f := newFakeServer(mode, func(id int64) []byte { return []byte(`{"transfer_id":` + strconv.FormatInt(id, 10) + `}`) })
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") != "Bearer fake" {
			w.WriteHeader(http.StatusUnauthorized)
			return
		}
		key := r.Header.Get("Idempotency-Key")
		if key != "" {
			k, ok := strings.CutPrefix(key, `"`)
			k, ok2 := strings.CutSuffix(k, `"`)
			if key = k; !ok || !ok2 || k == "" {
				key = strings.Repeat("x", 256) // not a structured-field string: invalid
			}
		}
		body, _ := io.ReadAll(r.Body)
		a := f.handle(key, body, r.Header.Get("Idempotency-Resolve") == "1")
		if a.lifetime {
			w.Header().Set("Idempotency-Key-Lifetime", "86340")
		}
		if v := f.secondOwner(r.Header.Get); v != "" {
			w.Header().Set("Opledger-Second-Retry-Owner", v)
		}
		switch {
		case a.failed:
			http.Error(w, "the handler failed", a.status)
		case a.outcome != "":
			if a.status == 409 {
				w.Header().Set("Retry-After", "1")
			}
			w.Header().Set("Content-Type", "application/problem+json")
			w.WriteHeader(a.status)
			fmt.Fprintf(w, `{"type":"https://github.com/opledger/opledger/blob/main/docs/http.md#%s","status":%d}`, a.outcome, a.status)
		default:
			if a.replayed {
				w.Header().Set("Idempotency-Replayed", "true")
			}
			w.WriteHeader(a.status)
			w.Write(a.body)
		}
	}))
	t.Cleanup(srv.Close)
	return srv.URL + "/transfers"
}

// fakeConnect serves a fakeServer as the Connect protocol's unary JSON
// on plain net/http: the raw key, a success's metadata in Trailer-
// headers, an error as Connect's JSON error with the ErrorInfo detail.
func fakeConnect(t *testing.T, mode fakeMode) string {
	f := newFakeServer(mode, func(id int64) []byte { return []byte(`{"transferId":"` + strconv.FormatInt(id, 10) + `"}`) })
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		if r.Header.Get("Authorization") != "Bearer fake" {
			w.WriteHeader(http.StatusUnauthorized)
			io.WriteString(w, `{"code":"unauthenticated"}`)
			return
		}
		body, _ := io.ReadAll(r.Body)
		a := f.handle(r.Header.Get("Idempotency-Key"), body, r.Header.Get("Idempotency-Resolve") == "1")
		prefix := ""
		if a.outcome == "" && !a.failed {
			prefix = "Trailer-" // a success's trailers
		}
		if a.lifetime {
			w.Header().Set(prefix+"Idempotency-Key-Lifetime", "86340")
		}
		if v := f.secondOwner(r.Header.Get); v != "" {
			w.Header().Set(prefix+"Opledger-Second-Retry-Owner", v)
		}
		switch {
		case a.failed:
			w.WriteHeader(http.StatusInternalServerError)
			io.WriteString(w, `{"code":"internal","message":"the handler failed"}`)
		case a.outcome != "":
			c := fakeGRPCReasons[a.outcome]
			if a.status == 409 {
				w.Header().Set("Grpc-Retry-Pushback-Ms", "200")
			}
			w.WriteHeader(a.status)
			fmt.Fprintf(w, `{"code":%q,"details":[{"type":"google.rpc.ErrorInfo","value":%q}]}`,
				codeName(c.code.String()), base64.RawStdEncoding.EncodeToString(errorInfo(c.reason)))
		default:
			if a.replayed {
				w.Header().Set(prefix+"Idempotency-Replayed", "true")
			}
			w.WriteHeader(http.StatusOK)
			w.Write(a.body)
		}
	}))
	t.Cleanup(srv.Close)
	return srv.URL
}

// errorInfo is a google.rpc.ErrorInfo's bytes, built without its type.
func errorInfo(reason string) []byte {
	b := protowire.AppendTag(nil, 1, protowire.BytesType)
	b = protowire.AppendString(b, reason)
	b = protowire.AppendTag(b, 2, protowire.BytesType)
	return protowire.AppendString(b, "fake")
}

// fakeGRPCReasons are the gRPC code and ErrorInfo reason of the
// outcomes the fake refuses with.
var fakeGRPCReasons = map[string]struct {
	code   codes.Code
	reason string
}{
	"idempotency-key-missing": {codes.InvalidArgument, "MISSING_IDEMPOTENCY_KEY"},
	"idempotency-key-invalid": {codes.InvalidArgument, "INVALID_IDEMPOTENCY_KEY"},
	"idempotency-key-expired": {codes.FailedPrecondition, "IDEMPOTENCY_KEY_EXPIRED"},
	"idempotency-key-reused":  {codes.FailedPrecondition, "IDEMPOTENCY_KEY_REUSED"},
	"operation-in-progress":   {codes.Aborted, "OPERATION_IN_PROGRESS"},
	"operation-not-found":     {codes.NotFound, "OPERATION_NOT_FOUND"},
}

// fakePayments serves a fakeServer as the payments service on plain
// grpc-go: metadata in, trailers and a google.rpc.Status with an
// ErrorInfo (built by hand) out.
type fakePayments struct {
	f *fakeServer
}

func (fakePayments) GetTransfer(context.Context, *paymentspb.GetTransferRequest) (*paymentspb.TransferReply, error) {
	return nil, status.Error(codes.Unimplemented, "not in the fake")
}

func (p fakePayments) Transfer(ctx context.Context, in *paymentspb.TransferRequest) (*paymentspb.TransferReply, error) {
	md, _ := metadata.FromIncomingContext(ctx)
	first := func(k string) string {
		if v := md.Get(k); len(v) > 0 {
			return v[0]
		}
		return ""
	}
	if first("authorization") != "Bearer fake" {
		return nil, status.Error(codes.Unauthenticated, "no token")
	}
	req, err := proto.MarshalOptions{Deterministic: true}.Marshal(in)
	if err != nil {
		return nil, err
	}
	a := p.f.handle(first("idempotency-key"), req, first("idempotency-resolve") == "1")
	tr := metadata.MD{}
	if a.lifetime {
		tr.Set("idempotency-key-lifetime", "86340")
	}
	if v := p.f.secondOwner(first); v != "" {
		tr.Set("opledger-second-retry-owner", v)
	}
	switch {
	case a.failed:
		grpc.SetTrailer(ctx, tr)
		return nil, status.Error(codes.Internal, "the handler failed")
	case a.outcome != "":
		c := fakeGRPCReasons[a.outcome]
		if a.status == 409 {
			tr.Set("grpc-retry-pushback-ms", "200")
		}
		grpc.SetTrailer(ctx, tr)
		st := status.New(c.code, a.outcome).Proto()
		st.Details = append(st.Details, &anypb.Any{TypeUrl: "type.googleapis.com/google.rpc.ErrorInfo", Value: errorInfo(c.reason)})
		return nil, status.ErrorProto(st)
	}
	if a.replayed {
		tr.Set("idempotency-replayed", "true")
	}
	grpc.SetTrailer(ctx, tr)
	out := &paymentspb.TransferReply{}
	if err := proto.Unmarshal(a.body, out); err != nil {
		return nil, err
	}
	return out, nil
}

// fakeGRPC serves a fakeServer on plain grpc-go, with reflection.
func fakeGRPC(t *testing.T, mode fakeMode) string {
	f := newFakeServer(mode, func(id int64) []byte {
		b, _ := proto.Marshal(&paymentspb.TransferReply{TransferId: id})
		return b
	})
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer()
	paymentspb.RegisterPaymentsServer(srv, fakePayments{f: f})
	reflection.Register(srv)
	go srv.Serve(lis)
	t.Cleanup(srv.Stop)
	return lis.Addr().String()
}

// TestProbeFakeServers: the probe passes against a correct fake server
// and fails, naming the broken promise, against one without a ledger,
// one that reads before it inserts, one that claims outside the
// handler's transaction, and one that never names a second retry owner
// in its answers; each fake on plain HTTP and the Connect
// protocol (net/http) and on plain grpc-go.
func TestProbeFakeServers(t *testing.T) {
	method := strings.TrimPrefix(paymentspb.TransferMethod, "/")
	targets := map[string]func(t *testing.T, mode fakeMode) []string{
		"http": func(t *testing.T, mode fakeMode) []string { return []string{"--http", fakeHTTP(t, mode)} },
		"grpc": func(t *testing.T, mode fakeMode) []string {
			return []string{"--grpc", fakeGRPC(t, mode), "--method", method}
		},
		"connect": func(t *testing.T, mode fakeMode) []string {
			return []string{"--connect", fakeConnect(t, mode), "--method", method}
		},
	}
	for _, tc := range []struct {
		name   string
		mode   fakeMode
		broken []string // the checks that must fail; nil: every check passes
	}{
		{"correct", fakeCorrect, nil},
		{"no-ledger", fakeNoLedger, []string{"replay-identical", "key-reuse-refused", "concurrent-duplicates", "resolve-committed"}},
		{"read-before-insert", fakeRacy, []string{"concurrent-duplicates"}},
		{"claim-outside-transaction", fakeClaimOutside, []string{"executes-once"}},
		{"no-second-owner", fakeNoRetryJudge, []string{"second-owner-detected"}},
	} {
		for tname, target := range targets {
			t.Run(tc.name+"/"+tname, func(t *testing.T) {
				t.Parallel()
				common := []string{"--request", probeRequest, "--request2", probeRequest2, "--header", "Authorization: Bearer fake", "--concurrency", "8"}
				code, rep, stderr := runProbeJSON(t, append(target(t, tc.mode), common...)...)
				checkFakeVerdicts(t, tc.mode, tc.broken, code, rep, stderr)
				if tc.broken == nil {
					return
				}
				// The table names every broken promise (a fresh server: the
				// claim-outside one fails its handler once).
				var out bytes.Buffer
				if code := run(context.Background(), append(append([]string{"probe"}, target(t, tc.mode)...), common...), &out, io.Discard); code != 1 {
					t.Fatalf("table: exit %d, want 1", code)
				}
				t.Log("\n" + out.String())
				last := out.String()[strings.LastIndex(strings.TrimSpace(out.String()), "\n")+1:]
				want := "FAIL: broken promises: " + strings.Join(tc.broken, ", ")
				if strings.TrimSpace(last) != want {
					t.Errorf("the table's last line %q, want %q", last, want)
				}
			})
		}
	}
}

// checkFakeVerdicts checks a --json report against a fake: exactly the
// broken checks fail (nil: every check passes, and the correct fake's
// duplicates were told to wait, then got the replay).
func checkFakeVerdicts(t *testing.T, mode fakeMode, broken []string, code int, rep probeJSON, stderr string) {
	t.Helper()
	wantCode := 1
	if broken == nil {
		wantCode = 0
	}
	if code != wantCode || rep.Passed != (broken == nil) {
		t.Fatalf("exit %d (stderr %q), want %d: %+v", code, stderr, wantCode, rep.Checks)
	}
	for _, c := range rep.Checks {
		want := "pass"
		switch {
		case slices.Contains(broken, c.Name):
			want = "fail"
		case mode == fakeClaimOutside && slices.Contains([]string{"replay-identical", "key-reuse-refused", "resolve-committed"}, c.Name):
			want = "skip" // executes-once did not succeed
		}
		if c.Verdict != want {
			t.Errorf("%s: %s (%s), want %s", c.Name, c.Verdict, c.Detail, want)
		}
		if mode == fakeCorrect && c.Name == "concurrent-duplicates" && (!strings.HasPrefix(c.Detail, "1 ran") || strings.Contains(c.Detail, " 0 in progress")) {
			t.Errorf("concurrent-duplicates: %q, want 1 ran and some in progress then replayed", c.Detail)
		}
	}
}

// TestProbeUsage: usage errors exit 2, and never print a header's value.
func TestProbeUsage(t *testing.T) {
	for _, args := range [][]string{
		{},
		{"--request", "{}"},
		{"--http", "http://127.0.0.1:1/x", "--connect", "http://127.0.0.1:1", "--request", "{}"},
		{"--http", "http://127.0.0.1:1/x"},
		{"--http", "http://127.0.0.1:1/x", "--request", "{not json"},
		{"--http", "http://127.0.0.1:1/x", "--request", "{}", "--request2", "{ }"},
		{"--http", "ftp://127.0.0.1:1/x", "--request", "{}"},
		{"--connect", "http://127.0.0.1:1", "--request", "{}"},
		{"--connect", "http://127.0.0.1:1", "--method", "Transfer", "--request", "{}"},
		{"--grpc", "127.0.0.1:1", "--method", "a.B/C", "--request", "{}", "--descriptors", "/nonexistent.pb"},
		{"--http", "http://127.0.0.1:1/x", "--request", "{}", "--concurrency", "1"},
		{"--http", "http://127.0.0.1:1/x", "--request", "{}", "--header", "no-colon-s3cret"},
	} {
		var out, errb bytes.Buffer
		args = append(args, "--header", "Authorization: Bearer s3cret")
		if code := run(context.Background(), append([]string{"probe"}, args...), &out, &errb); code != 2 {
			t.Errorf("%q: exit %d, want 2 (stdout %q)", args, code, out.String())
		}
		if strings.Contains(out.String()+errb.String(), "s3cret") {
			t.Errorf("%q: the output shows a header's value: %s%s", args, out.String(), errb.String())
		}
	}
}
