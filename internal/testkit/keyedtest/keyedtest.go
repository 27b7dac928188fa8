// Package keyedtest holds what every transport's tests of the keyed-call
// core share: a row test per outcome of the one classification, and the
// check that a transport's document prints the classification as the
// transport renders it.
package keyedtest

import (
	"context"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/opledger/opledger/internal/keyedtx"
	"github.com/opledger/opledger/internal/testkit/doccheck"
	"github.com/opledger/opledger/keyed"
	"github.com/opledger/opledger/ledger"
	"github.com/opledger/opledger/txmiddleware"
)

// Counting is a keyed.Transactions of a test's own around another one
// (keyed.SQL): what a second transaction API plugs in is this seam. It
// counts the runners built and the units run through them.
type Counting struct {
	keyed.Transactions
	Runners, Runs atomic.Int64
}

// NewRunner builds the wrapped Transactions' runner and counts it.
func (c *Counting) NewRunner(opts ...txmiddleware.Option) (keyedtx.Runner, error) {
	r, err := c.Transactions.NewRunner(opts...)
	c.Runners.Add(1)
	return countingRunner{r, &c.Runs}, err
}

type countingRunner struct {
	keyedtx.Runner
	runs *atomic.Int64
}

func (r countingRunner) Run(ctx context.Context, req ledger.ClaimRequest, work keyedtx.Work) (txmiddleware.RunResult, error) {
	r.runs.Add(1)
	return r.Runner.Run(ctx, req, work)
}

// Rows runs one subtest per outcome of the classification (keyed.Outcomes),
// named for the outcome, with its test in tests. An outcome without a test
// fails, and so does a test for something that is not an outcome: adding
// an outcome to the core fails every transport's row test until the
// transport renders it and tests the rendering.
func Rows(t *testing.T, tests map[keyed.Outcome]func(t *testing.T)) {
	t.Helper()
	for _, r := range keyed.Outcomes() {
		t.Run(r.Name, func(t *testing.T) {
			f, ok := tests[r.Outcome]
			if !ok {
				t.Fatalf("outcome %s has no row test", r.Name)
			}
			f(t)
		})
	}
	if len(tests) != len(keyed.Outcomes()) {
		t.Errorf("%d row tests for %d outcomes", len(tests), len(keyed.Outcomes()))
	}
}

// Table renders the classification as a markdown table: the header
// cells, then one line per outcome with the cells render gives its row.
// Every transport's document prints it this way: the rows, their order,
// what is committed and the next step are the core's, the rendering cells
// the transport's.
func Table(header []string, render func(keyed.Row) []string) string {
	var b strings.Builder
	line := func(cells []string) {
		b.WriteString("|")
		for _, c := range cells {
			b.WriteString(" " + c + " |")
		}
		b.WriteString("\n")
	}
	line(header)
	b.WriteString(strings.Repeat("|---", len(header)) + "|\n")
	for _, r := range keyed.Outcomes() {
		line(render(r))
	}
	return b.String()
}

// WantTable checks that the section name of the markdown file at path
// (between <!-- name:begin --> and <!-- name:end -->) is Table(header,
// render); what names the table in the error message.
func WantTable(t *testing.T, path, name, what string, header []string, render func(keyed.Row) []string) {
	t.Helper()
	doccheck.WantSection(t, path, name, what, Table(header, render))
}
