package conformance

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/opledger/opledger/ledger"
)

// holdTime is how long a holder keeps its claim open before ending it; a
// claimant that returns sooner did not wait.
const holdTime = 300 * time.Millisecond

// held is a transaction that has acquired a key and is still open.
type held struct {
	e   *env
	key string
	tx  *sql.Tx
	c   *ledger.Claim
}

// hold begins a transaction that acquires key and leaves it open, before
// the mutation: claimants arriving now find an uncommitted claim with no
// result.
func (e *env) hold(key string) *held {
	e.t.Helper()
	tx, err := e.begin(e.ctx)
	if err != nil {
		e.t.Fatalf("holder: begin: %v", err)
	}
	e.t.Cleanup(func() { tx.Rollback() })
	c, err := claim(e.ctx, e.l, tx, e.req(key))
	if err != nil {
		e.t.Fatalf("holder: claim of a fresh key: %v", err)
	}
	if c.Outcome != ledger.Acquired {
		e.t.Fatalf("holder: claim of a fresh key: outcome %v, want acquired", c.Outcome)
	}
	return &held{e: e, key: key, tx: tx, c: c}
}

// mutate writes the holder's business row and completes with worker 0's
// result, without committing.
func (h *held) mutate() {
	h.e.t.Helper()
	if err := h.e.writeBiz(h.e.ctx, h.tx, h.key, 0); err != nil {
		h.e.t.Fatalf("holder: business write: %v", err)
	}
	if err := h.e.l.Complete(h.e.ctx, h.tx, h.c, resultFor(h.key, 0)); err != nil {
		h.e.t.Fatalf("holder: complete: %v", err)
	}
}

func (h *held) commit() {
	h.e.t.Helper()
	if err := h.tx.Commit(); err != nil {
		h.e.t.Fatalf("holder: commit: %v", err)
	}
}

func (h *held) rollback() {
	h.e.t.Helper()
	if err := h.tx.Rollback(); err != nil {
		h.e.t.Fatalf("holder: rollback: %v", err)
	}
}

// claimant starts one claimant on key in the background.
func (e *env) claimant(key string, worker int) <-chan outcome {
	ch := make(chan outcome, 1)
	go func() { ch <- e.mutate(e.ctx, e.l, key, worker, false) }()
	return ch
}

// mustWait fails if any claimant finished while the holder was still
// open; it then rolls the holder back and waits for the other claimants.
func (e *env) mustWait(holder *held, chs ...<-chan outcome) bool {
	e.t.Helper()
	deadline := time.After(holdTime)
	for {
		for i, ch := range chs {
			select {
			case o := <-ch:
				e.t.Errorf("claimant %d returned while the holder's claim was uncommitted (acquired=%v, replayed %q, err %v): it did not wait", i+1, o.acquired, o.result.Response, o.err)
				holder.tx.Rollback()
				for j, other := range chs {
					if j != i {
						e.collect(other)
					}
				}
				return false
			default:
			}
		}
		select {
		case <-deadline:
			return true
		case <-time.After(10 * time.Millisecond):
		}
	}
}

func (e *env) collect(ch <-chan outcome) outcome {
	select {
	case o := <-ch:
		return o
	case <-e.ctx.Done():
		e.t.Fatalf("claimant still blocked when the case timed out")
		return outcome{}
	}
}

func caseWaitCommit(e *env) {
	key := "wait-commit"
	a := e.hold(key)
	b := e.claimant(key, 1)
	if !e.mustWait(a, b) {
		return
	}
	a.mutate()
	ended := time.Now()
	a.commit()
	o := e.collect(b)
	waited := o.firstDone.Sub(ended) + holdTime
	switch {
	case o.err != nil:
		e.t.Errorf("after the holder committed, the claimant failed: %v (after %d retries)", o.err, o.retries)
	case o.acquired:
		e.t.Errorf("after the holder committed, the claimant acquired the key too: the mutation ran twice")
	case !sameResult(o.result, resultFor(key, 0)):
		e.t.Errorf("the claimant replayed %q, want the holder's %q", o.result.Response, resultFor(key, 0).Response)
	case o.firstErr != nil && !snapshotLevel(e.level):
		e.t.Errorf("the claimant's first attempt failed at %s: %v; want the holder's result", e.level, o.firstErr)
	case o.firstDone.Before(ended):
		e.t.Errorf("the claimant's claim returned before the holder committed")
	}
	if n := e.bizRows(key); n != 1 {
		e.t.Errorf("%d business rows, want 1", n)
	}
	switch {
	case o.err != nil:
		e.figure("claimant waited %v, then failed", waited.Round(time.Millisecond))
	case o.firstErr != nil:
		e.figure("claimant waited %v, got %s; the retry replayed and committed", waited.Round(time.Millisecond), errName(o.firstErr))
	default:
		e.figure("claimant waited %v, replayed the holder's result, and its transaction committed", waited.Round(time.Millisecond))
	}
}

func caseWaitRollback(e *env) {
	key := "wait-rollback"
	a := e.hold(key)
	b := e.claimant(key, 1)
	if !e.mustWait(a, b) {
		return
	}
	a.mutate()
	ended := time.Now()
	a.rollback()
	o := e.collect(b)
	switch {
	case o.err != nil:
		e.t.Errorf("after the holder rolled back, the claimant failed: %v (after %d retries)", o.err, o.retries)
	case !o.acquired:
		e.t.Errorf("after the holder rolled back, the claimant replayed %q; want it to acquire (nothing was committed)", o.result.Response)
	case o.firstErr != nil && !snapshotLevel(e.level):
		e.t.Errorf("the claimant's first attempt failed at %s: %v; want it to acquire", e.level, o.firstErr)
	case o.firstDone.Before(ended):
		e.t.Errorf("the claimant's claim returned before the holder rolled back")
	}
	if n := e.bizRows(key); n != 1 {
		e.t.Errorf("%d business rows, want 1 (the claimant's)", n)
	}
	if en, err := e.lookup(key); err != nil || !sameResult(en.Result, resultFor(key, 1)) {
		e.t.Errorf("Lookup after the claimant committed: %+v, %v; want its result", en, err)
	}
	e.figure("claimant waited %v, acquired after the rollback (%d retries)", (o.firstDone.Sub(ended) + holdTime).Round(time.Millisecond), o.retries)
}

func caseSnapshot(e *env) {
	key := "snapshot"
	b, err := e.begin(e.ctx)
	if err != nil {
		e.t.Fatalf("begin at %s: %v", e.level, err)
	}
	defer b.Rollback()
	var n int
	if err := b.QueryRowContext(e.ctx, "SELECT COUNT(*) FROM "+e.biz).Scan(&n); err != nil {
		e.t.Fatalf("read to take the snapshot: %v", err)
	}
	resA := resultFor(key, 0)
	if err := e.claimOnce(e.l, key, resA); err != nil {
		e.t.Fatalf("the other transaction's claim: %v", err)
	}
	c, err := claim(e.ctx, e.l, b, e.req(key))
	verdict := ""
	switch {
	case err != nil && e.retryable(err):
		verdict = errName(err)
	case err != nil:
		e.t.Errorf("claim after another transaction committed past the snapshot: %v; want a retryable error (or the committed result)", err)
	case c.Acquired():
		e.t.Errorf("claim after another transaction committed past the snapshot acquired the key: the mutation would run twice")
	case !sameResult(c.Result, resA):
		e.t.Errorf("claim after another transaction committed past the snapshot replayed %q, want %q or a retryable error", c.Result.Response, resA.Response)
	default:
		verdict = "replayed the committed result"
	}
	b.Rollback()
	o := e.mutate(e.ctx, e.l, key, 1, false)
	switch {
	case o.err != nil:
		e.t.Errorf("retry: %v", o.err)
	case o.acquired:
		e.t.Errorf("retry acquired a committed key")
	case !sameResult(o.result, resA):
		e.t.Errorf("retry replayed %q, want %q", o.result.Response, resA.Response)
	}
	if verdict != "" {
		e.figure("claim behind the snapshot: %s; retry replayed", verdict)
	}
}

func caseThreeWaiter(e *env) {
	const rounds = 5
	var acquired, replayed, retried int
	for r := range rounds {
		key := fmt.Sprintf("three-%d", r)
		a := e.hold(key)
		b, c := e.claimant(key, 1), e.claimant(key, 2)
		if !e.mustWait(a, b, c) {
			return
		}
		a.mutate()
		ended := time.Now()
		a.rollback()
		ob, oc := e.collect(b), e.collect(c)
		var win *outcome
		for i, o := range []*outcome{&ob, &oc} {
			retried += o.retries
			switch {
			case o.err != nil:
				e.t.Errorf("round %d, waiter %d: %v (after %d retries)", r, i+1, o.err, o.retries)
			case o.firstDone.Before(ended):
				e.t.Errorf("round %d, waiter %d: returned before the holder rolled back", r, i+1)
			case o.acquired:
				acquired++
				if win != nil {
					e.t.Errorf("round %d: both waiters acquired: the mutation ran twice", r)
				}
				win = o
			default:
				replayed++
			}
		}
		for i, o := range []*outcome{&ob, &oc} {
			if o.err == nil && !o.acquired {
				if win == nil {
					e.t.Errorf("round %d, waiter %d: replayed %q but nobody acquired", r, i+1, o.result.Response)
				} else if !sameResult(o.result, win.result) {
					e.t.Errorf("round %d, waiter %d: replayed %q, want the winner's %q", r, i+1, o.result.Response, win.result.Response)
				}
			}
		}
		if n := e.bizRows(key); n != 1 {
			e.t.Errorf("round %d: %d business rows, want 1", r, n)
		}
		if e.t.Failed() {
			break
		}
	}
	e.figure("%d rounds, holder rolled back with 2 waiting: %d acquired, %d replayed, %d retried", rounds, acquired, replayed, retried)
}

func caseInProgress(e *env) {
	begin, reason := e.tg.beginBounded()
	if begin == nil {
		e.t.Skipf("%s", reason)
	}
	key := "in-progress"
	a := e.hold(key)
	b, release, err := begin(e.ctx, e.db)
	if err != nil {
		e.t.Fatalf("begin a transaction with a bounded lock wait: %v", err)
	}
	// Give up well past the limit: a claim that does not honour the bound
	// has failed already, and may otherwise wait as long as the holder.
	ctx, cancel := context.WithTimeout(e.ctx, 5*time.Second)
	start := time.Now()
	_, err = claim(ctx, e.l, b, e.req(key))
	took := time.Since(start)
	cancel()
	b.Rollback()
	release()
	if !errors.Is(err, ledger.ErrInProgress) || took > 1500*time.Millisecond {
		e.t.Errorf("claim while another transaction holds the key: %v after %v; want ErrInProgress within 1.5 s", err, took.Round(time.Millisecond))
	}
	a.mutate()
	a.commit()
	o := e.mutate(e.ctx, e.l, key, 1, false)
	if o.err != nil || o.acquired || !sameResult(o.result, resultFor(key, 0)) {
		e.t.Errorf("retry after the holder committed: acquired=%v %q %v; want a replay of the holder's result", o.acquired, o.result.Response, o.err)
	}
	e.figure("claimant with a bounded lock wait got %v after %v (limit 1.5 s); the retry replayed", errName(err), took.Round(time.Millisecond))
}

func errName(err error) string {
	switch {
	case err == nil:
		return "no error"
	case errors.Is(err, ledger.ErrInProgress):
		return "ErrInProgress"
	case errors.Is(err, ledger.ErrRetryable):
		var dbe *ledger.DBError
		if errors.As(err, &dbe) {
			return "ErrRetryable (" + dbe.Class.String() + ")"
		}
		return "ErrRetryable"
	case errors.Is(err, ledger.ErrIncomplete):
		return "ErrIncomplete"
	case errors.Is(err, context.Canceled):
		return "context.Canceled"
	case errors.Is(err, context.DeadlineExceeded):
		return "context.DeadlineExceeded"
	case errors.Is(err, sql.ErrTxDone):
		return "sql.ErrTxDone"
	}
	return err.Error()
}
