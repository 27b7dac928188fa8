package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/opledger/opledger/cmd/opledger/internal/timeline"
	"github.com/opledger/opledger/examples/payments"
)

// TestDemoReport: demo --report draws the run; the picture parses and
// shows the outage and the answers lost after commit.
func TestDemoReport(t *testing.T) {
	t.Chdir(t.TempDir())
	svg := filepath.Join(t.TempDir(), "demo.svg")
	var out, errb bytes.Buffer
	if code := run(context.Background(), []string{"demo", "--calls", "200", "--outage-calls", "40", "--report", svg}, &out, &errb); code != 0 {
		t.Fatalf("exit %d\n%s\n%s", code, out.String(), errb.String())
	}
	f, err := os.Open(svg)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	faults, err := timeline.ReadFaults(f)
	if err != nil {
		t.Fatal(err)
	}
	kinds := map[string]int{}
	for _, x := range faults {
		kinds[x.Kind] += max(x.N, 1)
	}
	if kinds[timeline.FaultOutage] != 1 || kinds[timeline.FaultAnswerLost] == 0 {
		t.Errorf("markers %v: want one outage and the answers lost after commit", kinds)
	}
}

// TestDemoTotalsNameTheirCalls: each total of the picture names the calls
// it counts as the table's rows do, so no label reads one number for two
// phases (the faulty phase's attempts beside the outage's amplification).
func TestDemoTotalsNameTheirCalls(t *testing.T) {
	rep := payments.Report{Calls: 200, Attempts: 260, OutageCalls: 40, OutageAttempts: 44, Executed: 230, Replayed: 12}
	scoped := []string{"faulty phase: ", "outage: ", "both phases: ", "resends: ", "faults: "}
	unscoped := map[string]bool{"duplicate effects": true, "lost effects": true, "wrong responses": true, "wrong failure reasons": true}
	var table bytes.Buffer
	rep.Print(&table)
	for _, total := range demoTotals(rep) {
		ok := unscoped[total.Label]
		for _, p := range scoped {
			ok = ok || strings.HasPrefix(total.Label, p)
		}
		if !ok {
			t.Errorf("total %q names no phase", total.Label)
		}
		if strings.HasPrefix(total.Label, "faulty phase: ") && !strings.Contains(table.String(), total.Label) {
			t.Errorf("total %q is no row of the table:\n%s", total.Label, table.String())
		}
		switch total.Label {
		case "faulty phase: attempts":
			if total.N != 260 || total.Text != "" {
				t.Errorf("%s: %d %q", total.Label, total.N, total.Text)
			}
		case "outage: logical calls / attempts (amplification)":
			if total.Text != "40 / 44 (1.10×)" {
				t.Errorf("%s: %q", total.Label, total.Text)
			}
		case "faulty phase: executed / replayed by the server":
			t.Errorf("with an outage, the server's executions count both phases: %q", total.Label)
		}
	}
}
