package doccheck_test

import (
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"google.golang.org/genproto/googleapis/rpc/code"

	"github.com/opledger/opledger/grpcint"
	"github.com/opledger/opledger/httpint"
	"github.com/opledger/opledger/internal/keybirth"
	"github.com/opledger/opledger/internal/keyedconf"
	"github.com/opledger/opledger/internal/keyedcore"
	"github.com/opledger/opledger/internal/keyedcore/keyedproto"
	"github.com/opledger/opledger/internal/testkit/keyedtest"
	"github.com/opledger/opledger/keyed"
	"github.com/opledger/opledger/policy"
)

// protocolDoc is the wire protocol's page, for clients in any language.
const protocolDoc = "../../../docs/protocol.md"

// protocolCells renders an outcome as docs/protocol.md's table prints it:
// the RPC rendering (gRPC's, and connect's, whose codes are the same)
// beside httpint's.
func protocolCells(r keyed.Row) []string {
	rpc := "?"
	if rr, ok := keyedproto.Render(r.Outcome); ok {
		rpc = rr.Own
		if rr.Own == "" {
			rpc = "`" + code.Code_name[int32(rr.Code)] + "`"
			if r.Pushback {
				rpc += " + grpc-retry-pushback-ms"
			}
		}
	}
	reason := "—"
	if r.Reason != "" {
		reason = "`" + r.Reason + "`"
	}
	http := "—"
	switch r.Outcome {
	case keyed.Replayed:
		http = "the stored response's, with Idempotency-Replayed and " + httpint.ReplayedHeader
	case keyed.HandlerPanic:
		http = "none: net/http aborts the response"
	}
	for _, h := range httpint.Renderings() {
		if h.Name != r.Name {
			continue
		}
		if http == "—" {
			http = "the handler's"
		}
		if h.Status != 0 {
			http = strconv.Itoa(h.Status)
			if h.RetryAfter {
				http += " + Retry-After"
			}
		}
	}
	return []string{"`" + r.Name + "`", string(r.Side), rpc, reason, http, string(r.Committed), r.Next.String()}
}

// TestProtocolOutcomeTable: the outcome table of docs/protocol.md is
// package keyed's classification as the RPC transports and httpint render
// it.
func TestProtocolOutcomeTable(t *testing.T) {
	keyedtest.WantTable(t, protocolDoc, "protocol-outcomes", "keyed.Outcomes() as keyedproto and httpint render them",
		[]string{"outcome", "from", "gRPC, connect", "reason", "HTTP", "committed", "next"}, protocolCells)
}

// TestProtocolHeaders: docs/protocol.md's header table names every header
// and metadata key the transports read and write, in the forms they use,
// and every value of the owner declaration.
func TestProtocolHeaders(t *testing.T) {
	b, err := os.ReadFile(protocolDoc)
	if err != nil {
		t.Fatal(err)
	}
	s := string(b)
	i, j := strings.Index(s, "<!-- protocol-headers:begin -->"), strings.Index(s, "<!-- protocol-headers:end -->")
	if i < 0 || j < i {
		t.Fatal("docs/protocol.md has no protocol-headers section")
	}
	section := s[i:j]
	names := []string{
		grpcint.KeyHeader, grpcint.ResolveHeader, grpcint.ReplayedHeader, grpcint.ReplayedCodeHeader,
		httpint.KeyHeader, httpint.ResolveHeader, httpint.ReplayedHeader, httpReplayedHeader,
		keybirth.FirstSentHeader, strings.ToLower(keybirth.FirstSentHeader),
		keyedcore.LifetimeHeader, strings.ToLower(keyedcore.LifetimeHeader),
		keyedcore.RetryOwnerHeader, keyedcore.HTTPRetryOwnerHeader, keyedcore.AttemptHeader, keyedcore.HTTPAttemptHeader,
		keyedcore.EnvoyAttemptCountHeader, keyedcore.PreviousAttemptsHeader, keyedcore.SecondOwnerHeader, keyedcore.HTTPSecondOwner,
		policy.PushbackHeader, "Retry-After", "grpc-status-details-bin", grpcint.ErrorDomain, httpint.ProblemTypeBase,
		keyedproto.RequestIDField,
	}
	for _, o := range []policy.RetryOwner{policy.OwnerApplication, policy.OwnerServiceConfig, policy.OwnerMesh, policy.OwnerNone} {
		names = append(names, o.String())
	}
	for _, n := range names {
		if !strings.Contains(section, "`"+n+"`") {
			t.Errorf("docs/protocol.md's header table does not name `%s`", n)
		}
	}
	for _, n := range []string{"Grpc-Previous-Rpc-Attempts", "X-Envoy-Attempt-Count"} {
		if !strings.Contains(section, "`"+n+"`") {
			t.Errorf("docs/protocol.md's header table does not name HTTP's `%s`", n)
		}
	}
}

// httpReplayedHeader is the replay marker httpint sends beside
// httpint.ReplayedHeader: the name of grpcint's and connectint's marker
// (connectint.ReplayedHeader; connectint is a module of its own).
const httpReplayedHeader = "Idempotency-Replayed"

// TestProtocolResolveValues: the header table gives the resolve header's
// values as the transports read them (keyedcore.ParseResolve): 1 and true
// resolve, 0 is refused, and a stream ignores it.
func TestProtocolResolveValues(t *testing.T) {
	b, err := os.ReadFile(protocolDoc)
	if err != nil {
		t.Fatal(err)
	}
	var row string
	for line := range strings.Lines(string(b)) {
		if strings.HasPrefix(line, "| resolve |") {
			row = line
		}
	}
	if row == "" {
		t.Fatal("docs/protocol.md's header table has no resolve row")
	}
	for _, v := range []string{"1", "true", "TRUE"} {
		if ok, refusal := keyedcore.ParseResolve([]string{v}); !ok || refusal.Outcome != 0 {
			t.Errorf("ParseResolve(%q) is not a resolve", v)
		}
	}
	for _, v := range []string{"0", ""} {
		if ok, refusal := keyedcore.ParseResolve([]string{v}); ok || refusal.Outcome != keyed.RequestUnreadable {
			t.Errorf("ParseResolve(%q) is not refused as %s", v, keyed.RequestUnreadable)
		}
	}
	for _, want := range []string{"`1` or `true` (in any case)", "`0`", "`" + keyed.RequestUnreadable.String() + "`", "`" + keyed.RequestUnreadable.Row().Reason + "`", "streaming call", "ignored"} {
		if !strings.Contains(row, want) {
			t.Errorf("docs/protocol.md's resolve row does not say %s", want)
		}
	}
}

// TestProtocolLinked: every page that describes the kit's headers links
// to docs/protocol.md.
func TestProtocolLinked(t *testing.T) {
	for _, page := range []string{"grpc.md", "connect.md", "http.md", "retry-ownership.md"} {
		b, err := os.ReadFile("../../../docs/" + page)
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(string(b), "](protocol.md") {
			t.Errorf("docs/%s does not link to protocol.md", page)
		}
	}
}

// TestProtocolBudget: the defaults docs/protocol.md's algorithm states are
// the Go client's: its attempt bound, resolve window and backoff.
func TestProtocolBudget(t *testing.T) {
	b, err := os.ReadFile(protocolDoc)
	if err != nil {
		t.Fatal(err)
	}
	doc := strings.Join(strings.Fields(string(b)), " ")
	low := policy.Backoff{Random: func() float64 { return 0 }}
	want := map[string]bool{
		"at most **" + strconv.Itoa(keyedconf.DefaultMaxAttempts) + " runs** per logical call":                 true,
		"a call stops resolving " + strconv.Itoa(int(keyedconf.DefaultResolveWindow/time.Second)) + " s after": true,
		"100 ms doubling to at most 1 s, ±20% jitter":                                                          low.Delay(1) == 80*time.Millisecond && low.Delay(2) == 160*time.Millisecond && low.Delay(30) == 800*time.Millisecond,
	}
	for text, holds := range want {
		switch {
		case !strings.Contains(doc, text):
			t.Errorf("docs/protocol.md does not say %q", text)
		case !holds:
			t.Errorf("docs/protocol.md says %q, which the Go client's defaults no longer are", text)
		}
	}
}
