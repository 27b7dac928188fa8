package httpint

import (
	"bytes"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io"
	"net/http"
	"sync/atomic"

	"github.com/opledger/opledger/dialects"
	"github.com/opledger/opledger/internal/methodname"
	"github.com/opledger/opledger/internal/options"
	"github.com/opledger/opledger/ledger"
	"github.com/opledger/opledger/txmiddleware"
)

// ErrInvalidConfig is returned (wrapped) by New for a configuration that
// cannot work: a nil argument, no route, a bad or conflicting route, a
// lock-wait bound on a dialect without dialects.LockWaiter, a response
// body limit the ledger cannot store (see WithMaxResponseBody), a bad
// option.
var ErrInvalidConfig = errors.New("httpint: invalid configuration")

// Stats are the counters of a Middleware.
type Stats struct {
	// Executed counts keyed requests whose handler ran and committed a
	// stored response.
	Executed int64
	// Replayed counts keyed requests answered with a stored response.
	Replayed int64
	// Resolves counts resolve requests, whatever they found.
	Resolves int64
	// Refused counts keyed requests refused before the handler ran: no
	// caller, no or a bad key, a body too large, a reused key, a request
	// in progress.
	Refused int64
	// Failed counts keyed requests that committed nothing: a response
	// that is not stored, storage trouble, an unknown commit.
	Failed int64
}

// Middleware runs the handlers of keyed routes inside one transaction
// with their ledger claim, stores their responses and replays them to
// retries with the same key. It is safe for concurrent use.
type Middleware struct {
	db      *sql.DB
	l       ledger.Ledger
	dialect dialects.Dialect
	caller  CallerFunc
	cfg     config
	routes  *http.ServeMux
	methods map[string]bool
	allow   map[string]bool
	runner  *txmiddleware.Runner
	commit  map[string]*txmiddleware.Runner // WithClaimAtCommit's routes
	probe   *txmiddleware.Runner

	executed, replayed, resolves, refused, failed atomic.Int64
}

// route is the internal mux's handler of one keyed route: matching a
// request returns it, and with it the route's operation name.
type route struct{ op string }

func (route) ServeHTTP(http.ResponseWriter, *http.Request) {}

// New returns the middleware for the keyed routes, each "METHOD
// /pattern" in net/http.ServeMux's pattern syntax without a host, such as
// "POST /transfers" or "PUT /orders/{id}". A request is matched against
// them as ServeMux matches (wildcards, {name...}, {$}, the most specific
// pattern wins); any other request passes through untouched. The
// handlers of keyed routes write through the transaction in db that holds
// the claim in l (see txmiddleware.TxFromContext on the request's
// context), and caller fingerprints who asks; a keyed request without a
// caller is answered 401.
//
// The identity of a keyed request is the caller, the route ("PUT
// /orders/{id}", not the request's path) and the SHA-256 of the key; its
// fingerprint covers the method, path, query and body (see
// WithFingerprintHeaders, WithBodyCanonicalizer). A configuration that
// cannot work is an error wrapping ErrInvalidConfig.
func New(db *sql.DB, l ledger.Ledger, caller CallerFunc, routes []string, opts ...Option) (*Middleware, error) {
	switch {
	case db == nil:
		return nil, fmt.Errorf("%w: nil database", ErrInvalidConfig)
	case l == nil:
		return nil, fmt.Errorf("%w: nil ledger", ErrInvalidConfig)
	case caller == nil:
		return nil, fmt.Errorf("%w: nil caller function", ErrInvalidConfig)
	case l.Dialect() == nil:
		return nil, fmt.Errorf("%w: the ledger has no dialect", ErrInvalidConfig)
	case len(routes) == 0:
		return nil, fmt.Errorf("%w: no keyed route", ErrInvalidConfig)
	}
	m := &Middleware{db: db, l: l, dialect: l.Dialect(), caller: caller, cfg: defaults(),
		routes: http.NewServeMux(), methods: map[string]bool{}, allow: map[string]bool{}}
	if err := options.Apply(&m.cfg, opts, func(o Option) options.Option[config] { return o.o }); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalidConfig, err)
	}
	known := map[string]bool{}
	for _, op := range routes {
		if err := m.addRoute(op); err != nil {
			return nil, fmt.Errorf("%w: route %q: %w", ErrInvalidConfig, op, err)
		}
		known[op] = true
	}
	if rs, ok := l.(ledger.ResultSizer); ok && m.cfg.maxResponse > rs.MaxResultSize()-StoredHeaderRoom {
		return nil, fmt.Errorf("%w: a response body of %d bytes (WithMaxResponseBody) and %d bytes for its stored headers (StoredHeaderRoom) are over the ledger's result limit of %d bytes (ledger.WithMaxResultSize): a response at the limit could not be stored",
			ErrInvalidConfig, m.cfg.maxResponse, StoredHeaderRoom, rs.MaxResultSize())
	}
	for _, h := range m.cfg.replay {
		m.allow[h] = true
	}
	if m.cfg.setCookie {
		m.allow["Set-Cookie"] = true
	}
	base := append([]txmiddleware.Option(nil), m.cfg.txOpts...)
	if m.cfg.lockWait > 0 {
		base = append(base, txmiddleware.WithLockWait(m.cfg.lockWait))
	}
	r, err := txmiddleware.New(db, l, append(base, txmiddleware.WithErrorCodec(codec{}))...)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalidConfig, err)
	}
	// The resolve probe records nothing (no codec): its claim always
	// rolls back.
	p, err := txmiddleware.New(db, l, base...)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalidConfig, err)
	}
	m.runner, m.probe = r, p
	if len(m.cfg.atCommit) > 0 {
		rc, err := txmiddleware.New(db, l, append(base, txmiddleware.WithErrorCodec(codec{}), txmiddleware.WithClaimAtCommit())...)
		if err != nil {
			return nil, fmt.Errorf("%w: %w", ErrInvalidConfig, err)
		}
		m.commit = map[string]*txmiddleware.Runner{}
		for _, op := range m.cfg.atCommit {
			if !known[op] {
				return nil, fmt.Errorf("%w: WithClaimAtCommit: %q is not one of the keyed routes", ErrInvalidConfig, op)
			}
			m.commit[op] = rc
		}
	}
	return m, nil
}

// addRoute checks op as an identity's method and registers it in the
// internal mux, which refuses a bad or conflicting pattern (with a panic,
// turned into an error here).
func (m *Middleware) addRoute(op string) (err error) {
	verb, _, err := methodname.SplitHTTP(op)
	if err != nil {
		return err
	}
	if err := ledger.CheckMethod(op); err != nil {
		return err
	}
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("%v", p)
		}
	}()
	m.routes.Handle(op, route{op: op})
	m.methods[verb] = true
	if verb == http.MethodGet {
		m.methods[http.MethodHead] = true // ServeMux matches HEAD to GET patterns
	}
	return nil
}

// Stats returns a snapshot of the counters.
func (m *Middleware) Stats() Stats {
	return Stats{Executed: m.executed.Load(), Replayed: m.replayed.Load(), Resolves: m.resolves.Load(),
		Refused: m.refused.Load(), Failed: m.failed.Load()}
}

// Handler returns next behind the middleware: the shape
// func(http.Handler) http.Handler that routers take. For a keyed route it:
//
//  1. identifies the caller (401 without one) and reads the
//     Idempotency-Key header (400 when it is missing or not one
//     structured-field string);
//  2. for a resolve (Idempotency-Resolve: 1) answers with the stored
//     response, 404 or 409, without running the handler;
//  3. reads the body, at most WithMaxRequestBody bytes (413 past it,
//     before anything is claimed), and fingerprints the request;
//  4. runs next inside txmiddleware, with the transaction reachable from
//     the request's context (txmiddleware.TxFromContext) and the response
//     buffered, and stores the response with the claim in the same
//     transaction when its status is below 400 or final (see
//     WithFinalStatus);
//  5. answers a retry whose first request completed with the stored
//     status, headers (see WithReplayHeaders) and body, and
//     Idempotent-Replayed: true; a reused key with 422, a request still in
//     flight past the wait bound with 409 and Retry-After.
//
// Every answer of the middleware's own is an RFC 9457 problem whose type
// is in the outcome table (Outcomes). Requests to other routes pass
// through untouched, except a resolve, which never runs a handler (400).
func (m *Middleware) Handler(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, resolve := r.Header[ResolveHeader]
		if !m.methods[r.Method] && !resolve {
			next.ServeHTTP(w, r)
			return
		}
		h, _ := m.routes.Handler(r)
		rt, keyed := h.(route)
		switch {
		case keyed:
			m.keyed(w, r, rt.op, resolve, next)
		case resolve:
			writeProblem(w, OutcomeNotKeyed, r.Method+" "+r.URL.Path+" is not a keyed route; there is nothing to resolve", 0)
		default:
			next.ServeHTTP(w, r)
		}
	})
}

func (m *Middleware) refuse(w http.ResponseWriter, name, detail string) {
	m.refused.Add(1)
	writeProblem(w, name, detail, m.cfg.retryAfter)
}

func (m *Middleware) keyed(w http.ResponseWriter, r *http.Request, op string, resolve bool, next http.Handler) {
	if resolve {
		m.resolves.Add(1)
	}
	caller, ok := m.caller(r)
	if !ok {
		m.refuse(w, OutcomeNoCaller, "no authenticated caller for a keyed request")
		return
	}
	fields := r.Header[KeyHeader]
	switch {
	case len(fields) == 0:
		m.refuse(w, OutcomeMissingKey, op+" needs an Idempotency-Key header")
		return
	case len(fields) > 1:
		m.refuse(w, OutcomeInvalidKey, "more than one Idempotency-Key header")
		return
	}
	parse := ParseKey
	if m.cfg.bareKeys {
		parse = parseBareKey
	}
	key, err := parse(fields[0])
	if err != nil {
		m.refuse(w, OutcomeInvalidKey, err.Error())
		return
	}
	id, err := ledger.NewIdentity(caller, op, key)
	if err != nil {
		var ie *ledger.InputError
		if errors.As(err, &ie) && ie.Field == "caller" {
			m.refuse(w, OutcomeNoCaller, "the caller fingerprint is not usable: "+ie.Reason)
			return
		}
		m.refuse(w, OutcomeInvalidKey, "the idempotency key is not usable")
		return
	}
	if resolve {
		m.resolve(w, r, id)
		return
	}

	if r.ContentLength > m.cfg.maxRequest {
		m.refuse(w, OutcomeRequestTooLarge, fmt.Sprintf("the body is over the limit of %d bytes", m.cfg.maxRequest))
		return
	}
	body, err := io.ReadAll(io.LimitReader(r.Body, m.cfg.maxRequest+1))
	switch {
	case err != nil:
		m.refuse(w, OutcomeRequestUnreadable, "the body could not be read")
		return
	case int64(len(body)) > m.cfg.maxRequest:
		m.refuse(w, OutcomeRequestTooLarge, fmt.Sprintf("the body is over the limit of %d bytes", m.cfg.maxRequest))
		return
	}
	fp, err := m.fingerprint(r, body)
	if err != nil {
		m.refuse(w, OutcomeRequestUnreadable, "the body cannot be fingerprinted: "+err.Error())
		return
	}

	var last *recorder
	out, err := m.runnerFor(op).Run(r.Context(), ledger.ClaimRequest{Identity: id, Fingerprint: fp},
		func(ctx context.Context, tx *sql.Tx) (ledger.Result, error) {
			rec := newRecorder(m.cfg.maxResponse)
			last = rec
			slot := &reported{}
			req := r.WithContext(context.WithValue(ctx, reportKey{}, slot))
			req.Body = io.NopCloser(bytes.NewReader(body))
			next.ServeHTTP(rec, req)
			status := rec.statusCode()
			switch {
			case rec.overflow:
				return ledger.Result{}, errResponseTooLarge
			case slot.err != nil && m.transientErr(slot.err):
				return ledger.Result{}, &notStored{status: status, err: slot.err}
			case status < 400:
				return encodeResponse(status, rec.header, m.allow, rec.body.Bytes()), nil
			case m.cfg.final(status):
				return ledger.Result{}, &finalResponse{encodeResponse(status, rec.header, m.allow, rec.body.Bytes())}
			}
			return ledger.Result{}, &notStored{status: status, err: slot.err}
		})
	switch {
	case out.Replayed:
		m.replayed.Add(1)
		m.replay(w, out.Result)
		return
	case out.Executed:
		m.executed.Add(1)
		last.send(w)
		return
	}
	m.failure(w, err, last)
}

// runnerFor returns the runner of a keyed route's requests.
func (m *Middleware) runnerFor(op string) *txmiddleware.Runner {
	if rc, ok := m.commit[op]; ok {
		return rc
	}
	return m.runner
}

// transientErr reports whether an error the handler reported is one of
// the database's that rolls the transaction back: retried by the runner,
// and answered as storage trouble when retries run out.
func (m *Middleware) transientErr(err error) bool {
	return m.dialect.Classify(err) != dialects.ClassOther
}

// failure answers a keyed request that committed nothing, as the outcome
// table says.
func (m *Middleware) failure(w http.ResponseWriter, err error, last *recorder) {
	switch {
	case errors.Is(err, ledger.ErrKeyReused):
		m.refuse(w, OutcomeKeyReused, "the Idempotency-Key was already used for a different request")
		return
	case errors.Is(err, ledger.ErrInProgress):
		m.refuse(w, OutcomeInProgress, "a request with the same Idempotency-Key is being processed; retry after Retry-After")
		return
	case errors.Is(err, ledger.ErrIncomplete):
		m.refuse(w, OutcomeIncomplete, "an earlier request committed without a response; its outcome is unknown")
		return
	}
	m.failed.Add(1)
	var ns *notStored
	switch {
	case errors.Is(err, txmiddleware.ErrBusy):
		writeProblem(w, OutcomeStorageBusy, "the database was busy past the wait bound (no free connection, or another transaction held its write lock); nothing was committed; retry with the same Idempotency-Key after Retry-After", m.cfg.retryAfter)
	case errors.Is(err, txmiddleware.ErrCommitUnknown):
		writeProblem(w, OutcomeCommitUnknown, "the commit's outcome is unknown; resolve with the same Idempotency-Key before sending the request again", m.cfg.retryAfter)
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		writeProblem(w, OutcomeRequestEnded, "the request ended before its outcome was committed; nothing was committed", m.cfg.retryAfter)
	case errors.As(err, &ns) && !errors.Is(err, ledger.ErrRetryable) && (ns.err == nil || !m.transientErr(ns.err)) && last != nil:
		last.send(w) // the handler's own answer, not stored
	case errors.Is(err, errResponseTooLarge):
		writeProblem(w, OutcomeResponseTooLarge, fmt.Sprintf("the response is over the limit of %d bytes; nothing was committed", m.cfg.maxResponse), 0)
	case errors.Is(err, ledger.ErrInvalid):
		writeProblem(w, OutcomeNotStorable, "the response cannot be stored in the operation ledger; nothing was committed", 0)
	case errors.Is(err, ledger.ErrNotAcquired):
		writeProblem(w, OutcomeLedgerMisuse, "the operation ledger refused to complete its own claim; nothing was committed", 0)
	case errors.Is(err, ledger.ErrRetryable) && m.dialect.Classify(err) != dialects.ClassConnection:
		writeProblem(w, OutcomeTxAborted, "the transaction kept conflicting with others; nothing was committed; retry with the same Idempotency-Key", m.cfg.retryAfter)
	default:
		writeProblem(w, OutcomeStorage, "the database failed; nothing was committed; retry with the same Idempotency-Key", m.cfg.retryAfter)
	}
}

// replay answers with a stored response.
func (m *Middleware) replay(w http.ResponseWriter, res ledger.Result) {
	s, err := decodeResponse(res)
	if err != nil {
		writeProblem(w, OutcomeUnreadable, "the stored response cannot be read by this server", 0)
		return
	}
	writeStored(w, s)
}

// resolve answers a resolve request without running the handler.
func (m *Middleware) resolve(w http.ResponseWriter, r *http.Request, id ledger.Identity) {
	ctx := r.Context()
	e, err := m.runnerFor(id.Method()).Lookup(ctx, id)
	switch {
	case err == nil && e.State == ledger.Completed:
		m.replay(w, e.Result)
		return
	case err == nil:
		m.failure(w, ledger.ErrIncomplete, nil)
		return
	case !errors.Is(err, ledger.ErrNotFound):
		m.failure(w, err, nil)
		return
	}
	// Nothing committed. A request may still be in flight, invisible to
	// Lookup: probe with a claim that is always rolled back. It waits for
	// it (up to the wait bound) and never records. Its fingerprint is not
	// the request's: a resolve does not compare requests.
	probeFP := ledger.FingerprintOf([]byte("opledger/httpint resolve probe"))
	out, err := m.probe.Run(ctx, ledger.ClaimRequest{Identity: id, Fingerprint: probeFP},
		func(context.Context, *sql.Tx) (ledger.Result, error) { return ledger.Result{}, errProbe })
	switch {
	case errors.Is(err, errProbe):
		writeProblem(w, OutcomeNotFound, "nothing was committed for this Idempotency-Key; sending the request again with it is safe", 0)
		return
	case out.Replayed:
		m.replay(w, out.Result)
		return
	case errors.Is(err, ledger.ErrKeyReused):
		// Completed meanwhile (the probe's fingerprint is never the
		// request's): read it.
		if e, lerr := m.runnerFor(id.Method()).Lookup(ctx, id); lerr == nil && e.State == ledger.Completed {
			m.replay(w, e.Result)
			return
		}
	case errors.Is(err, txmiddleware.ErrBusy) && m.runnerFor(id.Method()).InFlight(id):
		// The probe could not begin in time behind a request with the key
		// that is still in flight here: that is the answer.
		err = fmt.Errorf("%w: %w", ledger.ErrInProgress, err)
	}
	m.failure(w, err, nil)
}

var errProbe = errors.New("httpint: resolve probe")

type reportKey struct{}

type reported struct{ err error }

// ReportError tells the middleware the error behind the response a
// keyed route's handler is about to write, typically a database error of
// the request's transaction. An error the dialect classifies as the
// database's (a serialization failure, a deadlock, a lost connection, a
// lock timeout) rolls the transaction back whatever the response: the
// handler runs again in a new transaction when the runner retries such
// errors, and otherwise the request is answered as storage trouble (503,
// nothing committed). Other errors change nothing. It reports false, and
// does nothing, for a request that is not a keyed route's.
func ReportError(r *http.Request, err error) bool {
	slot, ok := r.Context().Value(reportKey{}).(*reported)
	if !ok || err == nil {
		return false
	}
	slot.err = err
	return true
}
