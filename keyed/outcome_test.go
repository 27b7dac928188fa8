package keyed_test

import (
	"os"
	"regexp"
	"slices"
	"testing"

	"github.com/opledger/opledger/internal/keyedcore/keyedproto"
	"github.com/opledger/opledger/internal/outcomes"
	"github.com/opledger/opledger/keyed"
)

// TestClassification: the table is one row per outcome, in the constants'
// order, with unique names, a kind for every server outcome and none for
// the client's, and one meaning per reason.
func TestClassification(t *testing.T) {
	rows := keyed.Outcomes()
	names := map[string]bool{}
	byReason := map[string]keyed.Row{}
	for i, r := range rows {
		if r.Outcome != keyed.Outcome(i+1) || r.Outcome.Row() != r {
			t.Errorf("row %d is %v", i, r.Outcome)
		}
		if r.Name == "" || names[r.Name] || r.Outcome.String() != r.Name {
			t.Errorf("%v: name %q missing or repeated", r.Outcome, r.Name)
		}
		names[r.Name] = true
		if o, ok := keyed.Named(r.Name); !ok || o != r.Outcome {
			t.Errorf("Named(%q) = %v, %v", r.Name, o, ok)
		}
		if (r.Side == keyed.SideServer) != (r.Kind != "") || (r.Side != keyed.SideServer && r.Side != keyed.SideClient) {
			t.Errorf("%v: side %q, kind %q", r.Outcome, r.Side, r.Kind)
		}
		if r.Cause == "" || r.Next < keyed.Stop || r.Next > keyed.Resolve {
			t.Errorf("%v: cause %q, next %v", r.Outcome, r.Cause, r.Next)
		}
		switch r.Committed {
		case keyed.CommittedNo, keyed.CommittedAnswer, keyed.CommittedUnknown, keyed.CommittedNA:
		default:
			t.Errorf("%v: committed %q", r.Outcome, r.Committed)
		}
		if r.Committed == keyed.CommittedNA && r.Kind != keyed.KindRefused {
			t.Errorf("%v: refused before the claim, but kind %q", r.Outcome, r.Kind)
		}
		if r.Reason == "" {
			continue
		}
		if o, ok := keyed.OfReason(r.Reason); !ok || o.Row().Reason != r.Reason {
			t.Errorf("OfReason(%q) = %v, %v", r.Reason, o, ok)
		}
		if prev, ok := byReason[r.Reason]; ok && (prev.Next != r.Next || prev.Committed != r.Committed || prev.Side != r.Side || prev.Kind != r.Kind) {
			t.Errorf("reason %s means two things: %+v and %+v", r.Reason, prev, r)
		}
		byReason[r.Reason] = r
	}
	if keyed.Outcome(0).Row() != (keyed.Row{}) || keyed.Outcome(len(rows)+1).Row() != (keyed.Row{}) {
		t.Error("Row of a value that is not an outcome")
	}
	if _, ok := keyed.OfReason(""); ok {
		t.Error(`OfReason("")`)
	}
	for _, n := range []keyed.Next{keyed.Stop, keyed.Retry, keyed.Resolve, 0} {
		if n.String() == "" {
			t.Errorf("Next(%d) has no name", int(n))
		}
	}
}

// TestRPCRenderingIsTotal: every outcome has an RPC rendering; a reason
// comes with a code of the kit's own, an outcome without one with
// somebody else's status.
func TestRPCRenderingIsTotal(t *testing.T) {
	for _, r := range keyed.Outcomes() {
		rr, ok := keyedproto.Render(r.Outcome)
		switch {
		case !ok:
			t.Errorf("%s has no RPC rendering", r.Name)
		case (rr.Own == "") == (rr.Code == 0):
			t.Errorf("%s: rendering %+v: a code of the kit's or somebody's status, not both", r.Name, rr)
		case r.Side == keyed.SideServer && (rr.Own == "") != (r.Reason != ""):
			t.Errorf("%s: reason %q but rendering %+v", r.Name, r.Reason, rr)
		}
	}
}

// runnerOutcomes are every opledger.outcome a txmiddleware runner's
// metrics, span and log events can carry.
var runnerOutcomes = []string{outcomes.Executed, outcomes.Replayed, outcomes.KeyReused,
	outcomes.InProgress, outcomes.Busy, outcomes.Incomplete, outcomes.KeyExpired, outcomes.CommitUnknown,
	outcomes.TxAborted, outcomes.RequestEnded, outcomes.Failed}

// TestOneVocabulary: every name a metric of the kit's keyed calls can
// carry as opledger.outcome is an outcome's name in the classification:
// the servers' and the clients' are keyed.Outcome values by type (their
// String), and the runner's constants are the table's names, but for its
// own failed (documented in txmiddleware and docs/operations.md), which
// no row may take. The kinds of the servers' opledger.outcome.kind are
// the Kind constants, and docs/operations.md lists the runner's names as
// they are.
func TestOneVocabulary(t *testing.T) {
	names := map[string]keyed.Row{}
	for _, r := range keyed.Outcomes() {
		names[r.Name] = r
	}
	for _, n := range runnerOutcomes {
		r, ok := names[n]
		switch {
		case n == outcomes.Failed && ok:
			t.Errorf("the runner's own %q is an outcome's name too (%v)", n, r.Outcome)
		case n != outcomes.Failed && (!ok || r.Side != keyed.SideServer):
			t.Errorf("the runner's outcome %q is no server outcome of the classification", n)
		}
	}
	kinds := map[keyed.OutcomeKind]bool{keyed.KindExecuted: true, keyed.KindReplayed: true, keyed.KindRefused: true, keyed.KindFailed: true, keyed.KindNotFound: true}
	for _, r := range keyed.Outcomes() {
		if r.Side == keyed.SideServer && !kinds[r.Kind] {
			t.Errorf("%s: kind %q", r.Name, r.Kind)
		}
	}
	doc, err := os.ReadFile("../docs/operations.md")
	if err != nil {
		t.Fatal(err)
	}
	row := regexp.MustCompile("(?m)^\\| `opledger\\.tx\\.duration` \\|.*by outcome: (.*)\\|$").FindSubmatch(doc)
	if row == nil {
		t.Fatal("docs/operations.md has no opledger.tx.duration row listing its outcomes")
	}
	var listed []string
	for _, m := range regexp.MustCompile("`([a-z-]+)`").FindAllSubmatch(row[1], -1) {
		listed = append(listed, string(m[1]))
	}
	if !slices.Equal(listed, runnerOutcomes) {
		t.Errorf("docs/operations.md lists the runner's outcomes %v, want %v", listed, runnerOutcomes)
	}
}
