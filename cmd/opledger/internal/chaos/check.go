package chaos

import (
	"context"
	"database/sql"
	"fmt"
	"slices"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/opledger/opledger/dialects"
	"github.com/opledger/opledger/examples/payments/paymentspb"
	"github.com/opledger/opledger/keyed"
	"github.com/opledger/opledger/ledger"
)

// call is one logical call and what it returned.
type call struct {
	issued       bool
	key, ref     string
	reply        *paymentspb.TransferReply
	err          error
	definite     bool
	label        string        // its error's name (code, reason, decision), as FailedBy counts it
	deadlineLeft bool          // returned with at least resolveTime of its deadline left
	left         time.Duration // how much was left, when it failed
	took         time.Duration
	start        time.Time // when it was made
	resolved     bool      // its answer came from a resolve request
	replayed     bool      // its answer was a replay
	ackLost      bool      // answered OK, and its effect is not in the database (check)
}

// resolveTime is how much of its deadline a call must have left for a
// resolve: several round trips on loopback, with room to spare.
// An ambiguous return with at least that left is a failure of the run.
const resolveTime = 100 * time.Millisecond

// makeCall makes the i-th logical call through client.
func makeCall(ctx context.Context, client runClient, i int, caller string, timeout time.Duration) call {
	ref := fmt.Sprintf("%s-%d", caller, i)
	req := &paymentspb.TransferRequest{FromAccount: fmt.Sprintf("acct-%d", i%17), ToAccount: fmt.Sprintf("acct-%d", 17+i%5),
		AmountCents: int64(100 + i), Reference: ref}
	c := call{issued: true, key: keyed.NewKey(), ref: ref}
	cctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	c.start = time.Now()
	a, err := client.transfer(cctx, i, c.key, req)
	c.took = time.Since(c.start)
	c.reply, c.err, c.resolved, c.replayed = a.Reply, err, a.Resolved, a.Replayed
	if c.err != nil {
		c.label, c.definite = client.classify(c.err)
		if dl, ok := cctx.Deadline(); ok && cctx.Err() == nil {
			c.left = time.Until(dl)
			c.deadlineLeft = c.left >= resolveTime
		}
	}
	return c
}

// resolveFunc asks for a call's stored outcome after the run: found
// false when nothing was committed, an error when no answer came.
type resolveFunc func(c call) (reply *paymentspb.TransferReply, found bool, err error)

// check resolves every call that did not return OK and compares the
// calls, the replicas' commit log, the business table and the ledger's
// entries of caller, counting into rep what breaks the promise.
func check(ctx context.Context, rep *Report, calls []call, commits []commitRecord, db *sql.DB, d dialects.Dialect, table, caller string,
	resolve resolveFunc) error {
	rows, byID, err := readTransfers(ctx, db, d, table)
	if err != nil {
		return err
	}
	rep.Executed = len(byID)
	if err := checkLedger(ctx, rep, db, d, caller, byID); err != nil {
		return err
	}
	checkCommits(rep, commits, byID)
	checkCalls(rep, calls, rows, resolve)
	return nil
}

// transferRows are the business table's rows of one reference: how
// many, and the first one's id.
type transferRows struct {
	n  int
	id int64
}

// readTransfers reads the business table: its rows by reference, and
// each row's reference by id.
func readTransfers(ctx context.Context, db *sql.DB, d dialects.Dialect, table string) (map[string]transferRows, map[int64]string, error) {
	rows := map[string]transferRows{}
	byID := map[int64]string{}
	rs, err := db.QueryContext(ctx, "SELECT id, reference FROM "+d.QuoteIdent(table))
	if err != nil {
		return nil, nil, err
	}
	defer rs.Close()
	for rs.Next() {
		var id int64
		var ref string
		if err := rs.Scan(&id, &ref); err != nil {
			return nil, nil, err
		}
		r := rows[ref]
		r.n++
		if r.n == 1 {
			r.id = id
		}
		rows[ref] = r
		byID[id] = ref
	}
	return rows, byID, rs.Close()
}

// checkLedger compares the ledger's entries of caller with the business
// table's rows (byID): each successful entry names the transfer it
// committed with. A row without an entry and an entry without its row
// (or without its outcome) are lost effects.
func checkLedger(ctx context.Context, rep *Report, db *sql.DB, d dialects.Dialect, caller string, byID map[int64]string) error {
	ledgerIDs := map[int64]bool{}
	ls, err := db.QueryContext(ctx, "SELECT code, response, completed_at FROM "+d.QuoteIdent(ledger.DefaultTable)+
		" WHERE caller = "+d.Placeholder(1), caller)
	if err != nil {
		return err
	}
	defer ls.Close()
	for ls.Next() {
		var code, completed sql.NullInt64
		var resp []byte
		if err := ls.Scan(&code, &resp, &completed); err != nil {
			return err
		}
		if !completed.Valid {
			rep.LedgerNoRow++ // a committed claim without its outcome
			continue
		}
		if code.Int64 != 0 {
			continue // a recorded final error: no business row
		}
		var reply paymentspb.TransferReply
		if err := proto.Unmarshal(resp, &reply); err != nil {
			return fmt.Errorf("a ledger entry's response: %w", err)
		}
		ledgerIDs[reply.GetTransferId()] = true
		if _, ok := byID[reply.GetTransferId()]; !ok {
			rep.LedgerNoRow++
		}
	}
	if err := ls.Close(); err != nil {
		return err
	}
	for id := range byID {
		if !ledgerIDs[id] {
			rep.RowsNoLedger++
		}
	}
	rep.Lost += rep.LedgerNoRow + rep.RowsNoLedger
	return nil
}

// checkCommits compares the replicas' commit log, what the database
// acknowledged to them, with the business table (byID): a commit whose
// row is gone, and a call whose work committed more than once.
func checkCommits(rep *Report, commits []commitRecord, byID map[int64]string) {
	ran := map[string]map[int64]bool{}
	for _, c := range commits {
		if ran[c.ref] == nil {
			ran[c.ref] = map[int64]bool{}
		}
		if !ran[c.ref][c.id] {
			ran[c.ref][c.id] = true
			if byID[c.id] != c.ref {
				rep.CommittedLost++
			}
		}
	}
	for _, ids := range ran {
		if len(ids) > 1 {
			rep.ExecutedTwice++
		}
	}
}

// checkCalls checks the answer each call returned against the table
// (rows), resolving those that did not return OK; then it counts the
// effects no call made, and the calls' latencies.
func checkCalls(rep *Report, calls []call, rows map[string]transferRows, resolve resolveFunc) {
	refs := map[string]bool{}
	var took []time.Duration
	for i := range calls {
		c := &calls[i]
		if !c.issued {
			continue
		}
		refs[c.ref] = true
		took = append(took, c.took)
		countReturn(rep, *c)
		checkEffect(rep, c, rows[c.ref], resolve)
	}
	for ref := range rows {
		if !refs[ref] {
			rep.Lost++ // an effect with no call
		}
	}
	slices.Sort(took)
	if n := len(took); n > 0 {
		rep.P50ms = float64(took[n/2].Microseconds()) / 1000
		rep.P99ms = float64(took[min(n-1, n*99/100)].Microseconds()) / 1000
	}
}

// countReturn counts what c returned: OK, a definite failure, or an
// ambiguous one (with how much deadline it had left); and a failure by
// its name.
func countReturn(rep *Report, c call) {
	rep.Calls++
	if c.err != nil {
		if rep.FailedBy == nil {
			rep.FailedBy = map[string]int{}
		}
		label := c.label
		if label == "" {
			label = grpcLabel(c.err)
		}
		rep.FailedBy[label]++
	}
	switch {
	case c.err == nil:
		rep.ReturnedOK++
	case c.definite:
		rep.Definite++
	default:
		rep.Ambiguous++
		if c.deadlineLeft {
			rep.AmbiguousEarly++
		}
		rep.AmbiguousMaxLeftMS = max(rep.AmbiguousMaxLeftMS, float64(c.left.Microseconds())/1000)
	}
}

// checkEffect checks c's effect, got (its rows in the table), against
// its answer: the one it returned, or for a call that did not return OK
// the stored one resolve finds. A duplicate, a loss (an acknowledged one
// marks c) or a wrong answer is counted; so is a call resolved after the
// run, or one that stays unresolved.
func checkEffect(rep *Report, c *call, got transferRows, resolve resolveFunc) {
	if got.n > 1 {
		rep.Duplicates++
		return
	}
	reply := c.reply
	if c.err != nil {
		stored, found, err := resolve(*c)
		switch {
		case err != nil:
			rep.Unresolved++
			return
		case !found:
			if got.n != 0 {
				rep.Lost++ // a row the ledger does not know of
			}
			return
		}
		if c.definite {
			rep.WrongAnswers++ // a definite failure that had committed
		} else {
			rep.Reconciled++
		}
		reply = stored
	}
	if got.n == 0 {
		rep.Lost++ // an answer with no effect
		if c.err == nil {
			rep.AckLost++ // acknowledged to the client, and gone
			c.ackLost = true
		}
		return
	}
	if reply.GetTransferId() != got.id || reply.GetReference() != c.ref {
		rep.WrongAnswers++
	}
}
