package payments

import (
	"errors"
	"io"
	"net/http"
	"net/http/httptrace"
)

// ErrNotSent is what the fault injector's RoundTripper returns for a
// request it failed before sending it.
var ErrNotSent = errors.New("payments: injected: failed before send")

// RoundTripper is the client side of the faults over HTTP, as
// UnaryClientInterceptor is for gRPC: it fails requests before they are
// sent (ErrNotSent; not during an outage), and loses answers after the
// response headers (the body is closed unread) or after the whole
// response (read, then thrown away).
func (f *Faults) RoundTripper(next http.RoundTripper) http.RoundTripper {
	return roundTripFunc(func(r *http.Request) (*http.Response, error) {
		if f.outage.Load() {
			return next.RoundTrip(r)
		}
		if f.roll(f.set.FailBeforeSend) {
			f.failed.Add(1)
			// As a request whose connection could not be had: a client that
			// traces its requests (connectint's) sees it asked for one and
			// never wrote the request.
			if tr := httptrace.ContextClientTrace(r.Context()); tr != nil && tr.GetConn != nil {
				tr.GetConn(r.URL.Host)
			}
			return nil, ErrNotSent
		}
		afterHeaders := f.roll(f.set.LoseAfterHeaders)
		resp, err := next.RoundTrip(r)
		if err != nil {
			return nil, err
		}
		if afterHeaders {
			resp.Body.Close()
			f.afterHeaders.Add(1)
			return nil, errors.New("payments: injected: connection lost after the response headers")
		}
		if f.roll(f.set.LoseAfterResponse) {
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			f.afterResponse.Add(1)
			return nil, errors.New("payments: injected: response lost after it arrived")
		}
		return resp, nil
	})
}

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// HTTPMiddleware is the server side of the faults over HTTP, in front of
// the httpint middleware: during an outage it answers 503 without running
// anything, it delays some requests, and it loses the answers of others
// after they ran and committed (the connection is aborted, as a proxy
// that lost the response would).
func (f *Faults) HTTPMiddleware(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if f.RefuseInOutage() {
			writeHTTPProblem(w, http.StatusServiceUnavailable, "injected: outage; the request was not run")
			return
		}
		if f.Delay(r.Context()) != nil {
			return
		}
		if f.roll(f.set.DropAfterCommit) {
			next.ServeHTTP(discardWriter{h: http.Header{}}, r)
			f.dropped.Add(1)
			panic(http.ErrAbortHandler) // net/http closes the connection without an answer
		}
		f.returned.Add(1)
		next.ServeHTTP(w, r)
	})
}

type discardWriter struct{ h http.Header }

func (d discardWriter) Header() http.Header         { return d.h }
func (d discardWriter) Write(b []byte) (int, error) { return len(b), nil }
func (d discardWriter) WriteHeader(int)             {}
