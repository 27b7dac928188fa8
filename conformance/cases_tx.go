package conformance

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/opledger/opledger/internal/dialectkit"
	"github.com/opledger/opledger/ledger"
)

func caseNoPoisoning(e *env) {
	key := "no-poisoning"
	resA := resultFor(key, 0)
	if err := e.claimOnce(e.l, key, resA); err != nil {
		e.t.Fatalf("set-up: commit an entry: %v", err)
	}
	n := minInt(8, e.conc)
	var (
		wg      sync.WaitGroup
		start   = make(chan struct{})
		errs    = make([]error, n)
		retries = make([]int, n)
	)
	for w := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			for attempt := 0; attempt < maxAttempts; attempt++ {
				errs[w] = e.poisonProbe(key, w, resA)
				if errs[w] == nil || !e.retryable(errs[w]) {
					return
				}
				retries[w]++
			}
		}()
	}
	close(start)
	wg.Wait()
	total := 0
	for w, err := range errs {
		total += retries[w]
		if err != nil {
			e.t.Errorf("transaction %d: %v", w, err)
		}
	}
	before, after := e.bizRows("probe-before"), e.bizRows("probe-after")
	if before != n || after != n {
		e.t.Errorf("%d rows written before the claim and %d after it survived, want %d each: the replaying claim poisoned its transaction", before, after, n)
	}
	e.figure("%d transactions wrote, replayed an existing key, wrote again and committed: %d+%d rows survived, %d retried", n, before, after, total)
}

func (e *env) poisonProbe(key string, w int, want ledger.Result) error {
	tx, err := e.begin(e.ctx)
	if err != nil {
		return err
	}
	defer tx.Rollback()
	if err := e.writeBiz(e.ctx, tx, "probe-before", w); err != nil {
		return fmt.Errorf("write before the claim: %w", err)
	}
	c, err := claim(e.ctx, e.l, tx, e.req(key))
	if err != nil {
		return fmt.Errorf("claim of an existing key: %w", err)
	}
	if c.Acquired() || !sameResult(c.Result, want) {
		return fmt.Errorf("claim of an existing key: outcome %v %q, want a replay of %q", c.Outcome, c.Result.Response, want.Response)
	}
	if err := e.writeBiz(e.ctx, tx, "probe-after", w); err != nil {
		return fmt.Errorf("write after the replay (the transaction is poisoned): %w", err)
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("commit after the replay: %w", err)
	}
	return nil
}

// expectNothing fails unless key left no entry and no business row.
func (e *env) expectNothing(key, after string) {
	e.t.Helper()
	if en, err := e.lookup(key); !errors.Is(err, ledger.ErrNotFound) {
		state := "an entry"
		if en != nil && en.State == ledger.Pending {
			state = "a pending entry (committed without a result)"
		}
		e.t.Errorf("%s: Lookup found %s (err %v); want nothing: the claim outlived its transaction", after, state, err)
	}
	if n := e.bizRows(key); n != 0 {
		e.t.Errorf("%s: %d business rows survived", after, n)
	}
}

func caseAtomicity(e *env) {
	steps := []string{"the claim", "the business write", "Complete"}
	switch {
	case e.atCommit && e.pipelined:
		// The record is sent with COMMIT: nothing comes between them.
		steps = []string{"the business write"}
	case e.atCommit:
		steps = []string{"the business write", "Record"}
	case e.pipelined:
		// The completion is sent with COMMIT.
		steps = []string{"the claim", "the business write"}
	}
	n := minInt(8, e.conc)
	var tl tally
	for i, step := range steps {
		key := fmt.Sprintf("atomic-%d", i)
		if e.atCommit {
			e.rollBackRecord(key, i)
		} else {
			e.rollBackClaim(key, i)
		}
		e.expectNothing(key, "rolled back after "+step)
		// The key is free again: a herd acquires it exactly once, and the
		// committed claim and business row both survive.
		h := e.herd(key, herdOpts{l: e.l, claimants: n})
		tl.acquired += h.acquired
		tl.replayed += h.replayed
		tl.retried += h.retried
		tl.duplicates += h.duplicates
		if en, err := e.lookup(key); err != nil || en.State != ledger.Completed {
			e.t.Errorf("after the committed re-claim of %s: Lookup %+v, %v; want a completed entry", key, en, err)
		}
	}
	e.figure("rolled back after %s: nothing survived; then %d claimants per key: %s", strings.Join(steps, ", "), n, tl)
}

// rollBackRecord writes key's business row and, from step 1 on, records
// key at commit, then rolls the unit back.
func (e *env) rollBackRecord(key string, step int) {
	var tx unitTx
	var err error
	if e.pipelined {
		tx, err = e.pipe.BeginAt(e.ctx, e.level)
	} else {
		tx, err = e.begin(e.ctx)
	}
	if err != nil {
		e.t.Fatalf("begin: %v", err)
	}
	defer tx.Rollback()
	if err := e.writeBiz(e.ctx, tx, key, 0); err != nil {
		e.t.Fatalf("business write: %v", err)
	}
	if step >= 1 {
		if c, err := record(e.ctx, e.l, tx, e.req(key), resultFor(key, 0)); err != nil || !won(c) {
			e.t.Fatalf("record of a fresh key: %v %v", c, err)
		}
	}
	if err := tx.Rollback(); err != nil {
		e.t.Fatalf("rollback: %v", err)
	}
}

// rollBackClaim claims key, from step 1 on writes its business row, from
// step 2 on completes it, then rolls the unit back.
func (e *env) rollBackClaim(key string, step int) {
	var (
		tx  unitTx
		c   *ledger.Claim
		err error
	)
	if e.pipelined {
		tx, c, err = e.pipe.BeginClaim(e.ctx, e.level, e.req(key))
	} else if tx, err = e.begin(e.ctx); err == nil {
		c, err = claim(e.ctx, e.l, tx, e.req(key))
	}
	if err != nil || !c.Acquired() {
		if tx != nil {
			tx.Rollback()
		}
		e.t.Fatalf("claim of a fresh key: %v %v", c, err)
	}
	defer tx.Rollback()
	if step >= 1 {
		if err := e.writeBiz(e.ctx, tx, key, 0); err != nil {
			e.t.Fatalf("business write: %v", err)
		}
	}
	if step >= 2 {
		if err := e.l.Complete(e.ctx, tx, c, resultFor(key, 0)); err != nil {
			e.t.Fatalf("complete: %v", err)
		}
	}
	if err := tx.Rollback(); err != nil {
		e.t.Fatalf("rollback: %v", err)
	}
}

func caseFaults(e *env) {
	e.faultCancelAfterClaim()
	if dialectkit.TraitsOf(e.d).SerialWriters {
		// The waiter blocks in the database's busy handler at BEGIN
		// (SQLite's BEGIN IMMEDIATE), which does not look at the context:
		// it returns only when the busy timeout passes.
		e.figure("cancel while waiting skipped: the database waits for its write lock in a busy handler that ignores cancellation")
	} else {
		e.faultCancelWhileWaiting()
	}
	if !e.tg.caps().KillConnections {
		e.figure("connection kill skipped: the target cannot kill connections")
		return
	}
	e.faultKill()
}

// faultCancelAfterClaim cancels the context between the claim (and the
// business write) and Complete.
func (e *env) faultCancelAfterClaim() {
	key := "fault-cancel"
	ctx, cancel := context.WithCancel(e.ctx)
	defer cancel()
	var (
		tx   unitTx
		c    *ledger.Claim
		err  error
		cerr error
	)
	switch {
	case e.pipelined && e.atCommit:
		tx, err = e.pipe.BeginAt(ctx, e.level)
	case e.pipelined:
		tx, c, err = e.pipe.BeginClaim(ctx, e.level, e.req(key))
		if err == nil && !c.Acquired() {
			err = fmt.Errorf("outcome %v", c.Outcome)
		}
	default:
		tx, err = e.beginAt(ctx, e.level)
		if err == nil && !e.atCommit {
			c, err = claim(ctx, e.l, tx, e.req(key))
			if err == nil && !c.Acquired() {
				err = fmt.Errorf("outcome %v", c.Outcome)
			}
		}
	}
	if err != nil {
		e.t.Fatalf("begin (and claim) a fresh key: %v", err)
	}
	defer tx.Rollback()
	if err := e.writeBiz(ctx, tx, key, 0); err != nil {
		e.t.Fatalf("business write: %v", err)
	}
	cancel()
	switch {
	case e.pipelined && e.atCommit:
		// Cancelled between the business write and the record sent with
		// COMMIT.
		_, cerr = e.pipe.RecordCommit(ctx, tx, e.req(key), resultFor(key, 0))
	case e.pipelined:
		cerr = e.pipe.CompleteCommit(ctx, tx, c, resultFor(key, 0))
	case e.atCommit:
		// Cancelled between the business write and Record.
		_, cerr = record(ctx, e.l, tx, e.req(key), resultFor(key, 0))
	default:
		cerr = e.l.Complete(ctx, tx, c, resultFor(key, 0))
	}
	merr := tx.Commit()
	if cerr == nil && merr == nil {
		e.t.Errorf("Complete (or Record) and Commit both succeeded with a cancelled context")
	}
	e.expectNothing(key, "context cancelled between claim and Complete")
	h := e.herd(key, herdOpts{l: e.l, claimants: minInt(8, e.conc)})
	step := "cancel after claim: Complete"
	if e.atCommit {
		step = "cancel after the business write: Record"
	}
	e.figure("%s %s, commit %s, nothing written, re-claimed: %s", step, errName(cerr), errName(merr), h)
}

// faultCancelWhileWaiting cancels a claimant blocked behind a holder.
func (e *env) faultCancelWhileWaiting() {
	key := "fault-cancel-wait"
	a := e.hold(key)
	ctx, cancel := context.WithCancel(e.ctx)
	defer cancel()
	done := make(chan error, 1)
	go func() {
		_, _, err := e.runUnit(ctx, e.level, e.req(key), "", 1, resultFor(key, 1), true)
		done <- err
	}()
	var (
		err      error
		returned bool
	)
	early := func() bool {
		select {
		case err = <-done:
			returned = true
			e.t.Errorf("the claimant returned while the holder's claim was uncommitted (err %v): it did not wait", err)
			return true
		default:
			return false
		}
	}
	if !e.awaitBlocked(a, 1, early) {
		cancel()
		if !returned {
			<-done
		}
		return
	}
	cancelled := time.Now()
	cancel()
	select {
	case err = <-done:
	case <-e.ctx.Done():
		e.t.Fatalf("a claimant blocked behind a holder did not return after its context was cancelled")
	}
	took := time.Since(cancelled)
	if err == nil {
		e.t.Errorf("a claimant whose context was cancelled while it waited committed")
	}
	// It returned while the holder still held the identity (the holder
	// commits only below): the cancellation, not the holder, ended the
	// wait. How soon is a figure, not a verdict.
	e.figure("a cancelled waiter returned %v after its cancellation", took.Round(time.Millisecond))
	a.mutate()
	a.commit()
	if n := e.bizRows(key); n != 1 {
		e.t.Errorf("%d business rows after the holder committed, want 1", n)
	}
	e.figure("cancel while waiting (%s): returned %v after the cancel", a.seen, took.Round(time.Millisecond))
}

// faultKill terminates the holder's connection after Complete, while a
// claimant waits behind it.
func (e *env) faultKill() {
	key := "fault-kill"
	ss, ok := e.d.(dialectkit.Sessions)
	if !ok {
		e.figure("connection kill skipped: dialect %s cannot kill a session (no dialectkit.Sessions)", e.d.Name())
		return
	}
	a := e.hold(key)
	if a.sid == 0 {
		e.t.Fatalf("the holder's session id is unknown")
	}
	a.mutate()
	b := e.claimant(key, 1)
	if !e.mustWait(a, b) {
		return
	}
	if err := ss.Kill(e.ctx, e.db, a.sid); err != nil {
		e.t.Fatalf("kill the holder's connection: %v", err)
	}
	o := e.collect(b)
	switch {
	case o.err != nil:
		e.t.Errorf("claimant waiting behind a killed holder: %v", o.err)
	case !o.acquired:
		e.t.Errorf("claimant waiting behind a killed holder replayed %q; want it to acquire (the holder never committed)", o.result.Response)
	}
	merr := a.tx.Commit()
	if merr == nil {
		e.t.Errorf("the killed holder's commit succeeded")
	}
	if n := e.bizRows(key); n != 1 {
		e.t.Errorf("%d business rows after the kill, want 1 (the claimant's)", n)
	}
	if en, err := e.lookup(key); err != nil || !sameResult(en.Result, resultFor(key, 1)) {
		e.t.Errorf("Lookup after the kill: %+v, %v; want the claimant's result", en, err)
	}
	e.figure("holder's connection killed after Complete (%s): its commit failed (%s), the waiting claimant acquired", a.seen, errName(merr))
}
