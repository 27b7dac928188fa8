package conformance

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"errors"
	"fmt"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/opledger/opledger/internal/conformancekit"
	opts "github.com/opledger/opledger/internal/options"
)

// DefaultConcurrency is how many claimants race on one key unless
// WithConcurrency says otherwise: size the pool for it and a few more.
const DefaultConcurrency = 32

// Option configures a run of the suite; the With functions build them.
// Giving the same option twice is an error.
type Option struct{ o opts.Option[options] }

type options struct {
	concurrency int
	keys        int
	cases       []string
	caseTimeout time.Duration
	progress    func(CaseResult)
}

func option(name string, f func(*options) error) Option { return Option{opts.New(name, f)} }

func newOptions(list []Option) (options, error) {
	o := options{concurrency: DefaultConcurrency, keys: conformancekit.DefaultKeys, caseTimeout: conformancekit.DefaultCaseTimeout}
	if err := opts.Apply(&o, list, func(x Option) opts.Option[options] { return x.o }); err != nil {
		return o, fmt.Errorf("conformance: %w", err)
	}
	return o, nil
}

// WithConcurrency sets how many claimants race on one key in herd,
// delete-race and sweep-under-load (default 32, at least 2). Cases that
// race fewer use min(their number, n): 16 for expiry and prior-read, 8 for
// no-poisoning, atomicity and faults, 4 for replay-fidelity;
// three-waiter-rollback always has two waiters.
func WithConcurrency(n int) Option {
	return option("WithConcurrency", func(o *options) error {
		if n < 2 {
			return fmt.Errorf("concurrency %d is under 2", n)
		}
		o.concurrency = n
		return nil
	})
}

// WithKeys sets how many keys the herd runs over (default 200, at least
// 1). The other herd-like cases use a fraction of it: a quarter for
// delete-race and sweep-under-load, an eighth for prior-read, a tenth (at
// most 20) for expiry, with a floor of 10 (5 for expiry). The herd
// dominates the suite's run time (docs/conformance.md, "Run times").
func WithKeys(n int) Option {
	return option("WithKeys", func(o *options) error {
		if n < 1 {
			return fmt.Errorf("keys %d is under 1", n)
		}
		o.keys = n
		return nil
	})
}

// WithCases runs only the named cases ([Cases] lists the names); an
// unknown name is an error.
func WithCases(names ...string) Option {
	return option("WithCases", func(o *options) error {
		known := map[string]bool{}
		for _, c := range caseList() {
			known[c.name] = true
		}
		for _, n := range names {
			if !known[strings.TrimSpace(n)] {
				return fmt.Errorf("unknown case %q", n)
			}
			o.cases = append(o.cases, strings.TrimSpace(n))
		}
		return nil
	})
}

// WithCaseTimeout bounds each case (default 2 minutes); a case still
// running then fails with its context cancelled.
func WithCaseTimeout(d time.Duration) Option {
	return option("WithCaseTimeout", func(o *options) error {
		if d <= 0 {
			return fmt.Errorf("case timeout %v is not positive", d)
		}
		o.caseTimeout = d
		return nil
	})
}

// WithProgress has Check call f with each case's result as soon as the
// case ends (f runs on Check's goroutine), for tools that print as they
// go. Run ignores it.
func WithProgress(f func(CaseResult)) Option {
	return option("WithProgress", func(o *options) error {
		if f == nil {
			return fmt.Errorf("nil progress function")
		}
		o.progress = f
		return nil
	})
}

// Verdict is a case's outcome.
type Verdict string

// Verdicts.
const (
	Pass Verdict = "pass"
	Fail Verdict = "fail"
	Skip Verdict = "skip"
)

// CaseResult is one case (at one isolation level) in a Report.
type CaseResult struct {
	// Name is the case name, followed by "/" and the isolation level for
	// cases run at every level: "herd/read_committed".
	Name string
	// Case is the case name alone: "herd".
	Case string
	// Level is the isolation level's name, or "" for a single-level case
	// run at the target's default.
	Level string
	// Verdict is pass, fail or skip.
	Verdict Verdict
	// Duration is how long the case took, set-up included.
	Duration time.Duration
	// Figures summarise what happened: "32 claimants × 100 keys: 100
	// acquired, 3100 replayed, 0 duplicates, 5 retried, 0 failed".
	Figures string
	// Messages are the failures (or the skip reason) and notes.
	Messages []string
}

// Report is what Check returns.
type Report struct {
	// Target is the target's name; Dialect its dialect's.
	Target, Dialect string
	// Concurrency and Keys are the options the suite ran with.
	Concurrency, Keys int
	// Duration is the whole run's.
	Duration time.Duration
	// Results has one entry per case and level, in order.
	Results []CaseResult
}

// Failed reports whether any case failed.
func (r Report) Failed() bool {
	for _, res := range r.Results {
		if res.Verdict == Fail {
			return true
		}
	}
	return false
}

// Failures returns the names of the failed cases, in order.
func (r Report) Failures() []string {
	var out []string
	for _, res := range r.Results {
		if res.Verdict == Fail {
			out = append(out, res.Name)
		}
	}
	return out
}

// CaseInfo describes one case.
type CaseInfo struct {
	// Name is the case's name, as used in WithCases and in results.
	Name string
	// Proves says what a pass shows.
	Proves string
	// PerLevel means the case runs once at every isolation level the
	// target offers.
	PerLevel bool
}

// Cases lists the suite's cases in the order they run.
func Cases() []CaseInfo {
	all := caseList()
	out := make([]CaseInfo, len(all))
	for i, c := range all {
		out[i] = CaseInfo{Name: c.name, Proves: c.proves, PerLevel: c.perLevel}
	}
	return out
}

// testingT is what the cases need of a test; *testing.T and the report
// recorder both provide it.
type testingT interface {
	Helper()
	Errorf(format string, args ...any)
	Fatalf(format string, args ...any)
	Skipf(format string, args ...any)
	Logf(format string, args ...any)
	Cleanup(func())
	Failed() bool
}

type caseDef struct {
	name     string
	proves   string
	perLevel bool
	// levels, when set, filters the levels a per-level case runs at and
	// gives the reason when none remain.
	levels func([]sql.IsolationLevel) ([]sql.IsolationLevel, string)
	// firstOnly, when set, says why the case applies to the claim-first
	// order only: a claim-at-commit target skips it with this reason.
	firstOnly string
	// notPipelined, when set, says why the case does not apply to the
	// pipelined claim-first form: a pipelined claim-first target skips it
	// with this reason.
	notPipelined string
	run          func(e *env)
}

// instance is one case at one level.
type instance struct {
	def   *caseDef
	name  string
	level sql.IsolationLevel
	skip  string
}

func instances(tg *Target, o options) []instance {
	want := map[string]bool{}
	for _, n := range o.cases {
		want[strings.TrimSpace(n)] = true
	}
	var out []instance
	all := caseList()
	for i := range all {
		c := &all[i]
		if len(want) > 0 && !want[c.name] {
			continue
		}
		lv := tg.levels()
		if tg.Order == ClaimAtCommit && c.firstOnly != "" {
			out = append(out, instance{def: c, name: c.name, skip: "claim first only: " + c.firstOnly})
			continue
		}
		if tg.pipelined && tg.Order == ClaimFirst && c.notPipelined != "" {
			out = append(out, instance{def: c, name: c.name, skip: "not pipelined claim first: " + c.notPipelined})
			continue
		}
		if !c.perLevel {
			out = append(out, instance{def: c, name: c.name, level: lv[0]})
			continue
		}
		skip := ""
		if c.levels != nil {
			lv, skip = c.levels(lv)
		}
		if len(lv) == 0 {
			out = append(out, instance{def: c, name: c.name, skip: skip})
			continue
		}
		for _, l := range lv {
			out = append(out, instance{def: c, name: c.name + "/" + levelName(l), level: l})
		}
	}
	return out
}

func levelName(l sql.IsolationLevel) string {
	return strings.ReplaceAll(strings.ToLower(l.String()), " ", "_")
}

// Run runs every case against the target, each as a subtest of t (cases
// run at every isolation level get a subtest per level). A case whose
// capability the target lacks skips with the reason.
func Run(t *testing.T, tg Target, list ...Option) {
	t.Helper()
	if err := tg.validate(); err != nil {
		t.Fatal(err)
	}
	o, err := newOptions(list)
	if err != nil {
		t.Fatal(err)
	}
	if err := tg.probe(t.Context()); err != nil {
		t.Fatalf("conformance: %v", err)
	}
	for _, in := range instances(&tg, o) {
		t.Run(in.name, func(t *testing.T) {
			if in.skip != "" {
				t.Skip(in.skip)
			}
			ctx, cancel := context.WithTimeout(t.Context(), o.caseTimeout)
			defer cancel()
			e := newEnv(ctx, t, &tg, o, in)
			if e == nil {
				return
			}
			in.def.run(e)
			if f := e.figures(); f != "" {
				t.Log(f)
			}
		})
	}
}

// Check runs the suite like Run, but reports instead of failing a test:
// each case's verdict, duration, figures and messages. An invalid target
// gives a report with one failed "target" result. ctx bounds the whole
// run.
func Check(ctx context.Context, tg Target, list ...Option) Report {
	o, oerr := newOptions(list)
	rep := Report{Target: tg.Name, Concurrency: o.concurrency, Keys: o.keys}
	if tg.Dialect != nil {
		rep.Dialect = tg.Dialect.Name()
	}
	start := time.Now()
	if err := errors.Join(oerr, tg.validate()); err != nil {
		rep.Results = append(rep.Results, CaseResult{Name: "target", Case: "target", Verdict: Fail, Messages: []string{err.Error()}})
		return rep
	}
	if err := tg.probe(ctx); err != nil {
		rep.Results = append(rep.Results, CaseResult{Name: "target", Case: "target", Verdict: Fail, Messages: []string{err.Error()}})
		rep.Duration = time.Since(start)
		return rep
	}
	for _, in := range instances(&tg, o) {
		res := checkCase(ctx, &tg, o, in)
		rep.Results = append(rep.Results, res)
		if o.progress != nil {
			o.progress(res)
		}
	}
	rep.Duration = time.Since(start)
	return rep
}

// checkCase runs one case instance for Check, recording instead of
// failing, within the case timeout.
func checkCase(ctx context.Context, tg *Target, o options, in instance) CaseResult {
	res := CaseResult{Name: in.name, Case: in.def.name}
	if in.def.perLevel && in.skip == "" {
		res.Level = levelName(in.level)
	}
	if in.skip != "" {
		res.Verdict, res.Messages = Skip, []string{in.skip}
		return res
	}
	r := &recorder{}
	t0 := time.Now()
	var figures string
	r.run(func() {
		cctx, cancel := context.WithTimeout(ctx, o.caseTimeout)
		r.Cleanup(cancel)
		e := newEnv(cctx, r, tg, o, in)
		if e == nil {
			return
		}
		defer func() { figures = e.figures() }()
		in.def.run(e)
	})
	res.Duration = time.Since(t0)
	res.Figures = figures
	res.Messages = r.messages()
	switch {
	case r.Failed():
		res.Verdict = Fail
	case r.skipped:
		res.Verdict = Skip
	default:
		res.Verdict = Pass
	}
	return res
}

// recorder is the testingT of Check: it records instead of failing.
type recorder struct {
	mu       sync.Mutex
	failed   bool
	skipped  bool
	msgs     []string
	cleanups []func()
}

// run runs f on its own goroutine (so that Fatalf and Skipf can end it
// with runtime.Goexit, as the testing package does), then the cleanups in
// reverse order. A panic fails the case.
func (r *recorder) run(f func()) {
	done := make(chan struct{})
	go func() {
		defer close(done)
		defer func() {
			if p := recover(); p != nil {
				r.Errorf("panic: %v", p)
			}
		}()
		f()
	}()
	<-done
	for {
		r.mu.Lock()
		n := len(r.cleanups)
		if n == 0 {
			r.mu.Unlock()
			return
		}
		c := r.cleanups[n-1]
		r.cleanups = r.cleanups[:n-1]
		r.mu.Unlock()
		func() {
			defer func() {
				if p := recover(); p != nil {
					r.Errorf("panic in cleanup: %v", p)
				}
			}()
			c()
		}()
	}
}

func (r *recorder) Helper() {}

func (r *recorder) Errorf(format string, args ...any) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.failed = true
	r.msgs = append(r.msgs, fmt.Sprintf(format, args...))
}

func (r *recorder) Fatalf(format string, args ...any) {
	r.Errorf(format, args...)
	runtime.Goexit()
}

func (r *recorder) Skipf(format string, args ...any) {
	r.mu.Lock()
	r.skipped = true
	r.msgs = append(r.msgs, fmt.Sprintf(format, args...))
	r.mu.Unlock()
	runtime.Goexit()
}

func (r *recorder) Logf(format string, args ...any) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.msgs = append(r.msgs, fmt.Sprintf(format, args...))
}

func (r *recorder) Cleanup(f func()) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.cleanups = append(r.cleanups, f)
}

func (r *recorder) Failed() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.failed
}

func (r *recorder) messages() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string(nil), r.msgs...)
}

func uniqueTable() string {
	var b [5]byte
	_, _ = rand.Read(b[:])
	return "opl_conf_" + hex.EncodeToString(b[:])
}
