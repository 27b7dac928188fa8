package retry_test

import (
	"context"
	"errors"
	"regexp"
	"testing"
	"time"

	"google.golang.org/grpc/codes"

	"github.com/opledger/opledger/internal/keyedcore/retry"
	"github.com/opledger/opledger/keyed"
	"github.com/opledger/opledger/ledger"
	"github.com/opledger/opledger/policy"
)

// script is a Transport that answers each attempt from a list, in order,
// and records what the loop asked for.
type script struct {
	t       *testing.T
	answers []retry.Attempt
	asked   []string // "run" or "resolve", per attempt
	events  []retry.Event
}

func (s *script) Attempt(resolve, rerun bool) retry.Attempt {
	kind := "run"
	if resolve {
		kind = "resolve"
	}
	if rerun != (!resolve && s.runs() > 0) {
		s.t.Errorf("attempt %d: rerun %v", len(s.asked)+1, rerun)
	}
	s.asked = append(s.asked, kind)
	if len(s.answers) == 0 {
		s.t.Fatalf("attempt %d (%s) past the script", len(s.asked), kind)
	}
	a := s.answers[0]
	s.answers = s.answers[1:]
	return a
}

func (s *script) runs() int {
	n := 0
	for _, k := range s.asked {
		if k == "run" {
			n++
		}
	}
	return n
}

func (s *script) Event(e retry.Event) { s.events = append(s.events, e) }

var errAttempt = errors.New("attempt failed")

// sent is an attempt that reached the server and failed with code and,
// when not nil, the kit server's outcome.
func sent(code codes.Code, o keyed.Outcome) retry.Attempt {
	return retry.Attempt{Err: errAttempt, Code: code, Reason: o.Row().Reason, Evidence: policy.Evidence{Sent: true}}
}

var (
	ok       = retry.Attempt{}
	notFound = sent(codes.NotFound, keyed.NotFound)
	lost     = sent(codes.Unavailable, 0) // the answer was lost after the request went out
)

func config(t *testing.T, owner policy.RetryOwner) *retry.Config {
	t.Helper()
	b, err := policy.NewBudget(policy.BudgetSettings{})
	if err != nil {
		t.Fatal(err)
	}
	return &retry.Config{Owner: owner, Budget: b, Backoff: policy.Backoff{Initial: time.Millisecond, Max: 2 * time.Millisecond},
		MaxAttempts: 3, ResolveWindow: time.Second}
}

var keyedMethod = policy.MethodPolicy{FullMethod: "/pkg.S/Do", Kind: policy.KindKeyed, DurableLedger: true}

func TestLoop(t *testing.T) {
	cases := []struct {
		name    string
		owner   policy.RetryOwner
		p       policy.MethodPolicy
		answers []retry.Attempt
		asked   string // the attempts the loop made
		success string // "" for an error
		outcome keyed.Outcome
		next    keyed.Next
		attach  bool
	}{
		{name: "first attempt", answers: []retry.Attempt{ok}, asked: "run", success: "ok"},
		{name: "replayed", answers: []retry.Attempt{{Replayed: true}}, asked: "run", success: "replayed"},
		{name: "nothing committed, retried", answers: []retry.Attempt{sent(codes.Unavailable, keyed.StorageUnavailable), ok},
			asked: "run run", success: "ok"},
		{name: "commit unknown, resolved", answers: []retry.Attempt{sent(codes.Unavailable, keyed.CommitUnknown), ok},
			asked: "run resolve", success: "resolved"},
		{name: "answer lost, nothing committed, run again", answers: []retry.Attempt{lost, notFound, ok},
			asked: "run resolve run", success: "ok"},
		{name: "final refusal", answers: []retry.Attempt{sent(codes.FailedPrecondition, keyed.KeyReused)},
			asked: "run", outcome: keyed.KeyReused, next: keyed.Stop, attach: true},
		{name: "key expired: stop, no resolve", answers: []retry.Attempt{sent(codes.FailedPrecondition, keyed.KeyExpired)},
			asked: "run", outcome: keyed.KeyExpired, next: keyed.Stop, attach: true},
		{
			// After an unknown outcome, a resolve that finds the key expired
			// is the answer: nothing more is sent.
			name:    "resolve finds the key expired",
			answers: []retry.Attempt{sent(codes.Unavailable, keyed.CommitUnknown), sent(codes.FailedPrecondition, keyed.KeyExpired)},
			asked:   "run resolve", outcome: keyed.KeyExpired, next: keyed.Stop, attach: true,
		},
		{name: "not executed, retried", answers: []retry.Attempt{sent(codes.Unavailable, keyed.NotExecuted), ok},
			asked: "run run", success: "ok"},
		{
			// A refusal in front of the kit with a final code (a bad
			// token) is not retried: another attempt would be refused too.
			name:    "not executed with a final code: stop",
			answers: []retry.Attempt{sent(codes.Unauthenticated, keyed.NotExecuted)},
			asked:   "run", outcome: keyed.NotExecuted, next: keyed.Retry, attach: true,
		},
		{
			// Step 6: an earlier run may have committed, so the final
			// refusal of the last run is not the call's answer.
			name:    "not executed with a final code after a run in progress: resolve",
			answers: []retry.Attempt{sent(codes.Aborted, keyed.InProgress), sent(codes.PermissionDenied, keyed.NotExecuted), ok},
			asked:   "run run resolve", success: "resolved",
		},
		{name: "the server's own answer", answers: []retry.Attempt{sent(codes.InvalidArgument, 0)},
			asked: "run", outcome: keyed.ServerAnswered, next: keyed.Stop, attach: true},
		{name: "never sent", answers: []retry.Attempt{{Err: errAttempt, Code: codes.Unavailable}, {Err: errAttempt, Code: codes.Unavailable}, {Err: errAttempt, Code: codes.Unavailable}},
			asked: "run run run", outcome: keyed.NotSent, next: keyed.Retry, attach: true},
		{
			// A definite "nothing committed" speaks for its own attempt only:
			// the first run was in progress (it may commit), so the loop
			// resolves before it answers, and finds it committed.
			name:    "nothing committed by the last run, an earlier one committed",
			answers: []retry.Attempt{sent(codes.Aborted, keyed.InProgress), sent(codes.Internal, keyed.NotStorable), ok},
			asked:   "run run resolve", success: "resolved",
		},
		{
			name:    "resolve proves nothing committed after the runs ran out",
			answers: []retry.Attempt{lost, notFound, lost, notFound, lost, notFound},
			asked:   "run resolve run resolve run resolve", outcome: keyed.NotFound, next: keyed.Retry, attach: true,
		},
		{
			// With the transport's own retries underneath, an earlier
			// attempt may have committed: the loop resolves.
			name: "service config: earlier attempt may have committed", owner: policy.OwnerServiceConfig,
			answers: []retry.Attempt{func() retry.Attempt {
				a := sent(codes.Unavailable, keyed.StorageUnavailable)
				a.EarlierMayHaveCommitted, a.Wire = true, 3
				return a
			}(), ok},
			asked: "run resolve", success: "resolved",
		},
		{name: "mesh: one attempt, no resolve", owner: policy.OwnerMesh, answers: []retry.Attempt{lost},
			asked: "run", outcome: keyed.CallOutcomeUnknown, next: keyed.Resolve, attach: true},
		{name: "not keyed, not retried", p: policy.MethodPolicy{FullMethod: "/pkg.S/Get", Kind: policy.KindNonIdempotent},
			answers: []retry.Attempt{lost}, asked: "run"},
		{name: "idempotent, unknown after the runs", p: policy.MethodPolicy{FullMethod: "/pkg.S/Put", Kind: policy.KindIdempotent},
			answers: []retry.Attempt{lost, lost, lost}, asked: "run run run", outcome: keyed.CallOutcomeUnknown, next: keyed.Retry, attach: true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			owner := c.owner
			if owner == 0 {
				owner = policy.OwnerApplication
			}
			p, key := c.p, ""
			if p.FullMethod == "" {
				p = keyedMethod
			}
			if p.Kind == policy.KindKeyed {
				key = "k"
			}
			s := &script{t: t, answers: c.answers}
			res := retry.Do(context.Background(), config(t, owner), p, key, s)
			got := ""
			for i, k := range s.asked {
				if i > 0 {
					got += " "
				}
				got += k
			}
			if got != c.asked || len(s.answers) != 0 {
				t.Errorf("attempts %q, want %q (%d answers left)", got, c.asked, len(s.answers))
			}
			if c.success != "" {
				if res.Err != nil || res.Success != c.success {
					t.Fatalf("result %+v, want success %q", res, c.success)
				}
				return
			}
			if res.Err == nil || res.Attach != c.attach {
				t.Fatalf("result %+v, want an error, attach %v", res, c.attach)
			}
			if c.attach && (res.Info.Outcome != c.outcome || res.Info.Next != c.next || res.Info.Key != key || res.Info.Attempts < len(s.asked)) {
				t.Errorf("info %+v, want %s, %s", res.Info, c.outcome, c.next)
			}
		})
	}
}

// TestDeadlineEndsUnknown: a keyed call whose every answer is lost ends at
// its deadline, after resolves, with its outcome unknown and the key.
func TestDeadlineEndsUnknown(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 150*time.Millisecond)
	defer cancel()
	s := &endless{a: lost}
	res := retry.Do(ctx, config(t, policy.OwnerApplication), keyedMethod, "k", s)
	if !res.Ambiguous() || res.Info.Key != "k" || res.Info.Resolves == 0 || res.Info.Decision != "deadline" {
		t.Fatalf("result %+v", res)
	}
}

type endless struct{ a retry.Attempt }

func (e *endless) Attempt(bool, bool) retry.Attempt { return e.a }
func (e *endless) Event(retry.Event)                {}

// TestBudgetRefusal: an empty budget stops the runs; the event says so.
func TestBudgetRefusal(t *testing.T) {
	cfg := config(t, policy.OwnerApplication)
	b, err := policy.NewBudget(policy.BudgetSettings{NoPercent: true, NoMinRetries: true})
	if err != nil {
		t.Fatal(err)
	}
	cfg.Budget = b
	s := &script{t: t, answers: []retry.Attempt{sent(codes.Unavailable, keyed.StorageUnavailable)}}
	res := retry.Do(context.Background(), cfg, keyedMethod, "k", s)
	if res.Info.Decision != "budget-exhausted" || len(s.events) != 1 || s.events[0] != retry.BudgetRefused {
		t.Fatalf("result %+v, events %v", res, s.events)
	}
}

func TestInfoMetadata(t *testing.T) {
	in := retry.Info{Outcome: keyed.CallOutcomeUnknown, Next: keyed.Resolve, Key: "k", Attempts: 3, Resolves: 1, Decision: "deadline"}
	out, ok := retry.InfoOf(keyed.CallOutcomeUnknown.Row().Reason, in.Metadata())
	if !ok || out != in {
		t.Fatalf("%+v, %v; want %+v", out, ok, in)
	}
	if _, ok := retry.InfoOf("X", map[string]string{}); ok {
		t.Error("InfoOf without attempts")
	}
	if got := in.Suffix(); got != " (after 3 attempts, 1 of them resolve: deadline)" {
		t.Errorf("suffix %q", got)
	}
	for _, n := range []keyed.Next{keyed.Stop, keyed.Retry, keyed.Resolve} {
		if retry.NextOf(retry.Action(n)) != n {
			t.Errorf("%s does not round-trip", n)
		}
	}
}

func TestKeyFor(t *testing.T) {
	ctx := context.Background()
	if k := retry.KeyFor(ctx, keyedMethod, "mine", true); k != "mine" {
		t.Errorf("set key: %q", k)
	}
	if k := retry.KeyFor(ctx, policy.MethodPolicy{Kind: policy.KindIdempotent}, "", true); k != "" {
		t.Errorf("not keyed: %q", k)
	}
	if a, b := retry.KeyFor(ctx, keyedMethod, "", true), retry.KeyFor(ctx, keyedMethod, "", true); a == "" || a == b {
		t.Errorf("outside a keyed call: %q, %q; want two new keys", a, b)
	}
}

// TestKeyForRequest: for a request with an AIP-155 request_id the
// caller's key wins, then the request's own request_id, then (inside a
// keyed call, with derive) the derived key, else a new UUID that carries
// its birth (version 7, 36 characters).
func TestKeyForRequest(t *testing.T) {
	ctx := context.Background()
	if k := retry.KeyForRequest(ctx, keyedMethod, "mine", "theirs", true); k != "mine" {
		t.Errorf("set key: %q", k)
	}
	if k := retry.KeyForRequest(ctx, keyedMethod, "", "theirs", true); k != "theirs" {
		t.Errorf("request_id: %q", k)
	}
	if k := retry.KeyForRequest(ctx, policy.MethodPolicy{Kind: policy.KindNonIdempotent}, "", "theirs", true); k != "" {
		t.Errorf("not keyed: %q", k)
	}
	uuid := regexp.MustCompile(`^[0-9a-f]{8}-[0-9a-f]{4}-7[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$`)
	a, b := retry.KeyForRequest(ctx, keyedMethod, "", "", true), retry.KeyForRequest(ctx, keyedMethod, "", "", true)
	if !uuid.MatchString(a) || !uuid.MatchString(b) || a == b {
		t.Errorf("new keys %q, %q; want two UUIDv7s", a, b)
	}
	id, err := ledger.NewIdentity("alice", "/pkg.S/Up", "upstream-key")
	if err != nil {
		t.Fatal(err)
	}
	op := ledger.ContextWithOperation(ctx, id)
	want, _ := keyed.DownstreamKey(op, keyedMethod.FullMethod)
	if k := retry.KeyForRequest(op, keyedMethod, "", "", true); k != want || want == "" {
		t.Errorf("inside a keyed call: %q, want the derived %q", k, want)
	}
	if k := retry.KeyForRequest(op, keyedMethod, "", "", false); !uuid.MatchString(k) {
		t.Errorf("inside a keyed call without derive: %q, want a UUID", k)
	}
}

// FuzzInfoOf: any ErrorInfo metadata reads without panicking, and what
// Metadata writes reads back.
func FuzzInfoOf(f *testing.F) {
	f.Add("CALL_OUTCOME_UNKNOWN", "3", "1", "resolve-first", "k", "deadline")
	f.Add("", "x", "-1", "", "", "")
	f.Fuzz(func(t *testing.T, reason, attempts, resolves, next, key, decision string) {
		md := map[string]string{"attempts": attempts, "resolves": resolves, "next": next, "key": key, "decision": decision}
		i, ok := retry.InfoOf(reason, md)
		if !ok {
			t.Fatal("metadata with attempts not read")
		}
		back, ok := retry.InfoOf(reason, i.Metadata())
		if !ok || back != i {
			t.Fatalf("%+v read back as %+v", i, back)
		}
	})
}

// TestResolve: an application's resolve loop asks again while the answer
// is lost, the server's database fails or the key is in flight; it stops
// at an answer (a stored response, nothing committed, a stored final
// error), after ResolveTries without a deadline, or when the context
// ends.
func TestResolve(t *testing.T) {
	t.Parallel()
	now := []string{"0"} // the server's pushback: ask again at once
	lost := retry.Attempt{Err: errAttempt, Code: codes.Unavailable, Pushback: now}
	inFlight := sent(codes.Aborted, keyed.InProgress)
	inFlight.Pushback = now
	storage := sent(codes.Unavailable, keyed.StorageUnavailable)
	storage.Pushback = now
	notFound := sent(codes.NotFound, keyed.NotFound)
	final := retry.Attempt{Err: errAttempt, Code: codes.InvalidArgument, ReplayedError: true, Pushback: now}
	for _, tc := range []struct {
		name    string
		answers []retry.Attempt
		sends   int
		ok      bool
	}{
		{"answered after losses", []retry.Attempt{lost, inFlight, storage, {}}, 4, true},
		{"nothing committed", []retry.Attempt{lost, notFound, {}}, 2, false},
		{"a stored final error", []retry.Attempt{inFlight, final, {}}, 2, false},
		{"no deadline: ResolveTries", append(make([]retry.Attempt, 0, 12), lost, lost, lost, lost, lost, lost, lost, lost, lost, lost, lost, lost), retry.ResolveTries, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			sends := 0
			err := retry.Resolve(context.Background(), func() retry.Attempt {
				a := tc.answers[sends]
				sends++
				return a
			})
			if sends != tc.sends || (err == nil) != tc.ok {
				t.Errorf("%d sends, err %v; want %d sends, success %v", sends, err, tc.sends, tc.ok)
			}
		})
	}
	t.Run("context ends", func(t *testing.T) {
		ctx, cancel := context.WithCancel(context.Background())
		sends := 0
		err := retry.Resolve(ctx, func() retry.Attempt {
			sends++
			cancel()
			return lost
		})
		if sends != 1 || !errors.Is(err, errAttempt) {
			t.Errorf("%d sends, err %v; want 1 and the attempt's error", sends, err)
		}
	})
}
