package conformance

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/opledger/opledger/dialects"
	"github.com/opledger/opledger/internal/conformancekit"
	"github.com/opledger/opledger/internal/ledgerkit"
	"github.com/opledger/opledger/ledger"
)

// Names the suite claims under.
const (
	suiteCaller   = "opledger-conformance"
	suiteMethod   = "/opledger.conformance.v1.Suite/Mutate"
	suiteType     = "opledger.conformance.v1.Result"
	retention     = time.Hour
	maxAttempts   = 40
	leakWait      = 3 * time.Second
	teardownLimit = 30 * time.Second
)

// clock is a controllable clock: real time plus an offset.
type clock struct{ off atomic.Int64 }

func (c *clock) Now() time.Time          { return time.Now().Add(time.Duration(c.off.Load())) }
func (c *clock) Advance(d time.Duration) { c.off.Add(int64(d)) }

// env is one case's world: a scratch ledger table, a business table, the
// ledger under test and a clock.
type env struct {
	t     testingT
	ctx   context.Context
	tg    *Target
	o     options
	d     dialects.Dialect
	db    *sql.DB
	level sql.IsolationLevel
	conc  int
	table string
	biz   string // quoted
	clock *clock
	l     safeLedger
	api   txAPI
	// atCommit: the units run claim at commit (Target.Order).
	atCommit bool
	// pipelined: the units run through the ledger's pipelined forms
	// (Target.Pipelined), pipe.
	pipelined bool
	pipe      safePipeline

	figMu sync.Mutex
	figs  []string
}

// newEnv sets up a case: scratch tables (dropped in cleanup), the ledger,
// and a check that no connection is left in use when the case ends. It
// returns nil when set-up failed (the case has been failed).
func newEnv(ctx context.Context, t testingT, tg *Target, o options, in instance) *env {
	t.Helper()
	e := &env{t: t, ctx: ctx, tg: tg, o: o, d: tg.Dialect, db: tg.DB, level: in.level, conc: o.concurrency, clock: &clock{},
		atCommit: tg.Order == ClaimAtCommit, pipelined: tg.pipelined, api: tg.theAPI()}
	inUse := func() int { return tg.DB.Stats().InUse }
	maxConns := tg.DB.Stats().MaxOpenConnections
	if p, ok := e.api.Pool(); ok {
		inUse = func() int { n, _ := p.PoolStats(); return n }
		_, maxConns = p.PoolStats()
	}
	if max := maxConns; max > 0 && e.conc > max-2 {
		e.conc = max - 2
		if e.conc < 2 {
			t.Fatalf("the pool allows %d connections; the suite needs at least 4", max)
		}
		t.Logf("concurrency lowered to %d: the pool allows %d connections", e.conc, max)
	}
	baseline := inUse()
	t.Cleanup(func() {
		deadline := time.Now().Add(leakWait)
		for {
			n := inUse()
			if n <= baseline {
				return
			}
			if time.Now().After(deadline) {
				t.Errorf("leak: %d connections in use when the case ended, %d before it (a transaction or rows were not closed)", n, baseline)
				return
			}
			time.Sleep(10 * time.Millisecond)
		}
	})
	e.scratch(tg)
	e.l = e.newLedger(e.clock.Now)
	return e
}

// scratch creates the case's scratch tables, the ledger's (by the
// target's Setup or the dialect's migrations) and the business table,
// and registers their teardown.
func (e *env) scratch(tg *Target) {
	e.t.Helper()
	e.table = uniqueTable()
	teardown, err := tg.setup(e.ctx, e.table)
	if err != nil {
		e.t.Fatalf("set-up: create scratch table %s: %v", e.table, err)
	}
	e.t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.WithoutCancel(e.ctx), teardownLimit)
		defer cancel()
		// Empty the table first: the Down of a partitioned table moves its
		// entries into an unpartitioned one keyed by id alone, which a
		// broken ledger's two entries of one key (born_at 0 and its birth)
		// made fail half-way, leaving the scratch tables behind. An error
		// here is the teardown's to report.
		_, _ = e.db.ExecContext(ctx, "DELETE FROM "+e.d.QuoteIdent(e.table))
		if err := teardown(ctx); err != nil {
			e.t.Errorf("teardown: drop scratch table %s: %v", e.table, err)
		}
	})
	e.biz = e.d.QuoteIdent(e.table + "_biz")
	if _, err := e.db.ExecContext(e.ctx, "CREATE TABLE "+e.biz+" (k VARCHAR(255) NOT NULL, worker INTEGER NOT NULL)"); err != nil {
		e.t.Fatalf("set-up: create business table: %v", err)
	}
	e.t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.WithoutCancel(e.ctx), teardownLimit)
		defer cancel()
		if _, err := e.db.ExecContext(ctx, "DROP TABLE "+e.biz); err != nil {
			e.t.Errorf("teardown: drop business table: %v", err)
		}
	})
}

// newLedger constructs the ledger under test on the case's table.
func (e *env) newLedger(now func() time.Time) safeLedger {
	e.t.Helper()
	l, err := e.api.NewLedger(conformancekit.LedgerConfig{Table: e.table, Retention: retention, Clock: now, MaxResultSize: e.maxResult()}, e.db)
	if err != nil {
		e.t.Fatalf("set-up: construct the ledger: %v", err)
	}
	sl := safeLedger{l}
	if sl.Dialect() == nil {
		e.t.Fatalf("set-up: the ledger's Dialect returned nil")
	}
	if e.atCommit && !sl.recorder() {
		e.t.Fatalf("set-up: %v", conformancekit.ErrNoRecorder)
	}
	if e.pipelined {
		p, ok := sl.pipeline()
		if !ok {
			e.t.Fatalf("set-up: a pipelined target's ledger must have the pipelined forms (BeginClaim, BeginAt, CompleteCommit, RecordCommit)")
		}
		if e.pipe.p == nil {
			e.pipe = p
		}
	}
	return sl
}

func (e *env) maxResult() int { return ledgerkit.DefaultMaxResultSize }

// figure records a summary line for the report.
func (e *env) figure(format string, args ...any) {
	e.figMu.Lock()
	defer e.figMu.Unlock()
	e.figs = append(e.figs, fmt.Sprintf(format, args...))
}

func (e *env) figures() string {
	e.figMu.Lock()
	defer e.figMu.Unlock()
	return strings.Join(e.figs, "; ")
}

// ph returns the n-th placeholder.
func (e *env) ph(n int) string { return e.d.Placeholder(n) }

func (e *env) id(key string) ledger.Identity {
	id, err := ledger.NewIdentity(suiteCaller, suiteMethod, key)
	if err != nil {
		panic(err) // keys are the suite's own, always valid
	}
	return id
}

func fpOf(key string) ledger.Fingerprint { return ledger.FingerprintOf([]byte("request for " + key)) }

func (e *env) req(key string) ledger.ClaimRequest {
	return ledger.ClaimRequest{Identity: e.id(key), Fingerprint: fpOf(key)}
}

// resultFor is what worker stores when it acquires key.
func resultFor(key string, worker int) ledger.Result {
	return ledger.Result{Code: uint32(worker%16 + 1), Response: []byte(fmt.Sprintf("%s done by worker %d", key, worker)), TypeName: suiteType}
}

func sameResult(a, b ledger.Result) bool {
	return a.Code == b.Code && a.TypeName == b.TypeName && string(a.Response) == string(b.Response)
}

func (e *env) begin(ctx context.Context) (unitTx, error) {
	return e.beginAt(ctx, e.level)
}

// beginAt begins a transaction of the target's API at level.
func (e *env) beginAt(ctx context.Context, level sql.IsolationLevel) (unitTx, error) {
	return e.api.Begin(ctx, e.db, level)
}

func (e *env) writeBiz(ctx context.Context, tx unitTx, key string, worker int) error {
	return e.api.Exec(ctx, tx, "INSERT INTO "+e.biz+" (k, worker) VALUES ("+e.ph(1)+", "+e.ph(2)+")", key, worker)
}

// readBiz reads in tx (a statement before the claim: it takes the
// snapshot at snapshot levels).
func (e *env) readBiz(ctx context.Context, tx unitTx) error {
	_, err := e.api.Count(ctx, tx, "SELECT COUNT(*) FROM "+e.biz)
	return err
}

func (e *env) count(query string, args ...any) int {
	e.t.Helper()
	var n int
	if err := e.db.QueryRowContext(e.ctx, query, args...).Scan(&n); err != nil {
		e.t.Fatalf("count: %v", err)
	}
	return n
}

func (e *env) bizRows(key string) int {
	return e.count("SELECT COUNT(*) FROM "+e.biz+" WHERE k = "+e.ph(1), key)
}

func (e *env) ledgerRows() int {
	return e.count("SELECT COUNT(*) FROM " + e.d.QuoteIdent(e.table))
}

// retryable reports whether err asks for the whole transaction to be
// retried.
func (e *env) retryable(err error) bool {
	return errors.Is(err, ledger.ErrRetryable) || e.d.Classify(err).Retryable()
}

// outcome is what one claimant ended with.
type outcome struct {
	acquired bool
	result   ledger.Result // stored (acquired) or replayed
	retries  int
	err      error
	// started is when the claimant began; firstDone is when its first
	// attempt's claim returned.
	started   time.Time
	firstDone time.Time
	firstErr  error
}

// mutate is one claimant's unit of work at the case's level: optionally
// read first, claim, and on acquisition write the business row and
// Complete; on replay write a marker row (proving the transaction is still
// usable) and commit. A retryable failure retries the whole transaction.
func (e *env) mutate(ctx context.Context, l safeLedger, key string, worker int, priorRead bool) outcome {
	out := outcome{started: time.Now()}
	for attempt := 0; ; attempt++ {
		if attempt > 0 {
			out.retries++
			sleep(ctx, time.Duration(1+rand.IntN(2*attempt+1))*time.Millisecond)
		}
		acquired, res, err := e.attempt(ctx, l, key, worker, priorRead, func(err error) {
			if attempt == 0 {
				out.firstDone, out.firstErr = time.Now(), err
			}
		})
		if err == nil {
			out.acquired, out.result = acquired, res
			return out
		}
		if !e.retryable(err) || attempt+1 >= maxAttempts || ctx.Err() != nil {
			out.err = err
			return out
		}
	}
}

func (e *env) attempt(ctx context.Context, l safeLedger, key string, worker int, priorRead bool, claimed func(error)) (bool, ledger.Result, error) {
	if e.pipelined && !e.atCommit {
		return e.attemptPipelined(ctx, l, key, worker, claimed)
	}
	var tx unitTx
	var err error
	if e.pipelined {
		tx, err = e.pipeOf(l).BeginAt(ctx, e.level)
	} else {
		tx, err = e.begin(ctx)
	}
	if err != nil {
		claimed(err)
		return false, ledger.Result{}, err
	}
	defer tx.Rollback()
	if priorRead {
		if err := e.readBiz(ctx, tx); err != nil {
			claimed(err)
			return false, ledger.Result{}, fmt.Errorf("prior read: %w", err)
		}
	}
	if e.atCommit {
		return e.attemptAtCommit(ctx, l, tx, key, worker, claimed)
	}
	c, err := claim(ctx, l, tx, e.req(key))
	claimed(err)
	if err != nil {
		return false, ledger.Result{}, err
	}
	var res ledger.Result
	switch c.Outcome {
	case ledger.Acquired:
		if err := e.writeBiz(ctx, tx, key, worker); err != nil {
			return false, res, fmt.Errorf("business write after acquiring: %w", err)
		}
		res = resultFor(key, worker)
		if err := l.Complete(ctx, tx, c, res); err != nil {
			return false, res, fmt.Errorf("complete: %w", err)
		}
	case ledger.Replay:
		res = c.Result
		if err := e.writeBiz(ctx, tx, key+"#replayed", worker); err != nil {
			return false, res, fmt.Errorf("write after a replay (the transaction is poisoned): %w", err)
		}
	default:
		return false, res, fmt.Errorf("Claim returned outcome %v", c.Outcome)
	}
	if err := tx.Commit(); err != nil {
		return false, res, fmt.Errorf("commit: %w", err)
	}
	return c.Outcome == ledger.Acquired, res, nil
}

// attemptPipelined is attempt's pipelined claim-first unit: BEGIN with
// the claim, on acquisition the business write, then the completion with
// COMMIT; a replay's transaction has ended with the claim's read-back.
func (e *env) attemptPipelined(ctx context.Context, l safeLedger, key string, worker int, claimed func(error)) (bool, ledger.Result, error) {
	p := e.pipeOf(l)
	tx, c, err := p.BeginClaim(ctx, e.level, e.req(key))
	claimed(err)
	if err != nil {
		return false, ledger.Result{}, err
	}
	switch c.Outcome {
	case ledger.Acquired:
		if err := e.writeBiz(ctx, tx, key, worker); err != nil {
			tx.Rollback()
			return false, ledger.Result{}, fmt.Errorf("business write after acquiring: %w", err)
		}
		res := resultFor(key, worker)
		if err := p.CompleteCommit(ctx, tx, c, res); err != nil {
			return false, res, fmt.Errorf("complete and commit: %w", err)
		}
		return true, res, nil
	case ledger.Replay:
		return false, c.Result, nil
	}
	return false, ledger.Result{}, fmt.Errorf("BeginClaim returned outcome %v", c.Outcome)
}

// pipeOf returns the pipelined forms of l (e.l's, or another ledger's on
// the case's table).
func (e *env) pipeOf(l safeLedger) safePipeline {
	if p, ok := l.pipeline(); ok {
		return p
	}
	return e.pipe
}

// attemptAtCommit is attempt's claim-at-commit unit: the business write,
// then Record as the last statement; commit when it recorded, roll back
// on a replay (the business write must not survive it). Pipelined, the
// record is sent with COMMIT and ends the transaction either way.
func (e *env) attemptAtCommit(ctx context.Context, l safeLedger, tx unitTx, key string, worker int, claimed func(error)) (bool, ledger.Result, error) {
	if err := e.writeBiz(ctx, tx, key, worker); err != nil {
		claimed(err)
		return false, ledger.Result{}, fmt.Errorf("business write before recording: %w", err)
	}
	res := resultFor(key, worker)
	if e.pipelined {
		c, err := e.pipeOf(l).RecordCommit(ctx, tx, e.req(key), res)
		claimed(err)
		switch {
		case err != nil:
			return false, ledger.Result{}, err
		case c.Outcome == ledger.Recorded:
			return true, res, nil
		case c.Outcome == ledger.Replay:
			return false, c.Result, nil
		}
		return false, res, fmt.Errorf("RecordCommit returned outcome %v", c.Outcome)
	}
	c, err := record(ctx, l, tx, e.req(key), res)
	claimed(err)
	if err != nil {
		return false, ledger.Result{}, err
	}
	switch c.Outcome {
	case ledger.Recorded:
		if err := tx.Commit(); err != nil {
			return false, res, fmt.Errorf("commit: %w", err)
		}
		return true, res, nil
	case ledger.Replay:
		if err := tx.Rollback(); err != nil {
			return false, c.Result, fmt.Errorf("rollback after a replay: %w", err)
		}
		return false, c.Result, nil
	}
	return false, res, fmt.Errorf("Record returned outcome %v", c.Outcome)
}

// record calls Record on l.
func record(ctx context.Context, l safeLedger, tx unitTx, req ledger.ClaimRequest, r ledger.Result) (*ledger.Claim, error) {
	return l.Record(ctx, tx, req, r)
}

// unitStep is the ledger's part of one unit of work in tx, in the
// target's order: claim first, on acquisition the business write of key
// (when key is not empty) and Complete with r; at commit, the business
// write, then Record with r. The caller ends tx: commit when won (the
// claim was Acquired or Recorded), else roll back. It never pipelines
// (see runUnit).
func (e *env) unitStep(ctx context.Context, tx unitTx, req ledger.ClaimRequest, key string, worker int, r ledger.Result) (c *ledger.Claim, won bool, err error) {
	if e.atCommit {
		if key != "" {
			if err := e.writeBiz(ctx, tx, key, worker); err != nil {
				return nil, false, fmt.Errorf("business write: %w", err)
			}
		}
		c, err := record(ctx, e.l, tx, req, r)
		if err != nil {
			return nil, false, err
		}
		return c, c.Outcome == ledger.Recorded, nil
	}
	c, err = claim(ctx, e.l, tx, req)
	if err != nil || !c.Acquired() {
		return c, false, err
	}
	if key != "" {
		if err := e.writeBiz(ctx, tx, key, worker); err != nil {
			return nil, false, fmt.Errorf("business write: %w", err)
		}
	}
	if err := e.l.Complete(ctx, tx, c, r); err != nil {
		return nil, false, fmt.Errorf("complete: %w", err)
	}
	return c, true, nil
}

// runUnit runs one whole unit of work for req at level in the target's
// order and form, as unitStep does, and ends it: with commit set it
// commits when the unit won (rolls back otherwise), without it it rolls
// back. Pipelined, the claim is sent with BEGIN and the completion with
// COMMIT; at commit the record is always sent with COMMIT (a unit that
// records commits).
func (e *env) runUnit(ctx context.Context, level sql.IsolationLevel, req ledger.ClaimRequest, key string, worker int, r ledger.Result, commit bool) (*ledger.Claim, bool, error) {
	if !e.pipelined {
		tx, err := e.beginAt(ctx, level)
		if err != nil {
			return nil, false, err
		}
		defer tx.Rollback()
		c, won, err := e.unitStep(ctx, tx, req, key, worker, r)
		if err != nil || !won || !commit {
			return c, won, err
		}
		return c, won, tx.Commit()
	}
	if e.atCommit {
		tx, err := e.pipe.BeginAt(ctx, level)
		if err != nil {
			return nil, false, err
		}
		defer tx.Rollback()
		if key != "" {
			if err := e.writeBiz(ctx, tx, key, worker); err != nil {
				return nil, false, fmt.Errorf("business write: %w", err)
			}
		}
		c, err := e.pipe.RecordCommit(ctx, tx, req, r)
		if err != nil {
			return nil, false, err
		}
		return c, c.Outcome == ledger.Recorded, nil
	}
	tx, c, err := e.pipe.BeginClaim(ctx, level, req)
	if err != nil || !c.Acquired() {
		return c, false, err
	}
	if key != "" {
		if err := e.writeBiz(ctx, tx, key, worker); err != nil {
			tx.Rollback()
			return nil, false, fmt.Errorf("business write: %w", err)
		}
	}
	if !commit {
		return c, true, tx.Rollback()
	}
	if err := e.pipe.CompleteCommit(ctx, tx, c, r); err != nil {
		return nil, false, fmt.Errorf("complete and commit: %w", err)
	}
	return c, true, nil
}

// won reports whether c is this transaction's: acquired or recorded.
func won(c *ledger.Claim) bool {
	return c != nil && (c.Outcome == ledger.Acquired || c.Outcome == ledger.Recorded)
}

// errNoClaim is what the suite makes of a ledger returning neither a
// claim nor an error.
var errNoClaim = errors.New("Claim returned neither a claim nor an error")

// claim calls l.Claim and turns a nil claim without an error into an
// error, so that no case dereferences it.
func claim(ctx context.Context, l safeLedger, tx unitTx, req ledger.ClaimRequest) (*ledger.Claim, error) {
	c, err := l.Claim(ctx, tx, req)
	if err == nil && c == nil {
		return nil, errNoClaim
	}
	return c, err
}

func sleep(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}

// tally counts outcomes over a run of herds.
type tally struct {
	acquired, replayed, retried, duplicates, failed int
}

func (t tally) String() string {
	return fmt.Sprintf("%d acquired, %d replayed, %d duplicates, %d retried, %d failed", t.acquired, t.replayed, t.duplicates, t.retried, t.failed)
}

// herdOpts shapes one herd.
type herdOpts struct {
	l         safeLedger
	claimants int
	priorRead bool
	// before runs (on the case goroutine) before the claimants of a key
	// are released.
	before func(key string)
	// jitter, when set, delays each claimant by up to this much after the
	// release, spreading the claims over the window of a concurrent sweep.
	jitter time.Duration
	// forbidden, when set, is a result no claimant may replay.
	forbidden func(key string) (ledger.Result, bool)
}

// herd races h.claimants claimants on key, all released together, and
// checks: exactly one acquires, every other replays its result
// byte-for-byte, one business row. Failures are reported on e.t.
func (e *env) herd(key string, h herdOpts) tally {
	e.t.Helper()
	if h.before != nil {
		h.before(key)
	}
	outs := e.race(key, h)
	tl := e.judge(key, h, outs)
	if tl.acquired > 1 {
		tl.duplicates += tl.acquired - 1
		e.t.Errorf("key %s: %d claimants acquired; want exactly 1", key, tl.acquired)
	}
	if tl.acquired == 0 && tl.failed == 0 {
		e.t.Errorf("key %s: nobody acquired", key)
	}
	if n := e.bizRows(key); n != 1 && tl.failed == 0 || n > 1 {
		if n > 1 {
			tl.duplicates += n - 1
		}
		e.t.Errorf("key %s: %d business rows; want exactly 1 (the mutation ran %d times)", key, n, n)
	}
	if n := e.bizRows(key + "#replayed"); n != tl.replayed && !e.atCommit && !e.pipelined {
		e.t.Errorf("key %s: %d rows written after replays, want %d (a replaying transaction did not commit its other writes)", key, n, tl.replayed)
	}
	return tl
}

// race releases h.claimants claimants on key at once and returns their
// outcomes, in claimant order.
func (e *env) race(key string, h herdOpts) []outcome {
	var (
		start = make(chan struct{})
		outs  = make([]outcome, h.claimants)
		wg    sync.WaitGroup
	)
	for w := range h.claimants {
		wg.Add(1)
		go func() {
			defer wg.Done()
			select {
			case <-start:
			case <-e.ctx.Done():
				outs[w].err = e.ctx.Err()
				return
			}
			if h.jitter > 0 {
				sleep(e.ctx, rand.N(h.jitter))
			}
			outs[w] = e.mutate(e.ctx, h.l, key, w, h.priorRead)
		}()
	}
	close(start)
	wg.Wait()
	return outs
}

// judge counts a herd's outcomes and reports each claimant's that is
// wrong: a failure, a replay of nothing, of the forbidden result or of
// another result than the winner's.
func (e *env) judge(key string, h herdOpts, outs []outcome) tally {
	var tl tally
	var winner *ledger.Result
	for w := range outs {
		if outs[w].acquired {
			tl.acquired++
			if winner == nil {
				winner = &outs[w].result
			}
		}
	}
	for w, o := range outs {
		tl.retried += o.retries
		switch {
		case o.err != nil:
			tl.failed++
			e.t.Errorf("key %s, claimant %d: %v (after %d retries)", key, w, o.err, o.retries)
		case o.acquired:
		default:
			tl.replayed++
			if h.forbidden != nil {
				if bad, ok := h.forbidden(key); ok && sameResult(o.result, bad) {
					e.t.Errorf("key %s, claimant %d: replayed the expired entry's result %q", key, w, o.result.Response)
					continue
				}
			}
			if winner == nil {
				e.t.Errorf("key %s, claimant %d: replay of %q but nobody acquired (a replay of nothing)", key, w, o.result.Response)
			} else if !sameResult(o.result, *winner) {
				e.t.Errorf("key %s, claimant %d: replayed code %d %q type %q, want the winner's code %d %q type %q",
					key, w, o.result.Code, o.result.Response, o.result.TypeName, winner.Code, winner.Response, winner.TypeName)
			}
		}
	}
	return tl
}

// herds runs a herd over keys keys named prefix-0…, stopping early after
// too many failed keys, and returns the sum.
func (e *env) herds(prefix string, keys int, h herdOpts) tally {
	e.t.Helper()
	var sum tally
	for k := range keys {
		tl := e.herd(fmt.Sprintf("%s-%d", prefix, k), h)
		sum.acquired += tl.acquired
		sum.replayed += tl.replayed
		sum.retried += tl.retried
		sum.duplicates += tl.duplicates
		sum.failed += tl.failed
		if e.t.Failed() && k >= 2 || e.ctx.Err() != nil {
			e.t.Logf("stopped after %d of %d keys", k+1, keys)
			break
		}
	}
	return sum
}

// claimOnce claims key and completes it with r in its own committed unit
// of work, through l (pipelined for a pipelined target).
func (e *env) claimOnce(l safeLedger, key string, r ledger.Result) error {
	if e.pipelined {
		p := e.pipeOf(l)
		tx, c, err := p.BeginClaim(e.ctx, sql.LevelDefault, e.req(key))
		if err != nil {
			return err
		}
		if !c.Acquired() {
			return fmt.Errorf("claim of a fresh key %s: outcome %v, want acquired", key, c.Outcome)
		}
		return p.CompleteCommit(e.ctx, tx, c, r)
	}
	tx, err := e.beginAt(e.ctx, sql.LevelDefault)
	if err != nil {
		return err
	}
	defer tx.Rollback()
	c, err := claim(e.ctx, l, tx, e.req(key))
	if err != nil {
		return err
	}
	if !c.Acquired() {
		return fmt.Errorf("claim of a fresh key %s: outcome %v, want acquired", key, c.Outcome)
	}
	if err := l.Complete(e.ctx, tx, c, r); err != nil {
		return err
	}
	return tx.Commit()
}

// lookup returns the committed entry for key.
func (e *env) lookup(key string) (*ledger.Entry, error) {
	return e.l.Lookup(e.ctx, e.id(key))
}

// keysFrac is the key count for a secondary herd-like case: keys/div,
// at least floor.
func (e *env) keysFrac(div, floor int) int {
	return max(e.o.keys/div, floor)
}

func minInt(a, b int) int {
	if a < b {
		return a
	}
	return b
}
