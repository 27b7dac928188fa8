package httpint

import (
	"bytes"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"time"

	"github.com/opledger/opledger/dialects"
	"github.com/opledger/opledger/internal/keyedconf"
	"github.com/opledger/opledger/internal/keyedcore"
	"github.com/opledger/opledger/internal/methodname"
	"github.com/opledger/opledger/internal/telemetry"
	"github.com/opledger/opledger/internal/txledger"
	"github.com/opledger/opledger/keyed"
	"github.com/opledger/opledger/ledger"
)

// ErrInvalidConfig is returned (wrapped) by New for a configuration that
// cannot work: a nil argument, no route, a bad or conflicting route, a
// lock-wait bound on a dialect without dialects.LockWaiter, a response
// body limit the ledger cannot store (see WithMaxResponseBody), a bad
// option.
var ErrInvalidConfig = errors.New("httpint: invalid configuration")

// Middleware runs the handlers of keyed routes inside one transaction
// with their ledger claim, stores their responses and replays them to
// retries with the same key: an HTTP rendering of package keyed's core.
// It is safe for concurrent use.
type Middleware struct {
	dialect dialects.Dialect
	caller  CallerFunc
	cfg     config
	routes  *http.ServeMux
	methods map[string]bool
	allow   map[string]bool
	core    *keyedcore.Server
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
// caller is answered 401. It is NewFor with keyed.SQL(db, l).
//
// The identity of a keyed request is the caller, the route ("PUT
// /orders/{id}", not the request's path) and the SHA-256 of the key; its
// fingerprint covers the method, path, query and body (see
// WithFingerprintHeaders, WithBodyCanonicalizer). A configuration that
// cannot work is an error wrapping ErrInvalidConfig.
func New(db *sql.DB, l ledger.Ledger, caller CallerFunc, routes []string, opts ...keyed.ServerOption) (*Middleware, error) {
	return keyedcore.ViaSQL(db, l, ErrInvalidConfig, func(tx keyed.Transactions) (*Middleware, error) {
		return NewFor(tx, caller, routes, opts...)
	})
}

// NewFor is New on the transactions of tx, any transaction API's (see
// keyed.Transactions): keyed.SQL for database/sql, or another API's, whose
// handlers find their transaction with that API's function. When tx
// states its result limit (its ledger is a ledger.Store, or one of your
// own with a MaxResultSize method), a response body limit it cannot store
// is refused; a route's retention of its own (WithRouteWindow) needs tx to
// state the ledger's window (keyed.SQL with a ledger.Store does).
// Everything else is as for New.
func NewFor(tx keyed.Transactions, caller CallerFunc, routes []string, opts ...keyed.ServerOption) (*Middleware, error) {
	switch {
	case tx == nil:
		return nil, fmt.Errorf("%w: nil transactions", ErrInvalidConfig)
	case caller == nil:
		return nil, fmt.Errorf("%w: nil caller function", ErrInvalidConfig)
	case tx.Dialect() == nil:
		return nil, fmt.Errorf("%w: the ledger has no dialect", ErrInvalidConfig)
	case len(routes) == 0:
		return nil, fmt.Errorf("%w: no keyed route", ErrInvalidConfig)
	}
	m := &Middleware{dialect: tx.Dialect(), caller: caller, cfg: defaults(),
		routes: http.NewServeMux(), methods: map[string]bool{}, allow: map[string]bool{}}
	shared := keyedconf.NewServer("httpint", &m.cfg, refuses)
	if err := keyedconf.ApplyServer(&shared, opts); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalidConfig, err)
	}
	known := map[string]bool{}
	for _, op := range routes {
		if err := m.addRoute(op); err != nil {
			return nil, fmt.Errorf("%w: route %q: %w", ErrInvalidConfig, op, err)
		}
		known[op] = true
	}
	if rs, ok := tx.(txledger.ResultSizer); ok && m.cfg.maxResponse > rs.MaxResultSize()-StoredHeaderRoom {
		return nil, fmt.Errorf("%w: a response body of %d bytes (WithMaxResponseBody) and %d bytes for its stored headers (StoredHeaderRoom) are over the ledger's result limit of %d bytes (ledger.WithMaxResultSize): a response at the limit could not be stored",
			ErrInvalidConfig, m.cfg.maxResponse, StoredHeaderRoom, rs.MaxResultSize())
	}
	for _, h := range m.cfg.replay {
		m.allow[h] = true
	}
	if m.cfg.setCookie {
		m.allow["Set-Cookie"] = true
	}
	if err := m.namedRoutes(known, shared.AtCommit); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalidConfig, err)
	}
	// Without a telemetry option the middleware records nothing of its own.
	tel := keyedcore.TelemetryOf(shared.Telemetry, "httpint")
	core, err := keyedcore.NewServer(tx, keyedcore.ServerConfig{Codec: codec{}, TxOptions: shared.TxOptions, LockWait: shared.LockWait,
		AtCommit: shared.AtCommit, KeyHeader: KeyHeader, KeyNoun: KeyHeader, Telemetry: tel, RetryOwner: shared.RetryOwner,
		Windows: m.cfg.windows})
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalidConfig, err)
	}
	m.core = core
	return m, nil
}

// namedRoutes checks that the routes the options name (atCommit,
// keyed.WithClaimAtCommit's, and WithRouteWindow's) are keyed routes.
func (m *Middleware) namedRoutes(known map[string]bool, atCommit []string) error {
	for _, op := range atCommit {
		if !known[op] {
			return fmt.Errorf("WithClaimAtCommit: %q is not one of the keyed routes", op)
		}
	}
	for _, p := range m.cfg.windows {
		if !known[p.FullMethod] {
			return fmt.Errorf("WithRouteWindow: %q is not one of the keyed routes", p.FullMethod)
		}
	}
	return nil
}

// addRoute checks op as an identity's method and registers it in the
// internal mux, which refuses a bad or conflicting pattern (with a panic,
// turned into an error here).
func (m *Middleware) addRoute(op string) (err error) {
	verb, _, err := methodname.SplitHTTP(op)
	if err != nil {
		return err
	}
	if err := txledger.CheckMethod(op); err != nil {
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
func (m *Middleware) Stats() keyed.Stats { return m.core.Stats() }

// Handler returns next behind the middleware: the shape
// func(http.Handler) http.Handler that routers take. For a keyed route it:
//
//  1. identifies the caller (401 without one) and reads the
//     Idempotency-Key header (400 when it is missing or not one
//     structured-field string);
//  2. for a resolve (Idempotency-Resolve: 1, or true in any case)
//     answers with the stored response, 404 or 409, without running the
//     handler; any other value of the header is refused (400
//     request-unreadable) before the key is read;
//  3. reads the body, at most WithMaxRequestBody bytes (413 past it,
//     before anything is claimed), and fingerprints the request;
//  4. runs next inside txmiddleware, with the transaction reachable from
//     the request's context (txmiddleware.TxFromContext) and the response
//     buffered, and stores the response with the claim in the same
//     transaction when its status is below 400 or final (see
//     WithFinalStatus);
//  5. answers a retry whose first request completed with the stored
//     status, headers (see WithReplayHeaders) and body, and
//     Idempotent-Replayed: true and Idempotency-Replayed: true (the name
//     grpcint and connectint use); a reused key with 422, a request still in
//     flight past the wait bound with 409 and Retry-After.
//
// Every answer of the middleware's own is an RFC 9457 problem whose type
// is in the outcome table (Renderings). Requests to other routes pass
// through untouched, except a resolve, which never runs a handler (400
// route-not-keyed), and a request with a malformed Idempotency-Resolve
// (400 request-unreadable).
//
// Before any of this, a keyed request (not a resolve) is judged by its
// retry headers: a retry by a client's own loop (Opledger-Attempt), by
// the mesh (X-Envoy-Attempt-Count) or by a gRPC library's service config
// (Grpc-Previous-Rpc-Attempts) counts in opledger.server.retries_by_layer
// (with keyed.WithMeterProvider), and one by a layer that is not the client's
// owner (the one it declares in Opledger-Retry-Owner, else
// keyed.WithRetryOwner's) is a second owner, logged once per route and layer
// (with keyed.WithLogger; see keyedcore.Server.Retries) and named in the
// response's Opledger-Second-Retry-Owner (the layers, "service-config",
// "mesh", comma-separated), so that a client sees it too.
func (m *Middleware) Handler(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, resolveSent := r.Header[ResolveHeader]
		if !m.methods[r.Method] && !resolveSent {
			next.ServeHTTP(w, r)
			return
		}
		resolve, refusal := keyedcore.ParseResolve(r.Header[ResolveHeader])
		h, _ := m.routes.Handler(r)
		rt, isKeyed := h.(route)
		switch {
		case isKeyed:
			m.keyed(w, r, rt.op, resolveSent, resolve, refusal, next)
		case refusal.Outcome != 0:
			writeProblem(w, refusal.Outcome, refusal.Detail, 0)
		case resolve:
			writeProblem(w, keyed.NotKeyed, r.Method+" "+r.URL.Path+" is not a keyed route; there is nothing to resolve", 0)
		default:
			next.ServeHTTP(w, r)
		}
	})
}

// keyed serves a request of a keyed route: resolveSent when it carries
// the resolve header, resolve when its value asks for a resolve, refusal
// (keyedcore.ParseResolve's) when the value is malformed.
func (m *Middleware) keyed(w http.ResponseWriter, r *http.Request, op string, resolveSent, resolve bool, refusal keyedcore.Answer, next http.Handler) {
	if !resolveSent {
		m.judgeRetries(r.Context(), w, op, r.Header)
	}
	ctx, call := m.core.Begin(r.Context(), op, resolve)
	r = r.WithContext(ctx)
	var ans keyedcore.Answer
	var last *recorder
	if refusal.Outcome != 0 {
		ans = refusal
	} else {
		ans, last = m.serve(call, r, resolve, next)
	}
	if ans.Lifetime > 0 {
		w.Header().Set(lifetimeHeader, strconv.FormatInt(int64(ans.Lifetime/time.Second), 10))
	}
	status := m.render(w, &ans, last)
	call.End(ctx, ans, telemetry.HTTPStatus.Int(status))
}

// serve reads a keyed request and has the core run or resolve it. last is
// the last run's recorded response, nil when the handler did not run.
func (m *Middleware) serve(call *keyedcore.Call, r *http.Request, resolve bool, next http.Handler) (keyedcore.Answer, *recorder) {
	caller, ok := m.caller(r)
	parse := ParseKey
	if m.cfg.bareKeys {
		parse = parseBareKey
	}
	id, refusal := call.Identify(caller, ok, r.Header[KeyHeader], r.Header[firstSentHeader], parse)
	switch {
	case refusal.Outcome != 0:
		return refusal, nil
	case resolve:
		return call.Resolve(r.Context(), id), nil
	}
	tooLarge := keyedcore.Answer{Outcome: keyed.RequestTooLarge, Detail: fmt.Sprintf("the body is over the limit of %d bytes", m.cfg.maxRequest)}
	if r.ContentLength > m.cfg.maxRequest {
		return tooLarge, nil
	}
	body, err := io.ReadAll(io.LimitReader(r.Body, m.cfg.maxRequest+1))
	switch {
	case err != nil:
		return keyedcore.Answer{Outcome: keyed.RequestUnreadable, Err: err, Detail: "the body could not be read"}, nil
	case int64(len(body)) > m.cfg.maxRequest:
		return tooLarge, nil
	}
	fp, err := m.fingerprint(r, body)
	if err != nil {
		return keyedcore.Answer{Outcome: keyed.RequestUnreadable, Err: err, Detail: "the body cannot be fingerprinted: " + err.Error()}, nil
	}
	var last *recorder
	ans := call.Run(r.Context(), ledger.ClaimRequest{Identity: id, Fingerprint: fp}, func(ctx context.Context) (ledger.Result, error) {
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
	return ans, last
}

// transientErr reports whether an error the handler reported is one of
// the database's that rolls the transaction back: retried by the runner,
// and answered as storage trouble when retries run out.
func (m *Middleware) transientErr(err error) bool {
	return m.dialect.Classify(err) != dialects.ClassOther
}

// render is the HTTP rendering of a keyed request's answer: the handler's
// response (last), the stored one, or the problem of its outcome. It
// returns the status sent. A stored response that cannot be read changes
// the answer's outcome to keyed.ResultUnreadable.
func (m *Middleware) render(w http.ResponseWriter, a *keyedcore.Answer, last *recorder) int {
	switch a.Outcome {
	case keyed.Executed, keyed.NotStored:
		if last != nil {
			last.send(w)
			return last.statusCode()
		}
	case keyed.Replayed:
		s, err := decodeResponse(a.Result)
		if err == nil {
			writeStored(w, s)
			return s.status
		}
		*a = keyedcore.Answer{Outcome: keyed.ResultUnreadable, Err: err, Detail: "the stored response cannot be read by this server"}
	case keyed.ResponseTooLarge:
		a.Detail = fmt.Sprintf("the response is over the limit of %d bytes; nothing was committed", m.cfg.maxResponse)
	}
	writeProblem(w, a.Outcome, a.Detail, m.cfg.retryAfter)
	return problemOf(a.Outcome).Status
}

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
