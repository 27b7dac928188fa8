package conformance

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/opledger/opledger/dialects"
	"github.com/opledger/opledger/internal/conformancekit"
	"github.com/opledger/opledger/internal/dialectkit"
	"github.com/opledger/opledger/ledger"
)

// holdTime is how long mustWait watches the claimants when the database
// cannot show who waits for whom (no dialectkit.Sessions, or serial writers,
// which wait for the write lock at BEGIN in a busy handler that no view
// shows); a claimant that returns sooner did not wait.
const holdTime = 300 * time.Millisecond

// waitLimit bounds how long mustWait waits for the database to show every
// claimant blocked behind the holder. A claimant that has not returned by
// then is taken to be waiting all the same: the view can lag (see
// viewRefresh), and a ledger may wait other than on the holder's lock.
const waitLimit = 2 * time.Second

// pollEvery is how often mustWait looks at the claimants.
const pollEvery = 10 * time.Millisecond

// viewRefresh is the least time between two reads of the database's view
// of lock waits, and between the start of a wait and the first read.
// MariaDB's INNODB_TRX and INNODB_LOCK_WAITS are served from a cache that
// is refreshed only by a read coming more than 100 ms after the previous
// one (by anyone): polled faster, the view never changes, and the first
// read of a wait could still show the previous wait's claimants.
const viewRefresh = 110 * time.Millisecond

// held is a transaction that has acquired a key and is still open.
type held struct {
	e   *env
	key string
	tx  unitTx
	c   *ledger.Claim
	sid int64 // the holder's session id; 0 without dialectkit.Sessions
	// seen says how mustWait last knew the claimants were waiting; shown
	// whether the database showed them, after shownAfter.
	seen       string
	shown      bool
	shownAfter time.Duration
}

// hold begins a transaction that acquires key and leaves it open, before
// the mutation: claimants arriving now find an uncommitted claim with no
// result. Where the dialect implements dialectkit.Sessions it reads the
// holder's session id, for mustWait and the kill fault.
func (e *env) hold(key string) *held {
	e.t.Helper()
	tx, err := e.begin(e.ctx)
	if err != nil {
		e.t.Fatalf("holder: begin: %v", err)
	}
	e.t.Cleanup(func() { tx.Rollback() })
	var c *ledger.Claim
	if e.atCommit {
		// Claim at commit: the holder's work and its record are both done,
		// uncommitted.
		c, _, err = e.unitStep(e.ctx, tx, e.req(key), key, 0, resultFor(key, 0))
	} else {
		c, err = claim(e.ctx, e.l, tx, e.req(key))
	}
	if err != nil {
		e.t.Fatalf("holder: claim of a fresh key: %v", err)
	}
	if !won(c) {
		e.t.Fatalf("holder: claim of a fresh key: outcome %v, want acquired (or recorded)", c.Outcome)
	}
	h := &held{e: e, key: key, tx: tx, c: c}
	if _, ok := e.d.(dialectkit.Sessions); ok {
		if h.sid, err = e.api.SessionID(e.ctx, e.d, tx); err != nil {
			e.t.Fatalf("holder: read the session id: %v", err)
		}
	}
	return h
}

// lockView returns the dialect's view of lock waits when the suite can
// wait on it: not for serial writers, whose waits (at BEGIN, in a busy
// handler) no view shows.
func (e *env) lockView() (dialectkit.Sessions, bool) {
	ss, ok := e.d.(dialectkit.Sessions)
	if !ok || dialectkit.TraitsOf(e.d).SerialWriters {
		return nil, false
	}
	return ss, true
}

// awaitBlocked waits until the database shows n sessions waiting for a
// lock the holder holds or, without a view of lock waits, for holdTime.
// When the view has not shown them all within waitLimit but none has
// returned, it takes them to be waiting. It stops early, returning false,
// when returned reports that a claimant is no longer waiting, or when the
// case's context ends (a failure). It records in holder.seen how it knew.
func (e *env) awaitBlocked(holder *held, n int, returned func() bool) bool {
	e.t.Helper()
	start := time.Now()
	ss, view := e.lockView()
	next, got := start.Add(viewRefresh), -1
	for {
		if returned() {
			return false
		}
		now := time.Now()
		waited := now.Sub(start)
		switch {
		case !view && waited >= holdTime:
			holder.seen = fmt.Sprintf("none returned within %v", holdTime)
			return true
		case view && waited >= waitLimit:
			holder.seen = fmt.Sprintf("none returned within %v, the database showed %d of %d waiting", waitLimit, got, n)
			return true
		case view && !now.Before(next):
			var err error
			got, err = ss.BlockedBy(e.ctx, e.db, holder.sid)
			if err != nil && e.ctx.Err() == nil {
				e.t.Errorf("read the database's lock waits (dialectkit.Sessions.BlockedBy): %v", err)
				return false
			}
			if got >= n {
				holder.shown, holder.shownAfter = true, time.Since(start)
				holder.seen = fmt.Sprintf("the database showed %d waiting after %v", got, holder.shownAfter.Round(time.Millisecond))
				return true
			}
			next = time.Now().Add(viewRefresh)
		}
		select {
		case <-e.ctx.Done():
			e.t.Errorf("the case's time ran out while %d claimants should have been waiting for the holder", n)
			return false
		case <-time.After(pollEvery):
		}
	}
}

// mutate writes the holder's business row and completes with worker 0's
// result, without committing. A claim-at-commit holder did both in hold.
func (h *held) mutate() {
	h.e.t.Helper()
	if h.e.atCommit {
		return
	}
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

// mustWait returns true once every claimant is waiting behind the
// holder: where the dialect shows lock waits (dialectkit.Sessions, not
// serial writers) as soon as the database shows them all waiting for the
// holder's lock (or none has returned within waitLimit), elsewhere when
// none has returned within holdTime. It fails if a claimant returns while
// the holder is still open; it then rolls the holder back, collects the
// claimants and returns false.
func (e *env) mustWait(holder *held, chs ...<-chan outcome) bool {
	e.t.Helper()
	done := make([]bool, len(chs))
	returned := func() bool {
		for i, ch := range chs {
			select {
			case o := <-ch:
				done[i] = true
				e.t.Errorf("claimant %d returned while the holder's claim was uncommitted (acquired=%v, replayed %q, err %v): it did not wait", i+1, o.acquired, o.result.Response, o.err)
				return true
			default:
			}
		}
		return false
	}
	if e.awaitBlocked(holder, len(chs), returned) {
		return true
	}
	holder.tx.Rollback()
	for i, ch := range chs {
		if !done[i] {
			e.collect(ch)
		}
	}
	return false
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
	waited := o.firstDone.Sub(o.started)
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
		e.figure("claimant waited %v (%s), then failed", waited.Round(time.Millisecond), a.seen)
	case o.firstErr != nil:
		e.figure("claimant waited %v (%s), got %s; the retry replayed and committed", waited.Round(time.Millisecond), a.seen, errName(o.firstErr))
	case e.atCommit:
		e.figure("claimant waited %v (%s), replayed the holder's result, and rolled its own work back", waited.Round(time.Millisecond), a.seen)
	default:
		e.figure("claimant waited %v (%s), replayed the holder's result, and its transaction committed", waited.Round(time.Millisecond), a.seen)
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
	e.figure("claimant waited %v (%s), acquired after the rollback (%d retries)", o.firstDone.Sub(o.started).Round(time.Millisecond), a.seen, o.retries)
}

func caseSnapshot(e *env) {
	key := "snapshot"
	var (
		b   unitTx
		err error
	)
	if e.pipelined {
		b, err = e.pipe.BeginAt(e.ctx, e.level) // claim at commit: claim first skips
	} else {
		b, err = e.begin(e.ctx)
	}
	if err != nil {
		e.t.Fatalf("begin at %s: %v", e.level, err)
	}
	defer b.Rollback()
	if err := e.readBiz(e.ctx, b); err != nil {
		e.t.Fatalf("read to take the snapshot: %v", err)
	}
	resA := resultFor(key, 0)
	if err := e.claimOnce(e.l, key, resA); err != nil {
		e.t.Fatalf("the other transaction's claim: %v", err)
	}
	var c *ledger.Claim
	if e.pipelined {
		if err = e.writeBiz(e.ctx, b, key, 1); err == nil {
			c, err = e.pipe.RecordCommit(e.ctx, b, e.req(key), resultFor(key, 1))
		}
	} else {
		c, _, err = e.unitStep(e.ctx, b, e.req(key), key, 1, resultFor(key, 1))
	}
	verdict := ""
	switch {
	case err != nil && e.retryable(err):
		verdict = errName(err)
	case err != nil:
		e.t.Errorf("claim after another transaction committed past the snapshot: %v; want a retryable error (or the committed result)", err)
	case won(c):
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
	var (
		seen    string
		shown   int
		slowest time.Duration
	)
	for r := range rounds {
		key := fmt.Sprintf("three-%d", r)
		a := e.hold(key)
		b, c := e.claimant(key, 1), e.claimant(key, 2)
		if !e.mustWait(a, b, c) {
			return
		}
		seen = a.seen
		if a.shown {
			shown++
			slowest = max(slowest, a.shownAfter)
		}
		a.mutate()
		ended := time.Now()
		a.rollback()
		ac, re, rt := e.judgeWaiters(r, ended, e.collect(b), e.collect(c))
		acquired, replayed, retried = acquired+ac, replayed+re, retried+rt
		if n := e.bizRows(key); n != 1 {
			e.t.Errorf("round %d: %d business rows, want 1", r, n)
		}
		if e.t.Failed() {
			break
		}
	}
	if shown > 0 {
		seen = fmt.Sprintf("the database showed both waiting in %d of %d rounds, after at most %v", shown, rounds, slowest.Round(time.Millisecond))
	}
	e.figure("%d rounds, holder rolled back with 2 waiting (%s): %d acquired, %d replayed, %d retried", rounds, seen, acquired, replayed, retried)
}

// judgeWaiters reports what is wrong with round r's two waiters, given
// when the holder ended: each must have returned after it, at most one
// acquired, and the other replays the winner's result. It counts them.
func (e *env) judgeWaiters(r int, ended time.Time, ob, oc outcome) (acquired, replayed, retried int) {
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
	return acquired, replayed, retried
}

// inProgressGuard is the hang guard of the in-progress case: a claimant
// whose lock wait is bounded at conformancekit.BoundedWait (0.5 s; MySQL rounds it up to
// 1 s) must give up with ErrInProgress while the holder stays open, and a
// claimant that ignores the bound would wait for the holder, which stays
// open until the claim returns: it is stopped here, ten times the bound
// and more, so that a loaded machine never trips it.
const inProgressGuard = 10 * time.Second

func caseInProgress(e *env) {
	begin := e.api.BeginBounded()
	if begin == nil && !e.l.boundsLockWait() {
		_, reason := e.tg.beginBoundedSQL()
		if e.tg.api != nil {
			reason = "the target's driver cannot bound a lock wait (no BeginBounded) and its ledger does not bound its claims (no BoundsLockWait reporting true)"
		}
		e.t.Skipf("%s", reason)
	}
	key := "in-progress"
	a := e.hold(key)
	inTx, inClaim := "", ""
	if begin != nil {
		inTx = e.inProgressInTx(begin, key)
	}
	if e.l.boundsLockWait() {
		inClaim = e.inProgressInClaim(key)
	}
	a.mutate()
	a.commit()
	o := e.mutate(e.ctx, e.l, key, 1, false)
	if o.err != nil || o.acquired || !sameResult(o.result, resultFor(key, 0)) {
		e.t.Errorf("retry after the holder committed: acquired=%v %q %v; want a replay of the holder's result", o.acquired, o.result.Response, o.err)
	}
	e.figure("%s; the retry replayed", strings.Join(slices.DeleteFunc([]string{inTx, inClaim}, func(s string) bool { return s == "" }), "; "))
}

// inProgressInTx claims key, held by another transaction, in a
// transaction that begin bounds, and returns the case's figure. The bound,
// not the guard, must end the wait: the error is ErrInProgress and the
// guard's context is still live.
func (e *env) inProgressInTx(begin func(ctx context.Context) (unitTx, func(), error), key string) string {
	ctx, cancel := context.WithTimeout(e.ctx, inProgressGuard)
	defer cancel()
	where := "claim"
	start := time.Now()
	b, release, err := begin(ctx)
	if err == nil {
		_, _, err = e.unitStep(ctx, b, e.req(key), key, 1, resultFor(key, 1))
		b.Rollback()
		release()
	} else if dialectkit.TraitsOf(e.d).SerialWriters && e.d.Classify(err) == dialects.ClassLockTimeout {
		// The database waits for its write lock at BEGIN, so the bound
		// ends BEGIN: txmiddleware reports exactly this as ErrInProgress.
		where, err = "BEGIN", fmt.Errorf("%w: %w", ledger.ErrInProgress, err)
	} else {
		e.t.Fatalf("begin a transaction with a bounded lock wait: %v", err)
	}
	took := time.Since(start)
	if guarded := ctx.Err() != nil; !errors.Is(err, ledger.ErrInProgress) || guarded {
		e.t.Errorf("%s while another transaction holds the key: %v after %v (hang guard passed: %v); want ErrInProgress from the bound", where, err, took.Round(time.Millisecond), guarded)
	}
	return fmt.Sprintf("claimant with a bounded lock wait got %v at %s after %v", errName(err), where, took.Round(time.Millisecond))
}

// inProgressInClaim claims key, held by another transaction, with the
// bound inside the ledger's claim statement (ClaimRequest.LockWait), or at
// commit inside its Record: the same, in a plain transaction (pipelined:
// sent with BEGIN, or at commit with COMMIT). No business write: only the
// ledger's statement carries the bound. It returns the case's figure.
func (e *env) inProgressInClaim(key string) string {
	ctx, cancel := context.WithTimeout(e.ctx, inProgressGuard)
	defer cancel()
	start := time.Now()
	req := e.req(key)
	req.LockWait = conformancekit.BoundedWait
	_, _, err := e.runUnit(ctx, sql.LevelDefault, req, "", 1, resultFor(key, 1), false)
	took := time.Since(start)
	if guarded := ctx.Err() != nil; !errors.Is(err, ledger.ErrInProgress) || guarded {
		e.t.Errorf("claim with ClaimRequest.LockWait while another transaction holds the key: %v after %v (hang guard passed: %v); want ErrInProgress from the bound", err, took.Round(time.Millisecond), guarded)
	}
	return fmt.Sprintf("bounded in the claim (ClaimRequest.LockWait): %v after %v", errName(err), took.Round(time.Millisecond))
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
