package payments

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/opledger/opledger/httpint"
	"github.com/opledger/opledger/internal/wait"
	"github.com/opledger/opledger/keyed"
	"github.com/opledger/opledger/policy"
)

// HTTPClientSettings configure an HTTPClient.
type HTTPClientSettings struct {
	// Budget bounds the retries (resolves do not spend it); nil means
	// none. A budget is funded by each call's success.
	Budget *policy.Budget
	// Backoff is the delay between attempts; Retry-After, when an answer
	// has one, replaces it.
	Backoff policy.Backoff
	// MaxAttempts bounds the runs of one call (resolves not counted);
	// default 5.
	MaxAttempts int
}

// HTTPClientStats are an HTTPClient's counters: logical calls, requests
// sent (resolves included), runs after the first, resolves, calls whose
// outcome a resolve returned, replayed answers, retries the budget
// refused, and calls that ended with their outcome unknown.
type HTTPClientStats struct {
	Calls, Attempts, Retries, Resolves, Resolved, Replays, BudgetRefusals, Ambiguous int64
}

// HTTPClient is the example's client of POST /transfers: the retry owner
// of its requests. Each logical call sends one key on every attempt; an
// answer the middleware's outcome table says to retry is retried (within
// the budget and attempt bound); an attempt whose outcome is unknown (a
// lost answer) is resolved with Idempotency-Resolve before anything else.
// It is safe for concurrent use.
type HTTPClient struct {
	base  string
	token string
	hc    *http.Client
	set   HTTPClientSettings

	calls, attempts, retries, resolves, resolved, replays, refusals, ambiguous atomic.Int64
}

// NewHTTPClient returns a client of the HTTP service at base
// ("http://host:port") that authenticates with the bearer token token
// (see Tokens: the service takes the caller from it) and sends requests
// through rt.
func NewHTTPClient(base, token string, rt http.RoundTripper, s HTTPClientSettings) *HTTPClient {
	if s.MaxAttempts <= 0 {
		s.MaxAttempts = 5
	}
	return &HTTPClient{base: base, token: token, hc: &http.Client{Transport: rt}, set: s}
}

// Stats returns the counters.
func (c *HTTPClient) Stats() HTTPClientStats {
	return HTTPClientStats{Calls: c.calls.Load(), Attempts: c.attempts.Load(), Retries: c.retries.Load(),
		Resolves: c.resolves.Load(), Resolved: c.resolved.Load(), Replays: c.replays.Load(),
		BudgetRefusals: c.refusals.Load(), Ambiguous: c.ambiguous.Load()}
}

// OutcomeUnknown is HTTPError.Outcome when the call ended before its
// outcome could be learned; OutcomeNotSent when the last attempt never
// left the client; OutcomeHandler when the handler answered with a
// status of its own.
const (
	OutcomeUnknown = "outcome-unknown"
	OutcomeNotSent = "not-sent"
	OutcomeHandler = "handler"
)

// HTTPError is the error of a logical call that did not get its
// transfer.
type HTTPError struct {
	// Status is the last answer's status, 0 when there was none.
	Status int
	// Outcome is the middleware's outcome name (httpint.Renderings), or
	// OutcomeHandler, OutcomeNotSent or OutcomeUnknown.
	Outcome string
	// Next is what the caller can do: Retry (nothing was committed),
	// Resolve (unknown: resolve with Key later) or Stop (the answer).
	Next keyed.Next
	// Key is the call's idempotency key.
	Key string
	// Attempts counts requests sent, resolves included; Resolves the
	// resolves among them.
	Attempts, Resolves int
	// Decision says why the client stopped.
	Decision string
}

// Error describes the call without its key.
func (e *HTTPError) Error() string {
	return fmt.Sprintf("payments: transfer over HTTP: status %d, %s (after %d attempts, %d resolves: %s; next: %s)",
		e.Status, e.Outcome, e.Attempts, e.Resolves, e.Decision, e.Next)
}

// reading is what one attempt's answer says.
type reading struct {
	ok         bool
	reply      TransferJSON
	replayed   bool
	status     int
	outcome    string
	next       keyed.Next
	retryAfter time.Duration
}

// Transfer makes one logical transfer with key.
func (c *HTTPClient) Transfer(ctx context.Context, key string, t TransferJSON) (TransferJSON, error) {
	c.calls.Add(1)
	body, err := json.Marshal(t)
	if err != nil {
		return TransferJSON{}, err
	}
	e := &HTTPError{Key: key}
	fail := func(rd reading, decision string) (TransferJSON, error) {
		e.Status, e.Outcome, e.Next, e.Decision = rd.status, rd.outcome, rd.next, decision
		if rd.outcome == OutcomeUnknown {
			c.ambiguous.Add(1)
		}
		return TransferJSON{}, e
	}
	done := func(rd reading) (TransferJSON, error) {
		if c.set.Budget != nil {
			c.set.Budget.Deposit()
		}
		if rd.replayed {
			c.replays.Add(1)
		}
		return rd.reply, nil
	}
	runs := 0
	for {
		runs++
		e.Attempts++
		c.attempts.Add(1)
		rd := c.send(ctx, key, body, false)
		if rd.ok {
			return done(rd)
		}
		if rd.next == keyed.Resolve {
			// The outcome is unknown: resolve until it is known. Resolves
			// only read, so they spend no budget.
			for n := 1; ; n++ {
				if err := c.wait(ctx, n, rd.retryAfter); err != nil {
					return fail(rd, "deadline")
				}
				e.Attempts++
				e.Resolves++
				c.attempts.Add(1)
				c.resolves.Add(1)
				r := c.send(ctx, key, nil, true)
				switch {
				case r.ok:
					c.resolved.Add(1)
					return done(r)
				case r.outcome == keyed.NotFound.String():
					rd = reading{status: r.status, outcome: r.outcome, next: keyed.Retry}
				case r.next == keyed.Stop:
					return fail(r, "resolved") // a stored answer, or a refusal
				default:
					rd.retryAfter = r.retryAfter
					continue // still unknown: ask again
				}
				break
			}
		}
		if rd.next == keyed.Stop {
			return fail(rd, "answered")
		}
		// Nothing was committed: run again, if the bounds allow.
		if runs >= c.set.MaxAttempts {
			return fail(rd, "max-attempts")
		}
		if c.set.Budget != nil && !c.set.Budget.TryWithdraw() {
			c.refusals.Add(1)
			return fail(rd, "budget-exhausted")
		}
		c.retries.Add(1)
		if err := c.wait(ctx, runs, rd.retryAfter); err != nil {
			return fail(rd, "deadline")
		}
	}
}

// Resolve asks once for the stored outcome of key: the transfer and true,
// false when nothing was committed, or an error.
func (c *HTTPClient) Resolve(ctx context.Context, key string) (TransferJSON, bool, error) {
	rd := c.send(ctx, key, nil, true)
	switch {
	case rd.ok:
		return rd.reply, true, nil
	case rd.outcome == keyed.NotFound.String():
		return TransferJSON{}, false, nil
	}
	return TransferJSON{}, false, &HTTPError{Status: rd.status, Outcome: rd.outcome, Next: rd.next, Key: key, Attempts: 1, Resolves: 1, Decision: "resolve"}
}

func (c *HTTPClient) wait(ctx context.Context, n int, retryAfter time.Duration) error {
	d := c.set.Backoff.Delay(n)
	if retryAfter > 0 {
		d = retryAfter
	}
	if dl, ok := ctx.Deadline(); ok && time.Until(dl) <= d {
		return context.DeadlineExceeded
	}
	return wait.Sleep(ctx, d)
}

// send makes one attempt (or resolve) and reads its answer.
func (c *HTTPClient) send(ctx context.Context, key string, body []byte, resolve bool) reading {
	r, err := http.NewRequestWithContext(ctx, http.MethodPost, c.base+"/transfers", bytes.NewReader(body))
	if err != nil {
		return reading{outcome: OutcomeNotSent, next: keyed.Stop}
	}
	// No body to rewind: net/http's Transport would otherwise resend a
	// request with an Idempotency-Key on a broken reused connection by
	// itself, a second retry owner under this one.
	r.GetBody = nil
	field, err := httpint.FormatKey(key)
	if err != nil {
		return reading{outcome: keyed.KeyInvalid.String(), next: keyed.Stop}
	}
	r.Header.Set(httpint.KeyHeader, field)
	r.Header.Set("Authorization", "Bearer "+c.token)
	r.Header.Set("Content-Type", "application/json")
	if resolve {
		r.Header.Set(httpint.ResolveHeader, "1")
	}
	resp, err := c.hc.Do(r)
	if err != nil {
		if errors.Is(err, ErrNotSent) {
			return reading{outcome: OutcomeNotSent, next: keyed.Retry}
		}
		return reading{outcome: OutcomeUnknown, next: keyed.Resolve}
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return reading{status: resp.StatusCode, outcome: OutcomeUnknown, next: keyed.Resolve}
	}
	rd := reading{status: resp.StatusCode, replayed: resp.Header.Get(httpint.ReplayedHeader) == "true"}
	if s, err := strconv.Atoi(resp.Header.Get("Retry-After")); err == nil && s > 0 {
		rd.retryAfter = time.Duration(s) * time.Second
	}
	if resp.StatusCode >= 200 && resp.StatusCode < 300 {
		if err := json.Unmarshal(b, &rd.reply); err != nil {
			return reading{status: resp.StatusCode, outcome: OutcomeHandler, next: keyed.Stop}
		}
		rd.ok = true
		return rd
	}
	var p httpint.Problem
	if resp.Header.Get("Content-Type") == httpint.ProblemContentType && json.Unmarshal(b, &p) == nil {
		if o, ok := httpint.RenderingOf(p.Type); ok {
			rd.outcome, rd.next = o.Name, o.Next
			return rd
		}
	}
	rd.outcome = OutcomeHandler
	switch {
	case resp.StatusCode == http.StatusBadGateway, resp.StatusCode == http.StatusGatewayTimeout:
		rd.outcome, rd.next = OutcomeUnknown, keyed.Resolve // a proxy may have lost a committed answer
	case resp.StatusCode >= 500:
		rd.next = keyed.Retry // the middleware never stores a 5xx: nothing committed
	default:
		rd.next = keyed.Stop // the handler's answer
	}
	return rd
}
