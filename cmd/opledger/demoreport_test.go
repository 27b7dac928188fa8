package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/opledger/opledger/internal/harness/timeline"
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
