package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestPolicyCheckWindow: policy check reports a keyed method whose
// clients may send one key for longer than the ledger honours it (the
// method's retention, or the ledger's, minus the clock skew): the service
// config's retries, judged only when it owns them, and the clients'
// resolve window; each finding names the method, the window and the
// retention, and makes the check exit 1.
func TestPolicyCheckWindow(t *testing.T) {
	dir := t.TempDir()
	desc := writePolicyDescriptors(t, dir)
	write := func(name, body string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	// Waits of 1s, 100s, 3600s and 3600s: 2h1m41s.
	long := `"retryPolicy":{"maxAttempts":5,"initialBackoff":"1s","maxBackoff":"3600s","backoffMultiplier":100,"retryableStatusCodes":["UNAVAILABLE"]}`
	method := write("method.json", `{"methodConfig":[{"name":[{"service":"shop.v1.Orders","method":"Create"}],`+long+`}]}`)
	service := write("service.json", `{"methodConfig":[{"name":[{"service":"shop.v1.Orders"}],`+long+`}]}`)
	// A method config of its own without a retry policy wins over the
	// service's: grpc-go does not retry the method.
	shadowed := write("shadowed.json", `{"methodConfig":[{"name":[{"service":"shop.v1.Orders"}],`+long+`},{"name":[{"service":"shop.v1.Orders","method":"Create"}],"timeout":"1s"}]}`)
	const create = "/shop.v1.Orders/Create"
	keyed := []string{"--descriptors", desc, "--keyed", create}

	cases := []struct {
		name    string
		args    []string
		code    int
		wantOut []string // substrings of the window finding lines, in order
		wantErr string
	}{
		{"service config inside the ledger's window", append([]string{"check", "--service-config", method}, keyed...), 0, nil, ""},
		{"service config past the method's window", append([]string{"check", "--service-config", method, "--method-retention", create + "=1h"}, keyed...), 1, []string{
			method + `: window-outlasts-retention: methodConfig[0].retryPolicy method "/shop.v1.Orders/Create": grpc-go's retries of one call (5 attempts, waits up to 1s, ×100, at most 3600s each) may last 2h1m41s, longer than the 59m0s the ledger honours a key (retention 1h0m0s minus clock skew 1m0s)`,
		}, "1 finding(s)"},
		{"service-wide entry past the ledger's window", append([]string{"check", "--service-config", service, "--retention", "2h", "--clock-skew", "5m"}, keyed...), 1, []string{
			`methodConfig[0].retryPolicy name "/shop.v1.Orders/" method "/shop.v1.Orders/Create": grpc-go's retries of one call`,
		}, ""},
		{"shadowed by a method config without retries", append([]string{"check", "--service-config", shadowed, "--retention", "2h"}, keyed...), 0, nil, ""},
		{"not the owner: the service config's retries are not judged", append([]string{"check", "--owner", "application", "--service-config", method, "--method-retention", create + "=1h"}, keyed...), 1, nil, "finding(s) (owner application)"},
		{"resolve window", append([]string{"check", "--resolve-window", "48h"}, keyed...), 1, []string{
			`(--resolve-window): window-outlasts-retention: method "/shop.v1.Orders/Create": the client's resolves of one key (--resolve-window) may last 48h0m0s, longer than the 23h59m0s the ledger honours a key (retention 24h0m0s minus clock skew 1m0s)`,
		}, ""},
		{"resolve window inside", append([]string{"check", "--resolve-window", "12h"}, keyed...), 0, nil, ""},
		{"kit default under the application owner", append([]string{"check", "--owner", "application", "--service-config", write("empty.json", `{}`), "--retention", "20s"}, keyed...), 1, []string{
			`(the kit client's default resolve window): window-outlasts-retention: method "/shop.v1.Orders/Create": the client's resolves of one key (the kit client's default resolve window) may last 30s, longer than the 18s the ledger honours a key (retention 20s minus clock skew 2s)`,
		}, ""},
		{"not keyed: nothing judged", []string{"check", "--descriptors", desc, "--resolve-window", "48h"}, 0, nil, ""},
		{"method retention of a method not keyed", []string{"check", "--descriptors", desc, "--resolve-window", "1h", "--method-retention", create + "=1h"}, 2, nil, "is not a keyed method with a ledger"},
		{"method retention longer than the ledger's", append([]string{"check", "--resolve-window", "1h", "--method-retention", create + "=25h"}, keyed...), 2, nil, "longer than the ledger's 24h0m0s (--retention): a server refuses it"},
		{"method retention within the skew", append([]string{"check", "--resolve-window", "1h", "--method-retention", create + "=30s"}, keyed...), 2, nil, "not longer than the clock skew"},
		{"method retention unknown method", append([]string{"check", "--resolve-window", "1h", "--method-retention", "/shop.v1.Orders/Nope=1h"}, keyed...), 2, nil, "unknown method"},
		{"method retention malformed", append([]string{"check", "--resolve-window", "1h", "--method-retention", create}, keyed...), 2, nil, "want /pkg.Service/Method=DURATION"},
		{"method retention bad duration", append([]string{"check", "--resolve-window", "1h", "--method-retention", create + "=soon"}, keyed...), 2, nil, "want a positive duration"},
		{"method retention twice", append([]string{"check", "--resolve-window", "1h", "--method-retention", create + "=1h", "--method-retention", create + "=2h"}, keyed...), 2, nil, "given twice"},
		{"skew not shorter than the retention", append([]string{"check", "--resolve-window", "1h", "--retention", "1m", "--clock-skew", "1m"}, keyed...), 2, nil, "must be shorter than --retention"},
		{"retention not positive", append([]string{"check", "--resolve-window", "1h", "--retention", "0s"}, keyed...), 2, nil, "--retention must be positive"},
		{"negative resolve window", append([]string{"check", "--service-config", method, "--resolve-window", "-1s"}, keyed...), 2, nil, "--resolve-window must not be negative"},
	}
	for _, tc := range cases {
		var out, errOut bytes.Buffer
		code := runPolicy(context.Background(), tc.args, &out, &errOut)
		if code != tc.code {
			t.Errorf("%s: exit %d, want %d\nstdout: %s\nstderr: %s", tc.name, code, tc.code, out.String(), errOut.String())
			continue
		}
		var lines []string
		for _, l := range strings.Split(out.String(), "\n") {
			if strings.Contains(l, findingWindow) {
				lines = append(lines, l)
			}
		}
		if len(lines) != len(tc.wantOut) {
			t.Errorf("%s: %d window findings, want %d:\n%s", tc.name, len(lines), len(tc.wantOut), out.String())
			continue
		}
		for i, w := range tc.wantOut {
			if !strings.Contains(lines[i], w) {
				t.Errorf("%s: finding %d = %q, want it to contain %q", tc.name, i, lines[i], w)
			}
		}
		if tc.wantErr != "" && !strings.Contains(errOut.String(), tc.wantErr) {
			t.Errorf("%s: stderr %q, want it to contain %q", tc.name, errOut.String(), tc.wantErr)
		}
		if code == 2 && (out.Len() != 0 || strings.Count(strings.TrimSuffix(errOut.String(), "\n"), "\n") != 0) {
			t.Errorf("%s: usage error: stdout %q, stderr %q", tc.name, out.String(), errOut.String())
		}
	}

	// --json lists the window findings with the method, the window and
	// the retention, as numbers too.
	var out, errOut bytes.Buffer
	code := runPolicy(context.Background(), append([]string{"check", "--json", "--service-config", method, "--resolve-window", "2h",
		"--method-retention", create + "=90m"}, keyed...), &out, &errOut)
	if code != 1 {
		t.Fatalf("--json: exit %d, stderr %s", code, errOut.String())
	}
	var rep struct {
		ServiceConfigFindings []json.RawMessage `json:"serviceConfigFindings"`
		WindowFindings        []windowFinding   `json:"windowFindings"`
	}
	if err := json.Unmarshal(out.Bytes(), &rep); err != nil {
		t.Fatalf("--json: %v\n%s", err, out.String())
	}
	if len(rep.WindowFindings) != 2 {
		t.Fatalf("--json: %d window findings, want 2: %s", len(rep.WindowFindings), out.String())
	}
	sc, rw := rep.WindowFindings[0], rep.WindowFindings[1]
	if sc.Source != "service-config" || sc.File != method || sc.Method != create || sc.Retention != "1h30m0s" || sc.ClockSkew != "1m0s" ||
		sc.WindowSeconds != (2*time.Hour+101*time.Second).Seconds() || sc.Path != "methodConfig[0].retryPolicy" || sc.Name == nil || *sc.Name != create {
		t.Errorf("--json: service config finding %+v", sc)
	}
	if rw.Source != "resolve-window" || rw.Method != create || rw.Window != "2h0m0s" || rw.WindowSeconds != 7200 || rw.Retention != "1h30m0s" || rw.Name != nil {
		t.Errorf("--json: resolve window finding %+v", rw)
	}

	// Without findings, windowFindings is an empty list, not null.
	out.Reset()
	if code := runPolicy(context.Background(), append([]string{"check", "--json", "--resolve-window", "1h"}, keyed...), &out, &errOut); code != 0 {
		t.Fatalf("--json clean: exit %d", code)
	}
	if !strings.Contains(out.String(), `"windowFindings": []`) {
		t.Errorf("--json clean: %s", out.String())
	}
}

// TestRetryPolicyWindow: the waits grpc-go allows between the attempts of
// one call, maxAttempts capped at 5, each wait capped at maxBackoff, and
// no overflow for huge values.
func TestRetryPolicyWindow(t *testing.T) {
	for _, c := range []struct {
		rp   scRetryPolicy
		want time.Duration
	}{
		{scRetryPolicy{MaxAttempts: 2, InitialBackoff: "0.1s", MaxBackoff: "1s", BackoffMultiplier: 2}, 100 * time.Millisecond},
		{scRetryPolicy{MaxAttempts: 3, InitialBackoff: "0.1s", MaxBackoff: "1s", BackoffMultiplier: 2}, 300 * time.Millisecond},
		{scRetryPolicy{MaxAttempts: 5, InitialBackoff: "0.5s", MaxBackoff: "1s", BackoffMultiplier: 3}, 3500 * time.Millisecond},
		{scRetryPolicy{MaxAttempts: 50, InitialBackoff: "1s", MaxBackoff: "10s", BackoffMultiplier: 10}, 31 * time.Second},
		{scRetryPolicy{MaxAttempts: 5, InitialBackoff: "315576000000s", MaxBackoff: "315576000000s", BackoffMultiplier: 1e300}, time.Duration(1<<63 - 1)},
	} {
		if got, _ := c.rp.window(); got != c.want {
			t.Errorf("%+v: window %v, want %v", c.rp, got, c.want)
		}
	}
}
