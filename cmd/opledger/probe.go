package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/opledger/opledger/internal/keybirth"
)

func init() {
	extraCommands["probe"] = command{"check a deployed keyed endpoint's promises over the wire (gRPC, connect or HTTP), black-box", runProbe}
}

const probeUsage = `usage: opledger probe (--grpc HOST:PORT | --connect URL | --http URL) [--method pkg.Svc/Method]
                      --request JSON [--request2 JSON] [--header "K: V"]... [--json]

Runs a black-box conformance run against a deployed keyed method or route,
through its wire protocol only (docs/protocol.md; no database access). Each
check uses keys of its own, UUIDv7 keys born now (one born 400 days ago for the
window's check), so every run executes the method a few times for real: point
it at a test deployment, with a request whose effect you can afford.

Targets (exactly one):
  --grpc HOST:PORT   a gRPC server (plaintext); --method pkg.Svc/Method; the
                     request type is read with the server's reflection, or from
                     --descriptors FILE (a FileDescriptorSet: protoc -o FILE
                     --include_imports, buf build -o FILE). Without --method,
                     the one method of the served services (or of FILE's) that
                     carries the option (opledger.v1.keyed); several: name one
  --connect URL      a connect-go server: the Connect protocol, JSON codec, POST
                     to URL/pkg.Svc/Method
  --http URL         an HTTP route: POST to URL, with the JSON body; the key is
                     sent as a structured-field string
--request is the sample request, JSON (protojson for gRPC). --request2 is a
second request that differs from it, for key-reuse-refused (skipped without it).
--header adds a header (gRPC metadata) to every call, such as
"Authorization: Bearer TOKEN"; repeatable; its value is never printed.

Checks, in this order:
  executes-once             a new key: the call succeeds, without the replay marker
                            (after a failure the protocol says to retry, one retry
                            with the same key must run it, never replay it)
  replay-identical          the same key and request again: the same answer, byte for
                            byte, with the replay marker
  key-reuse-refused         the same key, --request2: IDEMPOTENCY_KEY_REUSED / 422
  missing-key-refused       no key: MISSING_IDEMPOTENCY_KEY / 400
  malformed-key-refused     a 300-byte key: INVALID_IDEMPOTENCY_KEY / 400
  concurrent-duplicates     --concurrency calls at once on one new key: one execution,
                            every other answer a replay of it, or OPERATION_IN_PROGRESS
                            / 409 with pushback and then, after the pushback, the replay
  resolve-committed         a resolve of the first key: the stored answer, marked
  resolve-unknown           a resolve of a never-used key: OPERATION_NOT_FOUND / 404
  window-stale-key-refused  a key born 400 days ago: IDEMPOTENCY_KEY_EXPIRED / 422, for
                            the call and for its resolve
  second-owner-detected     a new key declaring the owner application, with
                            grpc-previous-rpc-attempts: 1 (a gRPC library's retry): the
                            answer names service-config in opledger-second-retry-owner;
                            the same key declaring service-config (the owner's own retry)
                            and executes-once's call (no retry): no such header
  lifetime-advertised       Idempotency-Key-Lifetime on every answer above that reached
                            the ledger

Prints a table (CHECK, VERDICT, DURATION, DETAIL) or, with --json, one JSON
report. Exits 0 when every check passed (or skipped), 1 when any failed (each
failed check is named, with what it got), 2 on a usage or set-up error (a bad
flag, a request that does not parse, a target whose reflection cannot be read).
`

// probeFlags are probe's flags.
type probeFlags struct {
	grpc, connect, http, method, descriptors string
	request, request2                        string
	headers                                  headerFlags
	concurrency                              int
	timeout                                  time.Duration
	json                                     bool
}

// headerFlags is --header, repeatable: "K: V" pairs.
type headerFlags [][2]string

// String shows the headers' names only: their values may be secrets.
func (h *headerFlags) String() string {
	var names []string
	for _, kv := range *h {
		names = append(names, kv[0])
	}
	return strings.Join(names, ",")
}

// Set never fails: the flag package would repeat the value in its
// error, and it may be a secret; check reports a malformed one.
func (h *headerFlags) Set(v string) error {
	k, val, ok := strings.Cut(v, ":")
	k = strings.TrimSpace(k)
	if !ok || k == "" || strings.ContainsAny(k, " \t\r\n") {
		k = ""
	}
	*h = append(*h, [2]string{k, strings.TrimSpace(val)})
	return nil
}

// check reports a malformed header, by its position only.
func (h *headerFlags) check() error {
	for i, kv := range *h {
		if kv[0] == "" {
			return fmt.Errorf(`--header number %d: want "NAME: VALUE" (not repeated here: it may hold a secret)`, i+1)
		}
	}
	return nil
}

// probeJSON is the --json report.
type probeJSON struct {
	Target     string        `json:"target"`
	Transport  string        `json:"transport"`
	Method     string        `json:"method,omitempty"`
	Passed     bool          `json:"passed"`
	DurationMS int64         `json:"duration_ms"`
	Error      string        `json:"error,omitempty"`
	Checks     []probeResult `json:"checks"`
}

// probeResult is one check's row.
type probeResult struct {
	Name       string   `json:"name"`
	Verdict    string   `json:"verdict"` // pass, fail or skip
	DurationMS int64    `json:"duration_ms"`
	Detail     string   `json:"detail,omitempty"`
	Messages   []string `json:"messages,omitempty"`
}

// probeCheckNames are the checks, in the order they run.
var probeCheckNames = []string{
	"executes-once", "replay-identical", "key-reuse-refused", "missing-key-refused", "malformed-key-refused",
	"concurrent-duplicates", "resolve-committed", "resolve-unknown", "window-stale-key-refused", "second-owner-detected",
	"lifetime-advertised",
}

// runProbe implements "opledger probe".
func runProbe(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := newFlags("probe", stderr)
	fs.Usage = func() {
		io.WriteString(fs.Output(), probeUsage+"\nflags:\n")
		fs.PrintDefaults()
	}
	f := &probeFlags{}
	fs.StringVar(&f.grpc, "grpc", "", "HOST:PORT of a gRPC server (plaintext)")
	fs.StringVar(&f.connect, "connect", "", "base URL of a connect server (Connect protocol, JSON)")
	fs.StringVar(&f.http, "http", "", "URL of an HTTP route (POST, JSON body)")
	fs.StringVar(&f.method, "method", "", "the keyed method, pkg.Svc/Method (connect; gRPC: by default the one with the option (opledger.v1.keyed))")
	fs.StringVar(&f.descriptors, "descriptors", "", "a FileDescriptorSet file with the method's types (gRPC; default: the server's reflection)")
	fs.StringVar(&f.request, "request", "", "the sample request, JSON")
	fs.StringVar(&f.request2, "request2", "", "another request, JSON, for key-reuse-refused")
	fs.Var(&f.headers, "header", `a header for every call, "NAME: VALUE" (repeatable; the value is never printed)`)
	fs.IntVar(&f.concurrency, "concurrency", 8, "concurrent calls on one key in concurrent-duplicates")
	fs.DurationVar(&f.timeout, "timeout", 20*time.Second, "each call's deadline")
	fs.BoolVar(&f.json, "json", false, "print one JSON report instead of a table")
	if code, stop := parseFlags(fs, args, stdout); stop {
		return code
	}
	rep := probeJSON{Checks: []probeResult{}}
	failed := func(err error) int {
		code := fail(stderr, "probe", err)
		if f.json {
			rep.Error = oneLine(err)
			writeProbeJSON(stdout, rep)
		}
		return code
	}
	tr, err := f.transport(ctx, fs)
	if tr != nil {
		defer tr.close()
		rep.Target, rep.Transport, rep.Method = tr.target(), tr.kind(), f.method
	}
	if err != nil {
		return failed(err)
	}
	p := &prober{tr: tr, n: f.concurrency, timeout: f.timeout}
	if p.req, err = tr.encode(f.request); err != nil {
		return failed(fmt.Errorf("--request: %w", err))
	}
	if f.request2 != "" {
		if p.req2, err = tr.encode(f.request2); err != nil {
			return failed(fmt.Errorf("--request2: %w", err))
		}
		if bytes.Equal(p.req, p.req2) {
			return failed(errors.New("--request2 must differ from --request"))
		}
	}
	width := len("window-stale-key-refused")
	if !f.json {
		what := tr.kind()
		if f.method != "" {
			what += " " + strings.TrimPrefix(f.method, "/")
		}
		fmt.Fprintf(stdout, "probe of %s (%s), %d concurrent calls\n\n", tr.target(), what, f.concurrency)
		fmt.Fprintf(stdout, "%-*s  %-7s  %9s  %s\n", width, "CHECK", "VERDICT", "DURATION", "DETAIL")
	}
	start := time.Now()
	p.run(ctx, func(r probeResult) {
		rep.Checks = append(rep.Checks, r)
		if !f.json {
			printProbeRow(stdout, width, r)
		}
	})
	rep.DurationMS = time.Since(start).Milliseconds()
	var broken []string
	for _, r := range rep.Checks {
		if r.Verdict == "fail" {
			broken = append(broken, r.Name)
		}
	}
	rep.Passed = len(broken) == 0
	if f.json {
		if err := writeProbeJSON(stdout, rep); err != nil {
			return fail(stderr, "probe", err)
		}
	} else if rep.Passed {
		fmt.Fprintf(stdout, "\nPASS: every promise held, in %s\n", roundDuration(time.Since(start)))
	} else {
		fmt.Fprintf(stdout, "\nFAIL: broken promises: %s\n", strings.Join(broken, ", "))
	}
	if !rep.Passed {
		return 1
	}
	return 0
}

// transport checks f and builds its target's transport.
func (f *probeFlags) transport(ctx context.Context, fs *flag.FlagSet) (probeTransport, error) {
	targets := 0
	for _, t := range []string{f.grpc, f.connect, f.http} {
		if t != "" {
			targets++
		}
	}
	switch {
	case fs.NArg() > 0:
		return nil, unexpectedArg(fs)
	case targets != 1:
		return nil, errors.New("give exactly one of --grpc, --connect and --http")
	case f.headers.check() != nil:
		return nil, f.headers.check()
	case f.request == "":
		return nil, errors.New("--request is required (a sample request, JSON)")
	case f.concurrency < 2:
		return nil, fmt.Errorf("--concurrency must be at least 2, not %d", f.concurrency)
	case f.timeout <= 0:
		return nil, errors.New("--timeout must be positive")
	case f.http != "" && (f.method != "" || f.descriptors != ""):
		return nil, errors.New("--method and --descriptors are for --grpc and --connect; --http names the route's URL")
	case f.connect != "" && f.method == "":
		return nil, errors.New("--method pkg.Svc/Method is required with --connect")
	case f.descriptors != "" && f.grpc == "":
		return nil, errors.New("--descriptors is for --grpc")
	}
	method := strings.TrimPrefix(f.method, "/")
	if f.http == "" && method != "" {
		svc, m, ok := strings.Cut(method, "/")
		if !ok || svc == "" || m == "" || strings.Contains(m, "/") {
			return nil, fmt.Errorf("--method %q: want pkg.Svc/Method", f.method)
		}
	}
	switch {
	case f.http != "":
		u, err := checkProbeURL("--http", f.http)
		if err != nil {
			return nil, err
		}
		return newHTTPProbe(u, f.headers, false), nil
	case f.connect != "":
		u, err := checkProbeURL("--connect", f.connect)
		if err != nil {
			return nil, err
		}
		return newHTTPProbe(strings.TrimSuffix(u, "/")+"/"+method, f.headers, true), nil
	default:
		p, err := newGRPCProbe(ctx, f.grpc, method, f.descriptors, f.headers, f.timeout)
		if p == nil {
			return nil, err
		}
		if err == nil && method == "" {
			// The method that carries the (opledger.v1.keyed) option.
			f.method = strings.TrimPrefix(p.method, "/")
		}
		return p, err
	}
}

func checkProbeURL(flagName, s string) (string, error) {
	u, err := url.Parse(s)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return "", fmt.Errorf("%s %q: want an http:// or https:// URL", flagName, maskCredentials(s))
	}
	return s, nil
}

// probeTransport sends one call of the probed method over one transport.
type probeTransport interface {
	kind() string
	target() string
	// encode turns a JSON request into the bytes call sends.
	encode(jsonReq string) ([]byte, error)
	// call sends body with key ("" for none), as a resolve when resolve
	// is set (then body is not sent), with the headers extra beside
	// --header's.
	call(ctx context.Context, key string, body []byte, resolve bool, extra headerFlags) probeAnswer
	close()
}

// probeAnswer is one call's answer, as the protocol reads it.
type probeAnswer struct {
	err      error  // no answer at all
	ok       bool   // a success: gRPC OK, HTTP 2xx
	status   string // "OK", "already_exists", "201"
	reason   string // the ErrorInfo reason, or the HTTP problem type's outcome name
	body     []byte // the response's bytes (a success)
	replayed bool   // the replay marker
	lifetime bool   // Idempotency-Key-Lifetime present
	pushback time.Duration
	hasPush  bool
	second   string // opledger-second-retry-owner: the layers the server saw retry without owning the channel
}

// is reports whether a ended with the outcome whose gRPC reason is
// reason and whose HTTP name is name.
func (a probeAnswer) is(reason, name string) bool {
	return a.err == nil && (a.reason == reason || a.reason == name)
}

// same reports whether a and b are the same answer, byte for byte.
func (a probeAnswer) same(b probeAnswer) bool {
	return a.err == nil && b.err == nil && a.status == b.status && bytes.Equal(a.body, b.body)
}

func (a probeAnswer) String() string {
	if a.err != nil {
		return "no answer: " + oneLine(a.err)
	}
	s := a.status
	if a.reason != "" {
		s += " " + a.reason
	}
	if a.replayed {
		s += " (replayed)"
	}
	if a.hasPush {
		s += fmt.Sprintf(" (pushback %s)", a.pushback)
	}
	return s
}

// retryable reports an answer the protocol retries with the same key,
// after which a correct server runs the call (nothing was stored): no
// reason of the kit's, and a status that says so.
func (a probeAnswer) retryable() bool {
	if a.err != nil || a.ok || a.reason != "" {
		return false
	}
	switch a.status {
	case "unavailable", "internal", "unknown", "aborted":
		return true
	}
	n, err := strconv.Atoi(a.status)
	return err == nil && n >= 500
}

// prober runs the checks over one transport.
type prober struct {
	tr        probeTransport
	req, req2 []byte
	n         int
	timeout   time.Duration

	k1    string      // the first key: executes-once, then replayed, reused and resolved
	first probeAnswer // executes-once's answer

	mu      sync.Mutex
	ledgerd []string // the answers that reached the ledger without the lifetime header
	seen    int      // how many answers reached the ledger
}

func (p *prober) call(ctx context.Context, key string, body []byte, resolve bool) probeAnswer {
	return p.callWith(ctx, key, body, resolve, nil)
}

// callWith is call with the headers extra.
func (p *prober) callWith(ctx context.Context, key string, body []byte, resolve bool, extra headerFlags) probeAnswer {
	ctx, cancel := context.WithTimeout(ctx, p.timeout)
	defer cancel()
	return p.tr.call(ctx, key, body, resolve, extra)
}

// reached notes an answer that reached the ledger, for
// lifetime-advertised.
func (p *prober) reached(check string, a probeAnswer) {
	if a.err != nil {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.seen++
	if !a.lifetime {
		p.ledgerd = append(p.ledgerd, check+": "+a.String())
	}
}

// run runs every check, in order, giving each row to report.
func (p *prober) run(ctx context.Context, report func(probeResult)) {
	p.k1 = keybirth.New(time.Now())
	checks := map[string]func(context.Context) (string, []string){
		"executes-once":            p.executesOnce,
		"replay-identical":         p.replayIdentical,
		"key-reuse-refused":        p.keyReuseRefused,
		"missing-key-refused":      p.missingKeyRefused,
		"malformed-key-refused":    p.malformedKeyRefused,
		"concurrent-duplicates":    p.concurrent,
		"resolve-committed":        p.resolveCommitted,
		"resolve-unknown":          p.resolveUnknown,
		"window-stale-key-refused": p.windowStaleKeyRefused,
		"second-owner-detected":    p.secondOwnerDetected,
		"lifetime-advertised":      p.lifetimeAdvertised,
	}
	for _, name := range probeCheckNames {
		start := time.Now()
		detail, msgs := "", []string(nil)
		if err := ctx.Err(); err != nil {
			msgs = []string{"interrupted: " + err.Error()}
		} else {
			detail, msgs = checks[name](ctx)
		}
		r := probeResult{Name: name, Verdict: "pass", DurationMS: time.Since(start).Milliseconds(), Detail: detail, Messages: msgs}
		switch {
		case len(msgs) > 0:
			r.Verdict, r.Detail = "fail", msgs[0]
		case strings.HasPrefix(detail, "skip: "):
			r.Verdict, r.Detail = "skip", strings.TrimPrefix(detail, "skip: ")
		}
		report(r)
	}
}

// executesOnce is the check executes-once.
func (p *prober) executesOnce(ctx context.Context) (string, []string) {
	a := p.call(ctx, p.k1, p.req, false)
	if a.retryable() {
		// A failure the protocol retries with the same key: the
		// retry must run the call, never replay what never was.
		b := p.call(ctx, p.k1, p.req, false)
		if b.replayed && !b.same(a) {
			return "", []string{fmt.Sprintf("the first call failed (%s) and its retry with the same key replayed %s: an answer never given (a key claimed outside the handler's transaction?)", a, b)}
		}
		a = b
	}
	p.first = a
	p.reached("executes-once", a)
	switch {
	case !a.ok:
		return "", []string{"a new key: " + a.String()}
	case a.replayed:
		return "", []string{"a new key's first call carries the replay marker"}
	}
	return a.status, nil
}

// replayIdentical is the check replay-identical.
func (p *prober) replayIdentical(ctx context.Context) (string, []string) {
	if !p.first.ok {
		return "skip: executes-once did not succeed", nil
	}
	a := p.call(ctx, p.k1, p.req, false)
	p.reached("replay-identical", a)
	var msgs []string
	if !a.replayed {
		msgs = append(msgs, "the same key again, without the replay marker: "+a.String()+" (did it run again?)")
	}
	if !a.same(p.first) {
		msgs = append(msgs, fmt.Sprintf("the same key again: %s, %d bytes, is not the first answer (%s, %d bytes) byte for byte", a, len(a.body), p.first, len(p.first.body)))
	}
	return "the stored answer, " + strconv.Itoa(len(a.body)) + " bytes, marked", msgs
}

// keyReuseRefused is the check key-reuse-refused.
func (p *prober) keyReuseRefused(ctx context.Context) (string, []string) {
	switch {
	case p.req2 == nil:
		return "skip: no --request2", nil
	case !p.first.ok:
		return "skip: executes-once did not succeed", nil
	}
	a := p.call(ctx, p.k1, p.req2, false)
	p.reached("key-reuse-refused", a)
	if !a.is("IDEMPOTENCY_KEY_REUSED", "idempotency-key-reused") {
		return "", []string{"the same key with another request: " + a.String() + ", want IDEMPOTENCY_KEY_REUSED / 422"}
	}
	return a.String(), nil
}

// missingKeyRefused is the check missing-key-refused.
func (p *prober) missingKeyRefused(ctx context.Context) (string, []string) {
	a := p.call(ctx, "", p.req, false)
	if !a.is("MISSING_IDEMPOTENCY_KEY", "idempotency-key-missing") {
		return "", []string{"no key: " + a.String() + ", want MISSING_IDEMPOTENCY_KEY / 400"}
	}
	return a.String(), nil
}

// malformedKeyRefused is the check malformed-key-refused.
func (p *prober) malformedKeyRefused(ctx context.Context) (string, []string) {
	a := p.call(ctx, strings.Repeat("k", 300), p.req, false)
	if !a.is("INVALID_IDEMPOTENCY_KEY", "idempotency-key-invalid") {
		return "", []string{"a 300-byte key: " + a.String() + ", want INVALID_IDEMPOTENCY_KEY / 400"}
	}
	return a.String(), nil
}

// resolveCommitted is the check resolve-committed.
func (p *prober) resolveCommitted(ctx context.Context) (string, []string) {
	if !p.first.ok {
		return "skip: executes-once did not succeed", nil
	}
	a := p.call(ctx, p.k1, nil, true)
	p.reached("resolve-committed", a)
	var msgs []string
	if !a.replayed {
		msgs = append(msgs, "a resolve of a committed key, without the replay marker: "+a.String())
	}
	if !a.same(p.first) {
		msgs = append(msgs, fmt.Sprintf("a resolve of a committed key: %s, %d bytes, is not the first answer (%s, %d bytes) byte for byte", a, len(a.body), p.first, len(p.first.body)))
	}
	return "the stored answer, marked", msgs
}

// resolveUnknown is the check resolve-unknown.
func (p *prober) resolveUnknown(ctx context.Context) (string, []string) {
	a := p.call(ctx, keybirth.New(time.Now()), nil, true)
	p.reached("resolve-unknown", a)
	if !a.is("OPERATION_NOT_FOUND", "operation-not-found") {
		return "", []string{"a resolve of a never-used key: " + a.String() + ", want OPERATION_NOT_FOUND / 404"}
	}
	return a.String(), nil
}

// windowStaleKeyRefused is the check window-stale-key-refused.
func (p *prober) windowStaleKeyRefused(ctx context.Context) (string, []string) {
	old := keybirth.New(time.Now().Add(-400 * 24 * time.Hour))
	var msgs []string
	a := p.call(ctx, old, p.req, false)
	p.reached("window-stale-key-refused", a)
	if !a.is("IDEMPOTENCY_KEY_EXPIRED", "idempotency-key-expired") {
		msgs = append(msgs, "a key born 400 days ago: "+a.String()+", want IDEMPOTENCY_KEY_EXPIRED / 422 (it must never run)")
	}
	r := p.call(ctx, old, nil, true)
	p.reached("window-stale-key-refused (resolve)", r)
	if !r.is("IDEMPOTENCY_KEY_EXPIRED", "idempotency-key-expired") {
		msgs = append(msgs, "a resolve of a key born 400 days ago: "+r.String()+", want IDEMPOTENCY_KEY_EXPIRED / 422 (never not-found)")
	}
	return a.String() + ", and its resolve", msgs
}

// The headers of second-owner-detected (docs/protocol.md): the owner
// declaration and a gRPC library's count of earlier attempts, and the
// answer's header that names the second owners.
const (
	probeOwnerHeader    = "Opledger-Retry-Owner"
	probePreviousHeader = "Grpc-Previous-Rpc-Attempts"
	probeSecondHeader   = "Opledger-Second-Retry-Owner"
)

// secondOwnerDetected is the check second-owner-detected: a retry by a
// gRPC library's retry policy (grpc-previous-rpc-attempts) of a client
// that declares the owner application is a second owner, which the
// answer names; the same retry declared by its owner, service-config,
// and a call no layer retried are not.
func (p *prober) secondOwnerDetected(ctx context.Context) (string, []string) {
	key := keybirth.New(time.Now())
	a := p.callWith(ctx, key, p.req, false, headerFlags{{probeOwnerHeader, "application"}, {probePreviousHeader, "1"}})
	p.reached("second-owner-detected", a)
	if a.err != nil {
		return "", []string{"a retry by a second owner: " + a.String()}
	}
	var msgs []string
	if !slices.ContainsFunc(strings.Split(a.second, ","), func(l string) bool { return strings.TrimSpace(l) == "service-config" }) {
		msgs = append(msgs, fmt.Sprintf("a call declaring the owner application, with %s: 1 (a gRPC library's retry): %s %q, want service-config (the second owner is not detected)", strings.ToLower(probePreviousHeader), strings.ToLower(probeSecondHeader), a.second))
	}
	b := p.callWith(ctx, key, p.req, false, headerFlags{{probeOwnerHeader, "service-config"}, {probePreviousHeader, "2"}})
	p.reached("second-owner-detected (owner's own retry)", b)
	if b.err == nil && b.second != "" {
		msgs = append(msgs, fmt.Sprintf("the owner's own retry (declaring service-config, with %s: 2): %s %q, want none", strings.ToLower(probePreviousHeader), strings.ToLower(probeSecondHeader), b.second))
	}
	if p.first.second != "" {
		msgs = append(msgs, fmt.Sprintf("executes-once's call, which no layer retried: %s %q, want none", strings.ToLower(probeSecondHeader), p.first.second))
	}
	return "service-config named, not the owner's own retry", msgs
}

// lifetimeAdvertised is the check lifetime-advertised.
func (p *prober) lifetimeAdvertised(ctx context.Context) (string, []string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.seen == 0 {
		return "skip: no answer reached the ledger", nil
	}
	if len(p.ledgerd) > 0 {
		return "", slices.Concat([]string{"answers without Idempotency-Key-Lifetime:"}, p.ledgerd)
	}
	return fmt.Sprintf("on %d answers", p.seen), nil
}

// concurrent is concurrent-duplicates: p.n calls at once on one new key.
// Judged from the answers only: exactly one ran (a success without the
// marker); every other answer is the same answer marked, or in progress
// with pushback, and then (after the pushback) the marked answer.
func (p *prober) concurrent(ctx context.Context) (string, []string) {
	key := keybirth.New(time.Now())
	answers := make([]probeAnswer, p.n)
	gate := make(chan struct{})
	var wg sync.WaitGroup
	for i := range answers {
		wg.Go(func() {
			<-gate
			answers[i] = p.call(ctx, key, p.req, false)
		})
	}
	close(gate)
	wg.Wait()
	var msgs []string
	var executed []probeAnswer
	inProgress, replays := 0, 0
	for i, a := range answers {
		p.reached("concurrent-duplicates", a)
		switch {
		case a.ok && !a.replayed:
			executed = append(executed, a)
		case a.ok:
			replays++
		case a.is("OPERATION_IN_PROGRESS", "operation-in-progress"):
			inProgress++
			if !a.hasPush {
				msgs = append(msgs, fmt.Sprintf("call %d: in progress without pushback", i+1))
			}
			answers[i] = p.afterPushback(ctx, key, a)
			if !answers[i].ok || !answers[i].replayed {
				msgs = append(msgs, fmt.Sprintf("call %d: in progress, then after its pushback %s, want the replay", i+1, answers[i]))
			}
		default:
			msgs = append(msgs, fmt.Sprintf("call %d: %s", i+1, a))
		}
	}
	if len(executed) != 1 {
		msgs = append([]string{fmt.Sprintf("%d of %d concurrent calls on one key ran (answered without the replay marker), want 1", len(executed), p.n)}, msgs...)
	}
	for i, a := range answers {
		if a.ok && a.replayed && !slices.ContainsFunc(executed, a.same) {
			msgs = append(msgs, fmt.Sprintf("call %d: a replay that is no execution's answer", i+1))
		}
	}
	return fmt.Sprintf("%d ran, %d replayed, %d in progress then replayed", len(executed), replays, inProgress), msgs
}

// afterPushback retries a call answered in progress, after its pushback
// (at most 5s, 100ms without one), until it gets another answer.
func (p *prober) afterPushback(ctx context.Context, key string, a probeAnswer) probeAnswer {
	for range 50 {
		wait := min(a.pushback, 5*time.Second)
		if !a.hasPush || wait <= 0 {
			wait = 100 * time.Millisecond
		}
		select {
		case <-ctx.Done():
			return probeAnswer{err: ctx.Err()}
		case <-time.After(wait):
		}
		a = p.call(ctx, key, p.req, false)
		if !a.is("OPERATION_IN_PROGRESS", "operation-in-progress") {
			return a
		}
	}
	return a
}

func printProbeRow(w io.Writer, width int, r probeResult) {
	fmt.Fprintf(w, "%-*s  %-7s  %9s  %s\n", width, r.Name, strings.ToUpper(r.Verdict), roundDuration(time.Duration(r.DurationMS)*time.Millisecond), oneLine(errors.New(r.Detail)))
	if r.Verdict == "fail" {
		for i, m := range r.Messages[1:] {
			if i == 5 {
				fmt.Fprintf(w, "%*s  … %d more\n", width, "", len(r.Messages)-1-i)
				break
			}
			fmt.Fprintf(w, "%*s  - %s\n", width, "", oneLine(errors.New(m)))
		}
	}
}

func writeProbeJSON(w io.Writer, rep probeJSON) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(rep)
}
