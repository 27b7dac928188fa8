package httpint

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"time"

	"github.com/opledger/opledger/internal/keybirth"
	"github.com/opledger/opledger/internal/keyedcore"
	"github.com/opledger/opledger/keyed"
	"github.com/opledger/opledger/ledger"
)

// Header names the middleware reads and writes.
const (
	// KeyHeader carries the client's idempotency key: a structured-field
	// string, the same on every attempt of one logical request.
	KeyHeader = "Idempotency-Key"
	// ResolveHeader, set to "1" (or "true", in any case) on a keyed
	// request, asks for the stored response of the key instead of running
	// the handler. Any other value is refused (400 request-unreadable)
	// without running anything.
	ResolveHeader = "Idempotency-Resolve"
	// ReplayedHeader is "true" on a response that is a stored one (a
	// replay or a resolve), not a new execution. It is Stripe's name; the
	// same response also carries Idempotency-Replayed: true, the name of
	// grpcint's and connectint's marker, so that one name reads the marker
	// on every transport.
	ReplayedHeader = "Idempotent-Replayed"
)

// replayedHeader is the replay marker's name on every transport
// (grpcint.ReplayedHeader, connectint.ReplayedHeader), sent beside
// ReplayedHeader.
const replayedHeader = "Idempotency-Replayed"

// The window's headers (keybirth.FirstSentHeader and
// keyedcore.LifetimeHeader); docs/http.md describes them.
const (
	// firstSentHeader carries, beside a key with no birth of its own (not
	// a UUIDv7), the time its request was first sent: an IMF-fixdate. It
	// is part of the identity: every attempt and resolve must send the
	// same.
	firstSentHeader = keybirth.FirstSentHeader
	// lifetimeHeader, on an answer that reached the ledger, is how long a
	// key of the route is honoured from its birth, in whole seconds.
	lifetimeHeader = keyedcore.LifetimeHeader
)

// responseTypeName is the ledger.Result.TypeName of a stored HTTP
// response; its Code is the status and its Response the encoding of the
// allow-listed headers and the body (see the package documentation).
const responseTypeName = "opledger.httpint.Response"

// ProblemContentType is the media type of the middleware's own error
// responses (RFC 9457).
const ProblemContentType = "application/problem+json"

// Problem is the body of the middleware's own error responses, an RFC
// 9457 problem details object. Type is ProblemTypeBase followed by the
// outcome's name (see Renderings).
type Problem struct {
	Type   string `json:"type"`
	Title  string `json:"title"`
	Status int    `json:"status"`
	Detail string `json:"detail,omitempty"`
}

// writeProblem answers with the outcome's problem. detail never holds the
// key.
func writeProblem(w http.ResponseWriter, outcome keyed.Outcome, detail string, retryAfter time.Duration) {
	o := problemOf(outcome)
	b, _ := json.Marshal(Problem{Type: o.Type(), Title: o.Title, Status: o.Status, Detail: detail})
	h := w.Header()
	h.Set("Content-Type", ProblemContentType)
	h.Set("Content-Length", strconv.Itoa(len(b)))
	h.Set("Cache-Control", "no-store")
	if o.RetryAfter {
		secs := int64((retryAfter + time.Second - 1) / time.Second)
		h.Set("Retry-After", strconv.FormatInt(max(secs, 1), 10))
	}
	w.WriteHeader(o.Status)
	_, _ = w.Write(b)
}

// storedMagic starts every encoded response: a format name and version.
var storedMagic = []byte("ohr1")

// encodeResponse is the stored form of a response: the magic, then each
// allow-listed header value as (name, value) in name order, values in the
// handler's order, each length-prefixed, then the body. The status is the
// Result's Code. The same response always encodes to the same bytes.
func encodeResponse(status int, h http.Header, allow map[string]bool, body []byte) ledger.Result {
	names := make([]string, 0, len(h))
	for name := range h {
		if allow[http.CanonicalHeaderKey(name)] {
			names = append(names, name)
		}
	}
	slices.SortFunc(names, func(a, b string) int {
		if c := cmpStrings(http.CanonicalHeaderKey(a), http.CanonicalHeaderKey(b)); c != 0 {
			return c
		}
		return cmpStrings(a, b)
	})
	var b bytes.Buffer
	b.Write(storedMagic)
	var n int
	for _, name := range names {
		n += len(h[name])
	}
	b.Write(binary.AppendUvarint(nil, uint64(n)))
	for _, name := range names {
		canon := http.CanonicalHeaderKey(name)
		for _, v := range h[name] {
			b.Write(binary.AppendUvarint(nil, uint64(len(canon))))
			b.WriteString(canon)
			b.Write(binary.AppendUvarint(nil, uint64(len(v))))
			b.WriteString(v)
		}
	}
	b.Write(body)
	return ledger.Result{Code: uint32(status), Response: b.Bytes(), TypeName: responseTypeName}
}

func cmpStrings(a, b string) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// errUnreadable is decodeResponse's answer to bytes it did not write.
var errUnreadable = errors.New("httpint: stored result is not a stored response")

// storedResponse is a decoded stored response.
type storedResponse struct {
	status int
	header http.Header
	body   []byte
}

// decodeResponse reads what encodeResponse wrote; anything else is
// errUnreadable.
func decodeResponse(r ledger.Result) (storedResponse, error) {
	if r.TypeName != responseTypeName || r.Code < 100 || r.Code > 999 || !bytes.HasPrefix(r.Response, storedMagic) {
		return storedResponse{}, errUnreadable
	}
	rest := r.Response[len(storedMagic):]
	next := func() ([]byte, bool) {
		n, k := binary.Uvarint(rest)
		if k <= 0 || n > uint64(len(rest)-k) {
			return nil, false
		}
		v := rest[k : k+int(n)]
		rest = rest[k+int(n):]
		return v, true
	}
	count, k := binary.Uvarint(rest)
	if k <= 0 || count > uint64(len(rest)) {
		return storedResponse{}, errUnreadable
	}
	rest = rest[k:]
	out := storedResponse{status: int(r.Code), header: make(http.Header, count)}
	for range count {
		name, ok1 := next()
		value, ok2 := next()
		if !ok1 || !ok2 || !validName(name) || !validValue(value) {
			return storedResponse{}, errUnreadable
		}
		out.header[string(name)] = append(out.header[string(name)], string(value))
	}
	out.body = rest
	return out, nil
}

func validName(b []byte) bool {
	if len(b) == 0 {
		return false
	}
	for _, c := range b {
		if !isTchar(c) {
			return false
		}
	}
	return true
}

func validValue(b []byte) bool {
	for _, c := range b {
		if c < 0x20 && c != '\t' || c == 0x7f {
			return false
		}
	}
	return true
}

// writeStored sends a stored response, marked as replayed.
func writeStored(w http.ResponseWriter, s storedResponse) {
	h := w.Header()
	for name, vs := range s.header {
		h[name] = append([]string(nil), vs...)
	}
	h.Set(ReplayedHeader, "true")
	h.Set(replayedHeader, "true")
	h.Set("Content-Length", strconv.Itoa(len(s.body)))
	w.WriteHeader(s.status)
	_, _ = w.Write(s.body)
}

// errResponseTooLarge is what the recorder's Write returns past the limit.
var errResponseTooLarge = fmt.Errorf("httpint: response over the limit of WithMaxResponseBody: %w", keyedcore.ErrResponseTooLarge)

// recorder buffers one attempt's response. It implements only
// http.ResponseWriter: a keyed route's response is stored whole, so it
// cannot be flushed, hijacked or streamed.
type recorder struct {
	header   http.Header
	status   int
	body     bytes.Buffer
	limit    int
	overflow bool
}

func newRecorder(limit int) *recorder { return &recorder{header: make(http.Header), limit: limit} }

// Header returns the response's header map.
func (r *recorder) Header() http.Header { return r.header }

// WriteHeader records the status; only the first call counts, as with
// net/http (1xx informational statuses are not recorded).
func (r *recorder) WriteHeader(status int) {
	if r.status != 0 || status < 200 || status > 999 {
		return
	}
	r.status = status
}

// Write buffers b, up to the limit; past it, it fails.
func (r *recorder) Write(b []byte) (int, error) {
	if r.status == 0 {
		r.WriteHeader(http.StatusOK)
	}
	if r.overflow || r.body.Len()+len(b) > r.limit {
		r.overflow = true
		return 0, errResponseTooLarge
	}
	return r.body.Write(b)
}

func (r *recorder) statusCode() int {
	if r.status == 0 {
		return http.StatusOK
	}
	return r.status
}

// send writes the recorded response, every header the handler set, to w.
func (r *recorder) send(w http.ResponseWriter) {
	h := w.Header()
	for name, vs := range r.header {
		h[name] = vs
	}
	if _, ok := h["Content-Length"]; !ok {
		h.Set("Content-Length", strconv.Itoa(r.body.Len()))
	}
	w.WriteHeader(r.statusCode())
	_, _ = w.Write(r.body.Bytes())
}

// storedError is the error a stored final response stands for
// (txmiddleware's ErrorCodec Decode).
type storedError struct{ status int }

func (e *storedError) Error() string {
	return "httpint: stored response with status " + strconv.Itoa(e.status)
}

// finalResponse is the work's error for a final status: the codec records
// res.
type finalResponse struct{ res ledger.Result }

func (e *finalResponse) Error() string {
	return fmt.Sprintf("httpint: final response with status %d", e.res.Code)
}

// notStored is the work's error for a status that is not stored; err is
// the error the handler reported, if any.
type notStored struct {
	status int
	err    error
}

func (e *notStored) Error() string {
	if e.err != nil {
		return fmt.Sprintf("httpint: response with status %d not stored: %v", e.status, e.err)
	}
	return fmt.Sprintf("httpint: response with status %d not stored", e.status)
}

func (e *notStored) Unwrap() error { return e.err }

// codec is the txmiddleware.ErrorCodec of the middleware: a final
// response is recorded as it is; a stored status of 400 or more decodes
// to a storedError.
type codec struct{}

// Encode records a final response.
func (codec) Encode(err error) (ledger.Result, bool) {
	var f *finalResponse
	if errors.As(err, &f) {
		return f.res, true
	}
	return ledger.Result{}, false
}

// Decode returns nil for a stored status below 400 (a response, not an
// error) and a storedError otherwise.
func (codec) Decode(r ledger.Result) error {
	if r.Code < 400 {
		return nil
	}
	return &storedError{status: int(r.Code)}
}
