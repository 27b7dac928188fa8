package chaos

import (
	"errors"
	"path/filepath"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/opledger/opledger/cmd/opledger/internal/timeline"
	"github.com/opledger/opledger/examples/payments"
	"github.com/opledger/opledger/examples/payments/paymentspb"
	"github.com/opledger/opledger/ledger"
)

// TestCheckFindsBreaches feeds the end-of-run check a database and
// calls that break the promise in each way it must see.
func TestCheckFindsBreaches(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	db, d, err := openSQLite(ctx, "sqlite:"+filepath.Join(t.TempDir(), "check.db"), "")
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if err := migrateLedger(ctx, db, d); err != nil {
		t.Fatal(err)
	}
	const table, caller = "chaos_check", "principal:c"
	if err := payments.CreateTable(ctx, db, d, table); err != nil {
		t.Fatal(err)
	}
	store, err := ledger.New(d)
	if err != nil {
		t.Fatal(err)
	}
	// commit writes a business row (unless id is 0) and a ledger entry
	// naming ledgerID (unless key is "").
	commit := func(key, ref string, id, ledgerID int64) {
		t.Helper()
		tx, err := db.BeginTx(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		defer tx.Rollback()
		if id != 0 {
			if _, err := tx.ExecContext(ctx, "INSERT INTO "+table+" (id, from_account, to_account, amount_cents, reference) VALUES (?, 'a', 'b', 1, ?)", id, ref); err != nil {
				t.Fatal(err)
			}
		}
		if key != "" {
			ident, err := ledger.NewIdentity(caller, paymentspb.TransferMethod, key)
			if err != nil {
				t.Fatal(err)
			}
			c, err := store.Claim(ctx, tx, ledger.ClaimRequest{Identity: ident, Fingerprint: ledger.FingerprintOf([]byte(key))})
			if err != nil {
				t.Fatal(err)
			}
			b, _ := proto.Marshal(&paymentspb.TransferReply{TransferId: ledgerID, Reference: ref})
			if err := store.Complete(ctx, tx, c, ledger.Result{Response: b, TypeName: "opledger.examples.payments.v1.TransferReply"}); err != nil {
				t.Fatal(err)
			}
		}
		if err := tx.Commit(); err != nil {
			t.Fatal(err)
		}
	}
	ok := func(ref string, id int64) call {
		return call{issued: true, key: "k-" + ref, ref: ref, reply: &paymentspb.TransferReply{TransferId: id, Reference: ref}}
	}
	commit("k-good", "good", 1, 1)
	commit("k-dup", "dup", 2, 2)
	commit("", "dup", 3, 0)                 // a second effect of one call, unknown to the ledger
	commit("k-wrong", "wrong", 4, 4)        // answered with another id
	commit("", "orphan", 5, 0)              // an effect with no call and no ledger entry
	commit("k-noeffect", "noeffect", 0, 99) // a ledger entry whose row is missing
	commit("k-ambig", "ambig", 6, 6)        // ambiguous, resolved committed
	calls := []call{ok("good", 1), ok("dup", 2), ok("wrong", 40), ok("noeffect", 99),
		{issued: true, key: "k-ambig", ref: "ambig", err: errors.New("lost"), deadlineLeft: true, left: time.Second},
		{issued: true, key: "k-def", ref: "def", err: errors.New("not committed"), definite: true},
		{}}
	resolve := func(c call) (*paymentspb.TransferReply, bool, error) {
		if c.ref == "ambig" {
			return &paymentspb.TransferReply{TransferId: 6, Reference: "ambig"}, true, nil
		}
		return nil, false, nil
	}
	// The replicas' commit log: "good" once (and its replay, not
	// logged), "ambig" run twice (the first run's commit lost, as after
	// an asynchronous failover), and a commit of "gone" that the
	// database does not have.
	commits := []commitRecord{{ref: "good", id: 1}, {ref: "ambig", id: 66}, {ref: "ambig", id: 6}, {ref: "gone", id: 77}, {ref: "good", id: 1}}
	var rep Report
	if err := check(ctx, &rep, calls, commits, db, d, table, caller, resolve); err != nil {
		t.Fatal(err)
	}
	want := Report{Calls: 6, Executed: 6, ReturnedOK: 4, Definite: 1, Ambiguous: 1, AmbiguousEarly: 1, Reconciled: 1,
		Duplicates: 1, WrongAnswers: 1, RowsNoLedger: 2, LedgerNoRow: 1,
		// rows without an entry (2) + the entry without a row (1) + the
		// OK call with no effect (1) + the effect with no call (1)
		Lost:    5,
		AckLost: 1, // the OK call with no effect
		// ambig's first run (66) and gone's (77) are not in the table
		CommittedLost: 2, ExecutedTwice: 1}
	rep.P50ms, rep.P99ms = 0, 0
	if rep.Calls != want.Calls || rep.Executed != want.Executed || rep.ReturnedOK != want.ReturnedOK || rep.Definite != want.Definite ||
		rep.Ambiguous != want.Ambiguous || rep.AmbiguousEarly != want.AmbiguousEarly || rep.Reconciled != want.Reconciled ||
		rep.Duplicates != want.Duplicates || rep.WrongAnswers != want.WrongAnswers || rep.RowsNoLedger != want.RowsNoLedger ||
		rep.LedgerNoRow != want.LedgerNoRow || rep.Lost != want.Lost || rep.AckLost != want.AckLost ||
		rep.CommittedLost != want.CommittedLost || rep.ExecutedTwice != want.ExecutedTwice {
		t.Fatalf("check:\n got %+v\nwant %+v", rep, want)
	}
	if !calls[3].ackLost || calls[3].outcome() != timeline.AckLost || calls[0].outcome() != timeline.OK {
		t.Errorf("the acknowledged and lost call: %+v", calls[3])
	}
	if !rep.Failed() {
		t.Fatal("a report with breaches did not fail")
	}
	// After a failover to an asynchronous standby, the acknowledged and
	// lost calls, the lost commits and the second runs are the
	// replication's, counted and not a failure; anything else still is.
	async := Report{Failovers: 1, Replication: "async", Lost: 3, AckLost: 3, CommittedLost: 4, ExecutedTwice: 1}
	if async.Failed() {
		t.Errorf("an asynchronous failover's losses failed the run: %+v", async)
	}
	for _, r := range []Report{
		{Failovers: 1, Replication: "async", Lost: 4, AckLost: 3},
		{Failovers: 1, Replication: "async", Duplicates: 1},
		{Failovers: 1, Replication: "sync", Lost: 1, AckLost: 1},
		{Failovers: 1, Replication: "sync", ExecutedTwice: 1},
		{Failovers: 1, Replication: "sync", CommittedLost: 1},
		{Failovers: 1, Replication: "remote_apply", Ambiguous: 1},
		{CommittedLost: 1}, {ExecutedTwice: 1},
	} {
		if !r.Failed() {
			t.Errorf("did not fail: %+v", r)
		}
	}
}
