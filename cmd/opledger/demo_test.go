package main

import (
	"bytes"
	"context"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

func TestDemo(t *testing.T) {
	t.Chdir(t.TempDir()) // the default database lives in a temporary directory anyway
	var out, errb bytes.Buffer
	code := run(context.Background(), []string{"demo", "--calls", "200", "--outage-calls", "40"}, &out, &errb)
	if code != 0 {
		t.Fatalf("exit %d\nstdout:\n%s\nstderr:\n%s", code, out.String(), errb.String())
	}
	for _, want := range []string{"logical calls", "duplicate effects (must be 0)", "lost effects (must be 0)", "budget refusals", "outage: amplification", "OK:",
		"the kit's OpenTelemetry metrics (read from the SDK's manual reader", "grpc.client.call.retry_delay", "opledger.client.budget.balance"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("output lacks %q:\n%s", want, out.String())
		}
	}
	// The metrics are the run's: the server's executions as the SDK read
	// them equal the report's, and its replays are the report's two rows
	// of them, before and during the resends: no row names one thing with
	// two numbers.
	num := func(re string) int {
		t.Helper()
		m := regexp.MustCompile(re).FindStringSubmatch(out.String())
		if m == nil {
			t.Fatalf("output lacks %q:\n%s", re, out.String())
		}
		n, err := strconv.Atoi(m[1])
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	executed := num(`(?m)^\s*both phases: executed by the server\s+(\d+)\s*$`)
	replayed := num(`(?m)^\s*both phases: replayed by the server\s+(\d+)\s*$`)
	resent := num(`(?m)^\s*resends: answered calls sent again\s+(\d+)\s*$`)
	resendReplayed := num(`(?m)^\s*resends: replayed by the server\s+(\d+)\s*$`)
	if m := num(`(?m)^\s*opledger\.server\.calls\s+executed\s+-\s+(\d+)\s*$`); m != executed {
		t.Errorf("report's executed %d, opledger.server.calls executed %d; want equal:\n%s", executed, m, out.String())
	}
	if m := num(`(?m)^\s*opledger\.server\.calls\s+replayed\s+-\s+(\d+)\s*$`); m != replayed+resendReplayed || resent == 0 || resendReplayed != resent {
		t.Errorf("report's replays %d before and %d during %d resends, opledger.server.calls replayed %d; want the sum, and every resend replayed:\n%s",
			replayed, resendReplayed, resent, m, out.String())
	}
}

// TestDemoHTTP: the demo over HTTP, as the README runs it: 1,000
// transfers with 30% of the answers lost after commit, then the outage;
// it exits 0 only with no duplicate, lost or wrong effect and no
// ambiguous answer.
func TestDemoHTTP(t *testing.T) {
	t.Chdir(t.TempDir())
	var out, errb bytes.Buffer
	code := run(context.Background(), []string{"demo", "--transport", "http", "--calls", "1000"}, &out, &errb)
	if code != 0 {
		t.Fatalf("exit %d\nstdout:\n%s\nstderr:\n%s", code, out.String(), errb.String())
	}
	for _, want := range []string{`loopback HTTP`, `transport\s+http`, `logical calls\s+1000\n`, `duplicate effects \(must be 0\)\s+0\n`,
		`lost effects \(must be 0\)\s+0\n`, `outage: amplification`, `OK:`} {
		if !regexp.MustCompile(want).MatchString(out.String()) {
			t.Errorf("output lacks %q:\n%s", want, out.String())
		}
	}
}

// TestDemoConnect: the demo over connect-go, as .ci/run runs it: the
// transfers alternate between the Connect protocol over HTTP/1.1 and the
// gRPC protocol over h2c, 30% of the answers lost after commit at three
// places, then the outage; it exits 0 only with no duplicate, lost or
// wrong effect and no ambiguous answer, and the server's metrics are the
// report's.
func TestDemoConnect(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	var out, errb bytes.Buffer
	code := run(context.Background(), []string{"demo", "--transport", "connect", "--calls", "400", "--outage-calls", "80",
		"--dsn", "sqlite:" + filepath.Join(dir, "demo.db")}, &out, &errb)
	if code != 0 {
		t.Fatalf("exit %d\nstdout:\n%s\nstderr:\n%s", code, out.String(), errb.String())
	}
	for _, want := range []string{`loopback connect-go \(the Connect protocol over HTTP/1\.1 and the gRPC protocol over h2c`, `transport\s+connect`,
		`logical calls\s+400\n`, `duplicate effects \(must be 0\)\s+0\n`, `lost effects \(must be 0\)\s+0\n`,
		`returned ambiguous \(must be 0\)\s+0\n`, `resends: not answered by a replay \(must be 0\)\s+0\n`, `outage: amplification`, `OK:`} {
		if !regexp.MustCompile(want).MatchString(out.String()) {
			t.Errorf("output lacks %q:\n%s", want, out.String())
		}
	}
	num := func(re string) int {
		t.Helper()
		m := regexp.MustCompile(re).FindStringSubmatch(out.String())
		if m == nil {
			t.Fatalf("output lacks %q:\n%s", re, out.String())
		}
		n, err := strconv.Atoi(m[1])
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	executed := num(`(?m)^\s*both phases: executed by the server\s+(\d+)\s*$`)
	if m := num(`(?m)^\s*opledger\.server\.calls\s+executed\s+-\s+(\d+)\s*$`); m != executed || executed == 0 {
		t.Errorf("report's executed %d, opledger.server.calls executed %d; want equal, not 0:\n%s", executed, m, out.String())
	}
	if lost := num(`(?m)^\s*faults: answers lost after commit\s+(\d+)\s*$`); lost == 0 {
		t.Errorf("no answer lost after commit:\n%s", out.String())
	}
}

func TestDemoBadFlags(t *testing.T) {
	for _, args := range [][]string{
		{"demo", "--calls", "0"},
		{"demo", "--loss", "1"},
		{"demo", "--loss", "-0.1"},
		{"demo", "extra"},
		{"demo", "--dsn", "nosuch://x"},
		{"demo", "--owner", "mesh"},
		{"demo", "--owner", "bogus"},
		{"demo", "--transport", "smtp"},
		{"demo", "--transport", "http", "--owner", "service-config"},
		{"demo", "--transport", "connect", "--owner", "service-config"},
		{"demo", "--transport", "connect", "--chain"},
	} {
		var out, errb bytes.Buffer
		if code := run(context.Background(), args, &out, &errb); code != 2 {
			t.Errorf("%v: exit %d, want 2 (stderr %q)", args, code, errb.String())
		}
	}
}
