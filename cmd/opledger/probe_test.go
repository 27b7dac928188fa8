package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protodesc"
	"google.golang.org/protobuf/types/descriptorpb"

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

	// A descriptor set of the payments' protos, as protoc -o writes it.
	set := &descriptorpb.FileDescriptorSet{File: []*descriptorpb.FileDescriptorProto{protodesc.ToFileDescriptorProto(paymentspb.File_payments_proto)}}
	b, err := proto.Marshal(set)
	if err != nil {
		t.Fatal(err)
	}
	descs := filepath.Join(t.TempDir(), "payments.pb")
	if err := os.WriteFile(descs, b, 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		args []string
	}{
		{"grpc-reflection", []string{"--grpc", s.endpoints["grpc"], "--method", method}},
		{"grpc-descriptors", []string{"--grpc", s.endpoints["grpc"], "--method", "/" + method, "--descriptors", descs}},
		{"connect", []string{"--connect", s.endpoints["connect"], "--method", method}},
		{"http", []string{"--http", s.endpoints["http"] + "/transfers"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, rep, stderr := runProbeJSON(t, append(tc.args, common...)...)
			if code != 0 || !rep.Passed {
				t.Fatalf("exit %d, stderr %q, report %+v", code, stderr, rep)
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

// fakeMode is how a fake keyed HTTP server gets idempotency wrong.
type fakeMode int

const (
	fakeCorrect      fakeMode = iota // the control: check, run and record under one lock
	fakeNoLedger                     // runs every call
	fakeRacy                         // reads, then runs, then inserts: a check-then-act race
	fakeClaimOutside                 // records the key before the handler runs, outside its "transaction"
)

// fakeServer is a small keyed HTTP server, built on net/http alone,
// that speaks the protocol's headers and problems (docs/protocol.md) and
// gets one promise wrong by its mode.
type fakeServer struct {
	mode     fakeMode
	mu       sync.Mutex
	entries  map[string]*fakeEntry
	arrived  map[string]chan struct{} // fakeRacy: closed when a second call reaches the key
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

func newFakeServer(t *testing.T, mode fakeMode) string {
	f := &fakeServer{mode: mode, entries: map[string]*fakeEntry{}, arrived: map[string]chan struct{}{}, arrivals: map[string]int{}}
	srv := httptest.NewServer(f)
	t.Cleanup(srv.Close)
	return srv.URL + "/transfers"
}

func problem(w http.ResponseWriter, status int, name string) {
	w.Header().Set("Content-Type", "application/problem+json")
	w.WriteHeader(status)
	fmt.Fprintf(w, `{"type":"https://github.com/opledger/opledger/blob/main/docs/http.md#%s","status":%d}`, name, status)
}

// execute is the business handler: a new transfer each time it runs.
func (f *fakeServer) execute() *fakeEntry {
	return &fakeEntry{status: http.StatusCreated, resp: []byte(`{"transfer_id":` + strconv.FormatInt(f.next.Add(1), 10) + `}`)}
}

func replay(w http.ResponseWriter, e *fakeEntry) {
	w.Header().Set("Idempotency-Replayed", "true")
	w.WriteHeader(e.status)
	w.Write(e.resp)
}

func (f *fakeServer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Header.Get("Authorization") != "Bearer fake" {
		problem(w, 401, "caller-not-identified")
		return
	}
	raw := r.Header.Get("Idempotency-Key")
	if raw == "" {
		problem(w, 400, "idempotency-key-missing")
		return
	}
	key, ok := strings.CutPrefix(raw, `"`)
	key, ok2 := strings.CutSuffix(key, `"`)
	if !ok || !ok2 || key == "" || len(key) > 255 {
		problem(w, 400, "idempotency-key-invalid")
		return
	}
	w.Header().Set("Idempotency-Key-Lifetime", "86340")
	if birth, ok := keybirth.Birth(key); ok && birth.Before(time.Now().Add(-24*time.Hour)) {
		problem(w, 422, "idempotency-key-expired")
		return
	}
	body, _ := io.ReadAll(r.Body)
	if r.Header.Get("Idempotency-Resolve") == "1" {
		f.mu.Lock()
		e := f.entries[key]
		f.mu.Unlock()
		if e == nil || f.mode == fakeNoLedger {
			problem(w, 404, "operation-not-found")
			return
		}
		replay(w, e)
		return
	}
	// stored answers a key seen before: its replay, or key reuse.
	stored := func(e *fakeEntry) {
		if !bytes.Equal(e.req, body) {
			problem(w, 422, "idempotency-key-reused")
			return
		}
		replay(w, e)
	}
	switch f.mode {
	case fakeCorrect:
		// Claim (a pending entry), run, record; a duplicate that finds
		// the claim is told the call is in progress, with pushback.
		f.mu.Lock()
		f.arrive(key)
		e := f.entries[key]
		var copied fakeEntry
		claimed, pending := false, false
		switch {
		case e == nil:
			e, claimed = &fakeEntry{req: body, pending: true}, true
			f.entries[key] = e
		case e.pending:
			pending = true
		default:
			copied = *e
		}
		f.mu.Unlock()
		switch {
		case pending:
			w.Header().Set("Retry-After", "1")
			problem(w, 409, "operation-in-progress")
			return
		case !claimed:
			stored(&copied)
			return
		}
		f.await(key)
		done := f.execute()
		f.mu.Lock()
		e.status, e.resp, e.pending = done.status, done.resp, false
		f.mu.Unlock()
		w.WriteHeader(e.status)
		w.Write(e.resp)
	case fakeNoLedger:
		e := f.execute()
		w.WriteHeader(e.status)
		w.Write(e.resp)
	case fakeRacy:
		f.mu.Lock()
		f.arrive(key)
		e := f.entries[key]
		f.mu.Unlock()
		if e != nil {
			stored(e)
			return
		}
		f.await(key) // both duplicates read nothing before either inserts
		e = f.execute()
		e.req = body
		f.mu.Lock()
		f.entries[key] = e
		f.mu.Unlock()
		w.WriteHeader(e.status)
		w.Write(e.resp)
	case fakeClaimOutside:
		f.mu.Lock()
		e := f.entries[key]
		if e == nil {
			// The claim, committed on its own before the handler runs:
			// an empty answer the handler's outcome may never replace.
			f.entries[key] = &fakeEntry{req: body, status: http.StatusOK}
		}
		f.mu.Unlock()
		if e != nil {
			stored(e)
			return
		}
		if !f.failed.Swap(true) {
			http.Error(w, "the handler failed", http.StatusInternalServerError) // its transaction rolled back; the claim did not
			return
		}
		e = f.execute()
		e.req = body
		f.mu.Lock()
		f.entries[key] = e
		f.mu.Unlock()
		w.WriteHeader(e.status)
		w.Write(e.resp)
	}
}

// TestProbeFakeServers: the probe passes against a correct fake server
// and fails, naming the broken promise, against one without a ledger,
// one that reads before it inserts, and one that claims outside the
// handler's transaction (HTTP fakes: the checks are the same on every
// transport).
func TestProbeFakeServers(t *testing.T) {
	for _, tc := range []struct {
		name   string
		mode   fakeMode
		broken []string // the checks that must fail; nil: every check passes
	}{
		{"correct", fakeCorrect, nil},
		{"no-ledger", fakeNoLedger, []string{"replay-identical", "concurrent-duplicates"}},
		{"read-before-insert", fakeRacy, []string{"concurrent-duplicates"}},
		{"claim-outside-transaction", fakeClaimOutside, []string{"executes-once"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			u := newFakeServer(t, tc.mode)
			args := []string{"--http", u, "--request", probeRequest, "--request2", probeRequest2, "--header", "Authorization: Bearer fake", "--concurrency", "8"}
			code, rep, stderr := runProbeJSON(t, args...)
			v := verdicts(rep)
			if tc.broken == nil {
				if code != 0 || !rep.Passed {
					t.Fatalf("exit %d (stderr %q), want 0: %+v", code, stderr, rep.Checks)
				}
				// The duplicates that found the claim were told to wait, and
				// got the replay after the pushback.
				for _, c := range rep.Checks {
					if c.Name == "concurrent-duplicates" && (!strings.HasPrefix(c.Detail, "1 ran") || strings.Contains(c.Detail, " 0 in progress")) {
						t.Errorf("concurrent-duplicates: %q, want 1 ran and some in progress then replayed", c.Detail)
					}
				}
				return
			}
			if code != 1 || rep.Passed {
				t.Fatalf("exit %d (stderr %q), want 1: %+v", code, stderr, rep.Checks)
			}
			for _, n := range tc.broken {
				if v[n] != "fail" {
					t.Errorf("%s: %s, want fail: %+v", n, v[n], rep.Checks)
				}
			}
			if tc.mode == fakeRacy {
				for n, verdict := range v {
					if n != "concurrent-duplicates" && verdict != "pass" {
						t.Errorf("%s: %s, want pass (only the race is wrong)", n, verdict)
					}
				}
			}
			// The table names every broken promise (a fresh server: the
			// claim-outside one fails its handler once).
			args[1] = newFakeServer(t, tc.mode)
			var out bytes.Buffer
			if code := run(context.Background(), append([]string{"probe"}, args...), &out, io.Discard); code != 1 {
				t.Fatalf("table: exit %d, want 1", code)
			}
			t.Log("\n" + out.String())
			last := out.String()[strings.LastIndex(strings.TrimSpace(out.String()), "\n")+1:]
			for _, n := range tc.broken {
				if !strings.Contains(last, n) {
					t.Errorf("the table's last line %q does not name %s", last, n)
				}
			}
		})
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
