package keyedcore

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/attribute"

	"github.com/opledger/opledger/dialects"
	"github.com/opledger/opledger/internal/keybirth"
	"github.com/opledger/opledger/internal/keyedtx"
	"github.com/opledger/opledger/internal/telemetry"
	"github.com/opledger/opledger/internal/txledger"
	"github.com/opledger/opledger/keyed"
	"github.com/opledger/opledger/ledger"
	"github.com/opledger/opledger/policy"
	"github.com/opledger/opledger/txmiddleware"
)

// ErrResponseTooLarge is what a transport's work returns (wrapped) when
// the handler wrote more than the transport's response limit: the call
// ends with [ResponseTooLarge], rolled back.
var ErrResponseTooLarge = errors.New("keyed: response over the transport's limit")

// ServerConfig configures a [Server]: what the transport decides.
type ServerConfig struct {
	// Codec decides which errors of the work are final, recorded and
	// replayed (txmiddleware.WithErrorCodec); nil: none is.
	Codec txmiddleware.ErrorCodec
	// TxOptions are the runner options the transport's user gave
	// (isolation, attempts, backoff, a retry hook). With Telemetry set
	// they must not hold txmiddleware's telemetry options.
	TxOptions []txmiddleware.Option
	// LockWait, when positive, bounds how long a call and a resolve wait
	// before their claim is decided (txmiddleware.WithLockWait).
	LockWait time.Duration
	// AtCommit names the methods whose calls run claim at commit
	// (txmiddleware.WithClaimAtCommit); the transport checks the names.
	AtCommit []string
	// Answered reports whether an error of the work is the handler's own
	// answer, passed on as it is even when it wraps a database error
	// (grpcint: an error with a gRPC status). Without it an error the
	// dialect classifies as the database's is storage trouble.
	Answered func(error) bool
	// KeyHeader names the key's header in messages ("idempotency-key";
	// default "Idempotency-Key").
	KeyHeader string
	// KeyNoun names the key in messages ("idempotency key"; default
	// "Idempotency-Key").
	KeyNoun string
	// Telemetry, when set, gives the server spans, metrics and log events
	// of its own and its runners the same providers and logger (see
	// [Telemetry]). Without it the server records nothing of its own, and
	// its runners get what TxOptions says.
	Telemetry *Telemetry
	// RetryOwner is the retry owner of the channels that call the server,
	// against which [Server.Retries] judges a request that declares none
	// (a client that is not the kit's); "": such a request is judged by
	// the method's kind. NewServer refuses an invalid owner.
	RetryOwner policy.RetryOwner
	// Catalog, when set, gives the keyed methods their window policy
	// (policy.MethodPolicy's Retention and UnknownBirth); nil (httpint):
	// every method has the ledger's retention and accepts a key without a
	// birth, but for Windows'.
	Catalog *policy.Catalog
	// Windows are window policies of methods named outside a catalog
	// (httpint's routes, "POST /transfers"): of each, only FullMethod,
	// Retention and UnknownBirth are read, and its Kind is taken to be
	// keyed. A method both here and keyed in Catalog is an error.
	Windows []policy.MethodPolicy
}

// LifetimeHeader is the response header (gRPC and connect: trailer
// metadata) in which a keyed method's answers that reached the ledger
// (executed, replayed, not found, and the ledger's refusals) tell how
// long a key of the method is honoured from its birth: whole seconds, the
// method's retention (or the ledger's) minus the ledger's clock skew.
// gRPC metadata keys are its lower-case form.
const LifetimeHeader = "Idempotency-Key-Lifetime"

// BirthAttr is the attribute of opledger.server.calls that says where a
// key's birth came from: [BirthKey], [BirthFirstSent] or [BirthUnknown].
const BirthAttr = telemetry.KeyBirth

// The values of [BirthAttr].
const (
	// BirthKey: the key is a UUIDv7 and carries its birth.
	BirthKey = "key"
	// BirthFirstSent: the key carries none; the call sent a first-sent
	// time (keybirth.FirstSentHeader).
	BirthFirstSent = "first-sent"
	// BirthUnknown: the key has no readable birth, and no first-sent time
	// came with it: the ledger cannot refuse a late retry of it as expired.
	BirthUnknown = "unknown"
)

// methodWindow is a keyed method's window policy.
type methodWindow struct {
	lifetime      time.Duration // retention minus skew, for LifetimeHeader; 0: not stated
	own           bool          // a retention of its own, shorter than the ledger's: checked before the claim
	refuseUnknown bool          // RefuseUnknownBirth
}

// Server is the transport-neutral server side of keyed calls: identity,
// the run in the ledger's transaction in either claim order, resolve and
// the one classification of what a call ends with. A transport reads a
// call, hands it to a [Call] and renders its [Answer]. A Server is safe
// for concurrent use.
type Server struct {
	dialect  dialects.Dialect
	codec    txmiddleware.ErrorCodec
	calls    keyedtx.Runner
	atCommit map[string]keyedtx.Runner
	probe    keyedtx.Runner
	answered func(error) bool
	header   string
	noun     string
	owner    policy.RetryOwner
	obs      *observer
	lifetime time.Duration // the ledger's retention minus its skew; 0 when it does not state them
	methods  map[string]methodWindow

	executed, replayed, resolves, refused, failed atomic.Int64
}

// NewServer returns the core of a transport's server on tx. It builds
// three runners: one for the calls (cfg's codec and options), one for
// cfg.AtCommit's methods (claim at commit), and the resolve probe, which
// records nothing (no codec), measures nothing and logs nothing (its claim
// always rolls back) but keeps its spans. Errors wrap
// txmiddleware.ErrInvalidConfig.
func NewServer(tx keyedtx.Transactions, cfg ServerConfig) (*Server, error) {
	d, err := keyedtx.Check(tx)
	if err != nil {
		return nil, err
	}
	if cfg.RetryOwner != 0 && !cfg.RetryOwner.Valid() {
		return nil, fmt.Errorf("%w: retry owner %v (want application, service-config, mesh or none)", txmiddleware.ErrInvalidConfig, cfg.RetryOwner)
	}
	s := &Server{dialect: d, codec: cfg.Codec, answered: cfg.Answered, header: cfg.KeyHeader, noun: cfg.KeyNoun, owner: cfg.RetryOwner,
		obs: newObserver(cfg.Telemetry)}
	if s.header == "" {
		s.header = "Idempotency-Key"
	}
	if s.noun == "" {
		s.noun = "Idempotency-Key"
	}
	if err := s.windows(tx, cfg); err != nil {
		return nil, err
	}
	base := append([]txmiddleware.Option(nil), cfg.TxOptions...)
	if cfg.LockWait > 0 {
		base = append(base, txmiddleware.WithLockWait(cfg.LockWait))
	}
	callOpts := append(append([]txmiddleware.Option(nil), base...), s.obs.runnerOptions()...)
	if cfg.Codec != nil {
		callOpts = append(callOpts, txmiddleware.WithErrorCodec(cfg.Codec))
	}
	if s.calls, err = tx.NewRunner(callOpts...); err != nil {
		return nil, err
	}
	if len(cfg.AtCommit) > 0 {
		rc, err := tx.NewRunner(append(callOpts[:len(callOpts):len(callOpts)], txmiddleware.WithClaimAtCommit())...)
		if err != nil {
			return nil, err
		}
		s.atCommit = make(map[string]keyedtx.Runner, len(cfg.AtCommit))
		for _, m := range cfg.AtCommit {
			s.atCommit[m] = rc
		}
	}
	if s.probe, err = tx.NewRunner(append(base, s.obs.probeOptions()...)...); err != nil {
		return nil, err
	}
	return s, nil
}

// windows reads the ledger's window from tx (txledger.Window) and the
// keyed methods' window policies from cfg's Catalog and Windows. A
// method's retention longer than the ledger's, not longer than the
// ledger's clock skew, or given while the ledger does not state its
// window, is an error wrapping txmiddleware.ErrInvalidConfig.
func (s *Server) windows(tx keyedtx.Transactions, cfg ServerConfig) error {
	retention, skew, stated := txledger.Window(tx)
	if stated && retention > skew {
		s.lifetime = retention - skew
	}
	policies := append([]policy.MethodPolicy(nil), cfg.Windows...)
	for _, p := range cfg.Catalog.Methods() {
		if p.Kind == policy.KindKeyed {
			policies = append(policies, p)
		}
	}
	if len(policies) == 0 {
		return nil
	}
	s.methods = map[string]methodWindow{}
	for _, p := range policies {
		if _, dup := s.methods[p.FullMethod]; dup {
			return fmt.Errorf("%w: %s: two window policies", txmiddleware.ErrInvalidConfig, p.FullMethod)
		}
		w := methodWindow{lifetime: s.lifetime, refuseUnknown: p.UnknownBirth == policy.RefuseUnknownBirth}
		switch {
		case p.Retention < 0:
			return fmt.Errorf("%w: %s: negative retention %v", txmiddleware.ErrInvalidConfig, p.FullMethod, p.Retention)
		case p.Retention == 0:
		case !stated:
			return fmt.Errorf("%w: %s: a retention of its own (%v), but the ledger does not state its window (a ledger.Store does, through keyed.SQL)", txmiddleware.ErrInvalidConfig, p.FullMethod, p.Retention)
		case p.Retention > retention:
			return fmt.Errorf("%w: %s: a retention of %v, longer than the ledger's %v (ledger.WithRetention): the ledger would forget its keys first", txmiddleware.ErrInvalidConfig, p.FullMethod, p.Retention, retention)
		case p.Retention <= skew:
			return fmt.Errorf("%w: %s: a retention of %v, not longer than the ledger's clock skew %v (ledger.WithClockSkew): no key could be honoured", txmiddleware.ErrInvalidConfig, p.FullMethod, p.Retention, skew)
		default:
			w.lifetime, w.own = p.Retention-skew, true
		}
		s.methods[p.FullMethod] = w
	}
	return nil
}

// window returns method's window policy.
func (s *Server) window(method string) methodWindow {
	if w, ok := s.methods[method]; ok {
		return w
	}
	return methodWindow{lifetime: s.lifetime}
}

// Stats returns a snapshot of the counters.
func (s *Server) Stats() keyed.Stats {
	return keyed.Stats{Executed: s.executed.Load(), Replayed: s.replayed.Load(), Resolves: s.resolves.Load(),
		Refused: s.refused.Load(), Failed: s.failed.Load()}
}

// runnerFor returns the runner of a keyed method's calls.
func (s *Server) runnerFor(method string) keyedtx.Runner {
	if rc, ok := s.atCommit[method]; ok {
		return rc
	}
	return s.calls
}

// Answer is what a keyed call ends with: its outcome and what the
// transport renders it from.
type Answer struct {
	// Outcome is the call's outcome; zero only for the Answer of an
	// Identify that succeeded.
	Outcome keyed.Outcome
	// Result is the answer to send: for Executed the result committed,
	// for Replayed the stored one (a non-zero Code for a recorded final
	// error).
	Result ledger.Result
	// Err is, for Executed, the work's final error (nil for a result);
	// for Replayed, the codec's decoding of a stored final error (nil for
	// a stored result); for NotStored, the handler's own error, to pass
	// on; for the other outcomes the error behind them, to log, never to
	// send as it is.
	Err error
	// Detail is a message for the caller, without the key, for the
	// outcomes the transport answers itself.
	Detail string
	// Lifetime, when positive, is how long a key of the method is
	// honoured from its birth, for an answer that reached the ledger (or
	// was refused by the method's window): the transport sends it in
	// [LifetimeHeader], in whole seconds.
	Lifetime time.Duration
}

// Row returns the row of the answer's outcome.
func (a Answer) Row() keyed.Row { return a.Outcome.Row() }

func answer(o keyed.Outcome, err error, detail string) Answer {
	return Answer{Outcome: o, Err: err, Detail: detail}
}

// Call is one keyed call, or resolve request, in the hands of the core:
// the transport begins it ([Server.Begin]), identifies it, runs or
// resolves it, renders the Answer and ends it ([Call.End]). It is not
// safe for concurrent use.
type Call struct {
	s       *Server
	method  string
	resolve bool
	key     string
	birth   string // BirthAttr's value, once identified
	op      callOp
}

// Begin starts a keyed call of method (a resolve request when resolve):
// its span, a child of ctx's, is in the returned context, the parent of
// its runner's.
func (s *Server) Begin(ctx context.Context, method string, resolve bool) (context.Context, *Call) {
	ctx, op := s.obs.begin(ctx, method, resolve)
	return ctx, &Call{s: s, method: method, resolve: resolve, op: op}
}

// Identify builds the call's identity from the caller fingerprint (ok
// false: none), the call's method, the key values it carried (keys:
// every value of the key's header; parse, when not nil, decodes the one
// value into the key, its error a refusal with its message) and the
// values of its first-sent header (firstSent: keybirth.FirstSentHeader's,
// an IMF-fixdate; for a key without a birth of its own it becomes the
// key's birth and part of the identity, so a resolve must send the
// call's). On a refusal it returns an Answer with the outcome
// (CallerMissing, KeyMissing, KeyInvalid, RequestUnreadable, or
// KeyExpired for a key born before the window of a method with a
// retention of its own) and a zero Identity; otherwise an Answer with no
// outcome.
func (c *Call) Identify(caller string, ok bool, keys, firstSent []string, parse func(string) (string, error)) (ledger.Identity, Answer) {
	s := c.s
	if !ok || caller == "" {
		return ledger.Identity{}, answer(keyed.CallerMissing, nil, "no authenticated caller for a keyed call")
	}
	switch {
	case len(keys) == 0:
		return ledger.Identity{}, answer(keyed.KeyMissing, nil, c.method+" needs an "+s.header+" header")
	case len(keys) > 1:
		return ledger.Identity{}, answer(keyed.KeyInvalid, nil, "more than one "+s.header+" header")
	}
	key := keys[0]
	if parse != nil {
		k, err := parse(key)
		if err != nil {
			return ledger.Identity{}, answer(keyed.KeyInvalid, err, err.Error())
		}
		key = k
	}
	c.key = key
	c.s.obs.keyed(c.op, key)
	id, err := ledger.NewIdentity(caller, c.method, key)
	if err != nil {
		field, reason, _ := txledger.InputError(err)
		switch field {
		case "caller":
			return ledger.Identity{}, answer(keyed.CallerMissing, err, "the caller fingerprint is not usable: "+reason)
		case "key":
			return ledger.Identity{}, answer(keyed.KeyInvalid, err, "the "+s.noun+" "+reason)
		}
		return ledger.Identity{}, answer(keyed.RequestUnreadable, err, "the operation's identity cannot be built")
	}
	return c.born(id, firstSent)
}

// born adds the call's first-sent time to id and applies the method's
// window policy: a key without a birth where the method refuses one, and
// a key born before the window of a method with a retention of its own,
// are refused before the claim (the ledger's own window is the ledger's
// to apply, with no statement).
func (c *Call) born(id ledger.Identity, firstSent []string) (ledger.Identity, Answer) {
	s := c.s
	switch len(firstSent) {
	case 0:
	case 1:
		t, err := keybirth.ParseFirstSent(firstSent[0])
		if err == nil {
			id, err = id.WithFirstSent(t)
		}
		if err != nil {
			return ledger.Identity{}, answer(keyed.KeyInvalid, err, "the "+keybirth.FirstSentHeader+" header is invalid: "+err.Error())
		}
	default:
		return ledger.Identity{}, answer(keyed.KeyInvalid, nil, "more than one "+keybirth.FirstSentHeader+" header")
	}
	w := s.window(c.method)
	birth, known := id.Birth()
	switch _, own := keybirth.Birth(c.key); {
	case own:
		c.birth = BirthKey
	case known:
		c.birth = BirthFirstSent
	default:
		c.birth = BirthUnknown
		if w.refuseUnknown {
			return ledger.Identity{}, answer(keyed.KeyInvalid, nil, c.method+" needs a UUIDv7 "+s.noun+" or an "+keybirth.FirstSentHeader+" header: its keys must carry their birth")
		}
	}
	if known && w.own && birth.Before(time.Now().Add(-w.lifetime)) {
		a := answer(keyed.KeyExpired, nil, "the "+s.noun+" was born before the window of "+c.method+" ("+w.lifetime.String()+"); whether a call with it ran is not known here; do not run the call again with it")
		a.Lifetime = w.lifetime
		return ledger.Identity{}, a
	}
	return id, Answer{}
}

// reached adds the method's lifetime to an answer that reached the
// ledger: executed, replayed, not found, or one of the ledger's
// refusals.
func (c *Call) reached(a Answer) Answer {
	switch a.Outcome {
	case keyed.Executed, keyed.Replayed, keyed.NotFound, keyed.KeyReused, keyed.InProgress, keyed.Incomplete, keyed.KeyExpired:
		a.Lifetime = c.s.window(c.method).lifetime
	}
	return a
}

// Run runs work in the ledger's transaction for req (claim first, or at
// commit for the methods configured so) and classifies what happened.
// work finds its transaction in its context.
func (c *Call) Run(ctx context.Context, req ledger.ClaimRequest, work keyedtx.Work) Answer {
	s := c.s
	var workErr error // the last run's error
	out, err := s.runnerFor(req.Identity.Method()).Run(ctx, req, func(ctx context.Context) (ledger.Result, error) {
		workErr = nil
		r, werr := work(ctx)
		workErr = werr
		return r, werr
	})
	switch {
	case out.Replayed:
		return c.reached(Answer{Outcome: keyed.Replayed, Result: out.Result, Err: err})
	case out.Executed:
		return c.reached(Answer{Outcome: keyed.Executed, Result: out.Result, Err: err})
	}
	return c.reached(s.failure(ctx, err, workErr))
}

// failure classifies the error of a call that neither executed nor
// replayed. workErr is the last run's error of the work, if it failed.
func (s *Server) failure(ctx context.Context, err, workErr error) Answer {
	switch {
	case errors.Is(err, ledger.ErrKeyExpired):
		return answer(keyed.KeyExpired, err, "the "+s.noun+" was born before the ledger's window; whether a call with it ran is not known here; do not run the call again with it")
	case errors.Is(err, ledger.ErrKeyReused):
		return answer(keyed.KeyReused, err, "the "+s.noun+" was already used for a different request")
	case errors.Is(err, ledger.ErrInProgress):
		return answer(keyed.InProgress, err, "another attempt with this "+s.noun+" is in progress; retry with it after the pushback")
	case errors.Is(err, ledger.ErrIncomplete):
		return answer(keyed.Incomplete, err, "an earlier attempt committed without a result; its outcome is unknown")
	case errors.Is(err, txmiddleware.ErrBusy):
		return answer(keyed.StorageBusy, err, "the database was busy past the wait bound (no free connection, or another transaction held its write lock); nothing was committed; retry with the same "+s.noun+" after the pushback")
	case errors.Is(err, txmiddleware.ErrCommitUnknown):
		return answer(keyed.CommitUnknown, err, "the commit's outcome is unknown; resolve with the same "+s.noun+" before running the call again")
	case ctx.Err() != nil && (errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded)):
		return answer(keyed.RequestEnded, err, "the call ended before its outcome was committed; nothing was committed")
	case errors.Is(err, ErrResponseTooLarge):
		return answer(keyed.ResponseTooLarge, err, "the response is over the limit; nothing was committed")
	case errors.Is(err, ledger.ErrRetryable):
		if s.dialect.Classify(err) == dialects.ClassConnection {
			break
		}
		return answer(keyed.TxAborted, err, "the transaction kept conflicting with others; nothing was committed; retry with the same "+s.noun)
	case workErr != nil && errors.Is(err, workErr):
		// The handler's own error, not final: nothing was recorded. A bare
		// database error is not passed on as it is.
		if (s.answered != nil && s.answered(workErr)) || s.dialect.Classify(workErr) == dialects.ClassOther {
			return Answer{Outcome: keyed.NotStored, Err: workErr}
		}
	case keyInput(err):
		// A key born more than the clock skew ahead of the ledger's clock:
		// the ledger refuses it at the claim.
		return answer(keyed.KeyInvalid, err, "the "+s.noun+" was born in the future, past the allowed clock skew")
	case errors.Is(err, ledger.ErrInvalid):
		return answer(keyed.NotStorable, err, "the response cannot be stored in the operation ledger; nothing was committed")
	case errors.Is(err, ledger.ErrNotAcquired):
		return answer(keyed.LedgerMisuse, err, "the operation ledger refused to complete its own claim; nothing was committed")
	}
	return answer(keyed.StorageUnavailable, err, "the database failed; nothing was committed; retry with the same "+s.noun)
}

// keyInput reports whether err is the ledger's refusal of the key itself
// (ledger.ErrInvalid, field "key").
func keyInput(err error) bool {
	field, _, ok := txledger.InputError(err)
	return ok && field == "key"
}

// probeFingerprint is the resolve probe's: never a request's, so its claim
// never replays, and what a resolve request carries is never compared.
var probeFingerprint = ledger.FingerprintOf([]byte("opledger/keyed resolve probe"))

var errProbe = errors.New("keyed: resolve probe")

// Resolve answers a resolve request for id without running the handler:
// Replayed with the stored result, NotFound when nothing was committed
// (running the call again with the key is safe), Incomplete, InProgress
// while an attempt with the key is still in flight past the wait bound,
// or storage trouble.
//
// A key born before the window (the ledger's, or the method's own) is
// answered KeyExpired, never NotFound: the ledger no longer knows whether
// it ran.
//
// Nothing committed may still mean an attempt in flight, invisible to a
// read: the resolve then probes with a claim of its own, always rolled
// back, which waits for that attempt (up to the wait bound) and never
// records. The probe's fingerprint is a constant: a resolve does not
// compare requests (its read does not), so what the resolve request
// carries never matters, and a transport that has no request body to
// fingerprint (HTTP) resolves alike.
func (c *Call) Resolve(ctx context.Context, id ledger.Identity) Answer {
	return c.reached(c.resolveAnswer(ctx, id))
}

// resolveAnswer is Resolve's answer before the lifetime is added.
func (c *Call) resolveAnswer(ctx context.Context, id ledger.Identity) Answer {
	s := c.s
	r := s.runnerFor(id.Method())
	e, err := r.Lookup(ctx, id)
	switch {
	case err == nil && e.State == ledger.Completed:
		return s.stored(e.Result)
	case err == nil:
		return s.failure(ctx, ledger.ErrIncomplete, nil)
	case !errors.Is(err, ledger.ErrNotFound):
		return s.failure(ctx, err, nil)
	}
	out, err := s.probe.Run(ctx, ledger.ClaimRequest{Identity: id, Fingerprint: probeFingerprint},
		func(context.Context) (ledger.Result, error) { return ledger.Result{}, errProbe })
	switch {
	case errors.Is(err, errProbe):
		return answer(keyed.NotFound, nil, "nothing was committed for this "+s.noun+"; running the call again with it is safe")
	case out.Replayed:
		return s.stored(out.Result)
	case errors.Is(err, ledger.ErrKeyReused):
		// Committed meanwhile (the probe's fingerprint is never a
		// request's, so this is never the caller's key reused): read it.
		// Until the read says what was committed, the answer is not a
		// definite one.
		e, lerr := r.Lookup(ctx, id)
		switch {
		case lerr == nil && e.State == ledger.Completed:
			return s.stored(e.Result)
		case lerr == nil:
			err = ledger.ErrIncomplete
		case errors.Is(lerr, ledger.ErrNotFound):
			err = fmt.Errorf("%w: the entry the resolve probe met is gone", ledger.ErrInProgress)
		default:
			err = lerr
		}
	case errors.Is(err, txmiddleware.ErrBusy) && r.InFlight(id):
		// The probe could not begin in time behind a call with the key that
		// is still in flight here: that is the answer.
		err = fmt.Errorf("%w: %w", ledger.ErrInProgress, err)
	}
	return s.failure(ctx, err, nil)
}

// stored is the Replayed answer of a stored result read by a resolve.
func (s *Server) stored(r ledger.Result) Answer {
	a := Answer{Outcome: keyed.Replayed, Result: r}
	if r.Code != 0 && s.codec != nil {
		a.Err = s.codec.Decode(r)
	}
	return a
}

// End records the call's answer: the server's counters, its span, its
// metrics and its log event. attrs are the transport's attributes of the
// answer as it rendered it (grpc.status, …), added to the span and the
// metrics.
func (c *Call) End(ctx context.Context, a Answer, attrs ...attribute.KeyValue) {
	c.s.count(c.resolve, a.Outcome)
	if c.birth != "" && !c.resolve {
		attrs = append(attrs, BirthAttr.String(c.birth))
	}
	c.s.obs.end(ctx, c.op, c.method, c.resolve, c.key, a, attrs)
}

// count adds an answer to the counters.
func (s *Server) count(resolve bool, o keyed.Outcome) {
	if resolve {
		s.resolves.Add(1)
		return
	}
	switch o.Row().Kind {
	case keyed.KindExecuted:
		s.executed.Add(1)
	case keyed.KindReplayed:
		s.replayed.Add(1)
	case keyed.KindRefused:
		s.refused.Add(1)
	default:
		s.failed.Add(1)
	}
}
