package conformance_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/opledger/opledger/conformance"
	"github.com/opledger/opledger/dialects"
	"github.com/opledger/opledger/internal/sqlitedialect"
	"github.com/opledger/opledger/internal/testkit/testdb"
)

// checkedSQLite is SQLite with a transaction check (dialectkit.TxChecker)
// that answers err, as the TiDB dialect refuses TiDB's optimistic
// transactions, or cannot read the variables it checks.
type checkedSQLite struct {
	sqlitedialect.Dialect
	err    error
	checks *atomic.Int64
}

func (d checkedSQLite) CheckTx(context.Context, *sql.Tx) error {
	d.checks.Add(1)
	return d.err
}

// TestTxCheckIsSetUp: a database whose transactions the dialect refuses
// (TiDB's optimistic mode, here a SQLite dialect that refuses as the TiDB
// dialect does), or whose check cannot run, fails the run before any case
// with one "target" result, a set-up error naming the cause, instead of
// every case failing with the same refusal; with a check that passes, the
// cases run.
func TestTxCheckIsSetUp(t *testing.T) {
	t.Parallel()
	db := testdb.Targets()[0].Open(t, 8)
	refusal := fmt.Errorf("%w: TiDB runs this transaction optimistically (tidb_txn_mode = \"optimistic\"); set tidb_txn_mode = 'pessimistic'", dialects.ErrUnsuitableTx)
	for _, c := range []struct {
		name  string
		err   error
		wants []string // in the set-up message; none: the cases run
	}{
		{"optimistic", refusal, []string{"set-up: the database's transactions are unsuitable for the ledger", "tidb_txn_mode = 'pessimistic'"}},
		{"no check", errors.New("Error 1193 (HY000): Unknown system variable 'tidb_txn_mode'"), []string{"set-up: cannot check the database's transactions", "Unknown system variable"}},
		{"suitable", nil, nil},
	} {
		t.Run(c.name, func(t *testing.T) {
			d := checkedSQLite{err: c.err, checks: new(atomic.Int64)}
			rep := conformance.Check(context.Background(), conformance.StoreTarget("checked", db, d),
				conformance.WithCases("atomicity", "herd"), conformance.WithConcurrency(4), conformance.WithKeys(2))
			if c.wants == nil {
				if rep.Failed() || len(rep.Results) != 2 {
					t.Fatalf("with a suitable transaction:\n%s", describe(rep))
				}
				return
			}
			if len(rep.Results) != 1 || rep.Results[0].Name != "target" || rep.Results[0].Verdict != conformance.Fail || len(rep.Results[0].Messages) != 1 {
				t.Fatalf("want one failed target result:\n%s", describe(rep))
			}
			msg := rep.Results[0].Messages[0]
			for _, w := range c.wants {
				if !strings.Contains(msg, w) {
					t.Errorf("set-up message %q lacks %q", msg, w)
				}
			}
			if !strings.HasPrefix(msg, "set-up:") {
				t.Errorf("set-up message %q does not start with set-up:", msg)
			}
			if n := d.checks.Load(); n != 1 {
				t.Errorf("CheckTx ran %d times, want once (the probe; no case ran)", n)
			}
		})
	}
}
