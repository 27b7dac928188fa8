package conformance

import (
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/opledger/opledger/internal/dialectkit"
	"github.com/opledger/opledger/internal/keybirth"
	"github.com/opledger/opledger/ledger"
)

// The window cases: a key whose birth the ledger can read (a UUIDv7, or a
// key sent with its first-sent time) is answered truly at any age: inside
// the ledger's window (its retention minus the clock skew) it replays,
// past it it is refused with ledger.ErrKeyExpired, never run again and
// never reported as not found.

// window returns the ledger's retention and clock skew: what the ledger
// states (txledger.Window: a *ledger.Store, or a Window method), else the
// suite's retention and the kit's default skew (a minute, or a tenth of
// the retention when that is shorter), and whether the ledger stated them.
func (e *env) window() (r, s time.Duration, stated bool) {
	if r, s, ok := e.l.window(); ok {
		return r, s, true
	}
	return retention, min(time.Minute, retention/10), false
}

// windowNote says where the window came from, for the figures.
func (e *env) windowNote() string {
	r, s, stated := e.window()
	if stated {
		return fmt.Sprintf("window %v (retention %v minus skew %v, as the ledger states)", r-s, r, s)
	}
	return fmt.Sprintf("window %v (retention %v minus the default skew %v: the ledger states none)", r-s, r, s)
}

// bornID is the suite's identity for a fresh UUIDv7 key born at t.
func (e *env) bornID(t time.Time) ledger.Identity {
	return e.id(keybirth.New(t))
}

// unit forms: the ways the ledger under test claims.
const (
	formClaim        = "Claim"
	formRecord       = "Record"
	formBeginClaim   = "BeginClaim"
	formRecordCommit = "RecordCommit"
)

// forms returns every form the ledger under test has, the target's own
// first: Claim, and Record where it records, and BeginClaim and
// RecordCommit where it pipelines.
func (e *env) forms() []string {
	own := formClaim
	switch {
	case e.pipelined && e.atCommit:
		own = formRecordCommit
	case e.pipelined:
		own = formBeginClaim
	case e.atCommit:
		own = formRecord
	}
	out := []string{own}
	add := func(f string, ok bool) {
		if ok && f != own {
			out = append(out, f)
		}
	}
	add(formClaim, true)
	add(formRecord, e.l.recorder())
	add(formBeginClaim, e.pipelined)
	add(formRecordCommit, e.pipelined)
	return out
}

// unitIn runs one unit of work for req through form f, ending it as a
// caller would: on a win (acquired, or recorded) after the business write
// of key and the completion with r, committed; on anything else rolled
// back. Retryable failures retry the whole unit.
func (e *env) unitIn(f string, req ledger.ClaimRequest, key string, worker int, r ledger.Result) (c *ledger.Claim, won bool, err error) {
	for attempt := 0; attempt < maxAttempts; attempt++ {
		if attempt > 0 {
			sleep(e.ctx, time.Duration(attempt)*time.Millisecond)
		}
		c, won, err = e.unitOnce(f, req, key, worker, r)
		if err == nil || !e.retryable(err) || e.ctx.Err() != nil {
			return c, won, err
		}
	}
	return c, won, err
}

func (e *env) unitOnce(f string, req ledger.ClaimRequest, key string, worker int, r ledger.Result) (*ledger.Claim, bool, error) {
	ctx := e.ctx
	switch f {
	case formBeginClaim:
		tx, c, err := e.pipe.BeginClaim(ctx, e.level, req)
		if err != nil || !c.Acquired() {
			return c, false, err
		}
		if err := e.writeBiz(ctx, tx, key, worker); err != nil {
			tx.Rollback()
			return nil, false, fmt.Errorf("business write: %w", err)
		}
		if err := e.pipe.CompleteCommit(ctx, tx, c, r); err != nil {
			return nil, false, fmt.Errorf("complete and commit: %w", err)
		}
		return c, true, nil
	case formRecordCommit:
		tx, err := e.pipe.BeginAt(ctx, e.level)
		if err != nil {
			return nil, false, err
		}
		defer tx.Rollback()
		if err := e.writeBiz(ctx, tx, key, worker); err != nil {
			return nil, false, fmt.Errorf("business write: %w", err)
		}
		c, err := e.pipe.RecordCommit(ctx, tx, req, r)
		if err != nil {
			return nil, false, err
		}
		return c, c.Outcome == ledger.Recorded, nil
	}
	tx, err := e.begin(ctx)
	if err != nil {
		return nil, false, err
	}
	defer tx.Rollback()
	if f == formRecord {
		if err := e.writeBiz(ctx, tx, key, worker); err != nil {
			return nil, false, fmt.Errorf("business write: %w", err)
		}
		c, err := record(ctx, e.l, tx, req, r)
		if err != nil || c.Outcome != ledger.Recorded {
			return c, false, err
		}
		return c, true, tx.Commit()
	}
	c, err := claim(ctx, e.l, tx, req)
	if err != nil || !c.Acquired() {
		return c, false, err
	}
	if err := e.writeBiz(ctx, tx, key, worker); err != nil {
		return nil, false, fmt.Errorf("business write: %w", err)
	}
	if err := e.l.Complete(ctx, tx, c, r); err != nil {
		return nil, false, fmt.Errorf("complete: %w", err)
	}
	return c, true, tx.Commit()
}

// rowsOf counts id's ledger rows.
func (e *env) rowsOf(id ledger.Identity) int {
	b := id.ID()
	return e.count("SELECT COUNT(*) FROM "+e.d.QuoteIdent(e.table)+" WHERE id = "+e.ph(1), b[:])
}

// mustWin runs a unit for id through f and fails the case unless it won.
func (e *env) mustWin(f, what string, id ledger.Identity, key string, r ledger.Result) {
	e.t.Helper()
	c, won, err := e.unitIn(f, ledger.ClaimRequest{Identity: id, Fingerprint: fpOf(key)}, key, 0, r)
	if err != nil || !won {
		e.t.Fatalf("%s, %s: %v %v; want it acquired and committed", what, f, c, err)
	}
}

// replaysIn checks that every form replays want for id.
func (e *env) replaysIn(what string, id ledger.Identity, key string, want ledger.Result) int {
	e.t.Helper()
	n := 0
	for i, f := range e.forms() {
		c, won, err := e.unitIn(f, ledger.ClaimRequest{Identity: id, Fingerprint: fpOf(key)}, key, 100+i, ledger.Result{Response: []byte("must not be stored")})
		switch {
		case err != nil || won:
			e.t.Errorf("%s, %s: %v won=%v %v; want a replay of %q", what, f, c, won, err, want.Response)
		case c.Outcome != ledger.Replay || !sameResult(c.Result, want):
			e.t.Errorf("%s, %s: outcome %v, result %q; want a replay of %q", what, f, c.Outcome, c.Result.Response, want.Response)
		default:
			n++
		}
	}
	return n
}

// refusedIn checks that every form refuses id with target (an error that
// errors.Is matches) and runs nothing; it returns how many refused.
func (e *env) refusedIn(what string, id ledger.Identity, key string, target error) int {
	e.t.Helper()
	before := e.bizRows(key)
	n := 0
	for i, f := range e.forms() {
		c, won, err := e.unitIn(f, ledger.ClaimRequest{Identity: id, Fingerprint: fpOf(key)}, key, 200+i, resultFor(key, 200+i))
		switch {
		case won:
			e.t.Errorf("%s, %s: the key was acquired and the call ran again (%v); want %v", what, f, c.Outcome, target)
		case !errors.Is(err, target):
			e.t.Errorf("%s, %s: %v %v; want %v", what, f, c, err, target)
		default:
			n++
		}
	}
	if got := e.bizRows(key); got != before {
		e.t.Errorf("%s: %d business rows after the refusals, %d before: a refused unit wrote", what, got, before)
	}
	return n
}

// lookupIs checks Lookup of id: it must match target, and never be
// ErrNotFound unless target is. It returns 1 when it does, else 0.
func (e *env) lookupIs(what string, id ledger.Identity, target error) int {
	e.t.Helper()
	en, err := e.l.Lookup(e.ctx, id)
	if !errors.Is(err, target) || target != ledger.ErrNotFound && errors.Is(err, ledger.ErrNotFound) {
		e.t.Errorf("Lookup %s: %+v, %v; want %v", what, en, err, target)
		return 0
	}
	return 1
}

// lookupResult checks that Lookup of id returns the completed entry with r.
func (e *env) lookupResult(what string, id ledger.Identity, r ledger.Result) {
	e.t.Helper()
	en, err := e.l.Lookup(e.ctx, id)
	if err != nil || en.State != ledger.Completed || !sameResult(en.Result, r) {
		e.t.Errorf("Lookup %s: %+v, %v; want the completed entry %q", what, en, err, r.Response)
	}
}

// sweepAll sweeps until id's entry is gone (on a table partitioned by
// birth, moving the clock past its bucket's drop time); it reports
// whether the ledger has a Sweep.
func (e *env) sweepAll(id ledger.Identity) bool {
	e.t.Helper()
	sw, ok := e.l.sweeper()
	if !ok {
		return false
	}
	for range 10 {
		if _, err := sw(e.ctx, 100); err != nil && !errors.Is(err, ledger.ErrInProgress) && !errors.Is(err, ledger.ErrRetryable) {
			e.t.Fatalf("Sweep: %v", err)
		}
		if e.rowsOf(id) == 0 {
			return true
		}
		// A table partitioned by birth drops the entry with its bucket,
		// once the bucket's end plus the retention plus the skew has
		// passed: move the clock there.
		if birth, ok := id.Birth(); ok {
			if p, ok := dialectkit.BucketOf(e.partitions(), birth); ok {
				r, s, _ := e.window()
				if at := time.UnixMicro(p.To).Add(r + s + time.Second); at.After(e.clock.Now()) {
					e.clock.Advance(at.Sub(e.clock.Now()))
				}
			}
		}
	}
	e.t.Fatalf("Sweep left an entry past its retention")
	return true
}

// raceExpired releases claimants (up to 16) on id together, each through
// one of forms in turn, and checks that every one is refused with
// ErrKeyExpired; it returns how many were, and of how many.
func (e *env) raceExpired(id ledger.Identity, key string, forms []string) (raced, claimants int) {
	claimants = minInt(16, e.conc)
	var (
		wg    sync.WaitGroup
		mu    sync.Mutex
		start = make(chan struct{})
	)
	for i := range claimants {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			f := forms[i%len(forms)]
			c, won, err := e.unitIn(f, ledger.ClaimRequest{Identity: id, Fingerprint: fpOf(key)}, key, 300+i, resultFor(key, 300+i))
			switch {
			case won:
				e.t.Errorf("past the window, claimant %d (%s): acquired again, the call ran twice", i, f)
			case !errors.Is(err, ledger.ErrKeyExpired):
				e.t.Errorf("past the window, claimant %d (%s): %v %v; want ErrKeyExpired", i, f, c, err)
			default:
				mu.Lock()
				raced++
				mu.Unlock()
			}
		}()
	}
	close(start)
	wg.Wait()
	return raced, claimants
}

func caseWindowStale(e *env) {
	r, s, _ := e.window()
	w := r - s
	forms := e.forms()

	// A key born before the window, never seen: refused by every form,
	// nothing written.
	stale := e.bornID(e.clock.Now().Add(-w - time.Minute))
	refused := e.refusedIn("a key born before the window", stale, "window-stale", ledger.ErrKeyExpired)
	if n := e.rowsOf(stale); n != 0 {
		e.t.Errorf("a key born before the window: %d ledger rows after the refusals; want none", n)
	}

	// A key whose entry committed, then the clock moved past the window:
	// refused, by claimants racing on it, never acquired again.
	born := e.bornID(e.clock.Now())
	key := "window-committed"
	res := resultFor(key, 0)
	e.mustWin(forms[0], "a fresh key", born, key, res)
	e.replaysIn("inside the window", born, key, res)
	e.clock.Advance(w + 2*time.Second)
	raced, claimants := e.raceExpired(born, key, forms)
	// Past the entry's retention too, and after a sweep deleted it.
	e.clock.Advance(s + time.Minute)
	refused += e.refusedIn("past the entry's retention", born, key, ledger.ErrKeyExpired)
	swept := e.sweepAll(born)
	if swept {
		refused += e.refusedIn("after a sweep deleted the entry", born, key, ledger.ErrKeyExpired)
	}
	runs := e.bizRows(key)
	if runs != 1 {
		e.t.Errorf("the committed key: %d business rows; want exactly 1 (the call ran %d times)", runs, runs)
	}
	note := "after a sweep deleted its entry"
	if !swept {
		note = "(no Sweep: the swept half skipped)"
	}
	e.figure("%s; forms %v: %d refusals with ErrKeyExpired of a key born before the window (nothing written) and of a committed key past the window, past its retention and %s; %d of %d claimants racing past the window refused; the committed call ran %d time(s)",
		e.windowNote(), forms, refused, note, raced, claimants, runs)
}

func caseWindowResolve(e *env) {
	r, s, _ := e.window()
	w := r - s
	forms := e.forms()
	// A key born before the window that the ledger never saw: expired, not
	// "not found" (which says running it again is safe).
	answered := e.lookupIs("of a key born before the window, never seen", e.bornID(e.clock.Now().Add(-w-time.Minute)), ledger.ErrKeyExpired)

	born := e.bornID(e.clock.Now())
	key := "window-resolve"
	res := resultFor(key, 0)
	e.mustWin(forms[0], "a fresh key", born, key, res)
	e.lookupResult("inside the window", born, res)
	e.clock.Advance(w + 2*time.Second)
	answered += e.lookupIs("past the window", born, ledger.ErrKeyExpired)
	e.clock.Advance(s + time.Minute)
	answered += e.lookupIs("past the entry's retention", born, ledger.ErrKeyExpired)
	asked := 3
	note := "after a sweep deleted the entry"
	if e.sweepAll(born) {
		answered += e.lookupIs("after a sweep deleted the entry", born, ledger.ErrKeyExpired)
		asked++
	} else {
		note = "(no Sweep: the swept half skipped)"
	}
	e.figure("%s: %d of %d lookups answered ErrKeyExpired (a key born before the window, never seen; a committed key past the window, past its retention, %s)", e.windowNote(), answered, asked, note)
}

func caseWindowFuture(e *env) {
	_, s, _ := e.window()
	now := e.clock.Now()
	ahead := e.bornID(now.Add(s + time.Minute))
	refused := e.refusedIn("a key born more than the skew ahead", ahead, "window-ahead", ledger.ErrInvalid)
	if n := e.rowsOf(ahead); n != 0 {
		e.t.Errorf("a key born more than the skew ahead: %d ledger rows after the refusals; want none", n)
	}
	refused += e.lookupIs("of a key born more than the skew ahead", ahead, ledger.ErrInvalid)

	near := e.bornID(now.Add(s / 2))
	key := "window-near"
	res := resultFor(key, 0)
	e.mustWin(e.forms()[0], "a key born within the skew ahead", near, key, res)
	replayed := e.replaysIn("a key born within the skew ahead", near, key, res)
	e.lookupResult("of a key born within the skew ahead", near, res)
	e.figure("skew %v: a key born %v ahead refused with ErrInvalid: %d of %d answers (every form and Lookup), nothing written; one born %v ahead acquired, replayed by %d of %d forms",
		s, s+time.Minute, refused, len(e.forms())+1, s/2, replayed, len(e.forms()))
}

func caseWindowUnknownBirth(e *env) {
	r, s, _ := e.window()
	w := r - s
	forms := e.forms()

	// A key without a readable birth: accepted, replayed inside the
	// retention; past it, taken over, as documented (ledger.WithRetention).
	plain := e.id("window-no-birth")
	if _, ok := plain.Birth(); ok {
		e.t.Fatalf("set-up: a plain key reads as one with a birth")
	}
	key := "window-no-birth"
	r1 := resultFor(key, 1)
	e.mustWin(forms[0], "a key without a birth", plain, key, r1)
	e.clock.Advance(r / 2)
	e.replaysIn("a key without a birth, inside the retention", plain, key, r1)
	e.lookupResult("of a key without a birth, inside the retention", plain, r1)
	e.clock.Advance(r/2 + time.Minute)
	e.lookupIs("of a key without a birth, past its retention", plain, ledger.ErrNotFound)
	r2 := resultFor(key, 2)
	e.mustWin(forms[0], "a key without a birth, past its retention (taken over)", plain, key, r2)
	e.replaysIn("a key without a birth, taken over", plain, key, r2)
	if n := e.bizRows(key); n != 2 {
		e.t.Errorf("a key without a birth: %d business rows; want 2 (run, then taken over past the retention)", n)
	}

	// The same kind of key sent with a first-sent time has a birth, which
	// is part of its identity: another first-sent time is another
	// operation; past the window it is refused.
	sent := e.clock.Now().Truncate(time.Second)
	base := e.id("window-first-sent")
	a, errA := base.WithFirstSent(sent)
	b, errB := base.WithFirstSent(sent.Add(time.Second))
	if err := errors.Join(errA, errB); err != nil {
		e.t.Fatalf("set-up: WithFirstSent: %v", err)
	}
	if got, ok := a.Birth(); !ok || !got.Equal(sent) {
		e.t.Fatalf("set-up: a key sent with its first-sent time: birth %v %v, want %v", got, ok, sent)
	}
	keyA, keyB := "window-first-sent-a", "window-first-sent-b"
	ra, rb := resultFor(keyA, 3), resultFor(keyB, 4)
	e.mustWin(forms[0], "a key sent with its first-sent time", a, keyA, ra)
	e.replaysIn("a key sent with its first-sent time", a, keyA, ra)
	e.mustWin(forms[0], "the same key sent with another first-sent time (another operation)", b, keyB, rb)
	e.lookupResult("of a key sent with its first-sent time", a, ra)
	e.lookupResult("of the same key with another first-sent time", b, rb)
	e.clock.Advance(w + 2*time.Second)
	refused := e.refusedIn("a key sent with its first-sent time, past the window", a, keyA, ledger.ErrKeyExpired)
	refused += e.lookupIs("of a key sent with its first-sent time, past the window", a, ledger.ErrKeyExpired)
	if n := e.bizRows(keyA); n != 1 {
		e.t.Errorf("a key sent with its first-sent time: %d business rows; want 1", n)
	}
	e.figure("%s: a key without a birth replayed inside the retention, taken over past it (2 runs, as documented); with a first-sent time it is one with a birth (another first-sent time: another operation), refused with ErrKeyExpired past the window: %d of %d answers (every form and Lookup)",
		e.windowNote(), refused, len(forms)+1)
}
