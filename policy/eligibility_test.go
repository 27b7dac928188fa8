package policy

import (
	"fmt"
	"testing"

	"google.golang.org/grpc/codes"
)

// TestEligibleTable checks every code (0–16) against every kind (keyed split
// by ledger), every shape and every evidence combination (sent × headers ×
// message × key): 17 × 5 × 4 × 16 = 5440 cases, against a table written out
// by hand.
func TestEligibleTable(t *testing.T) {
	const (
		R = "retry"
		N = "do-not-retry"
		F = "resolve-first"
	)
	// For a method that passes the gates (not non-idempotent, no prefix
	// delivered, keyed with key and ledger), the decision per code for:
	// no-side-effects unsent, sent; idempotent unsent, sent; keyed unsent, sent.
	type row [6]string
	table := map[codes.Code]row{
		codes.OK:                 {N, N, N, N, N, N},
		codes.Canceled:           {N, N, N, N, N, N},
		codes.Unknown:            {R, R, R, R, R, R},
		codes.InvalidArgument:    {N, N, N, N, N, N},
		codes.DeadlineExceeded:   {R, R, R, R, F, F},
		codes.NotFound:           {N, N, N, N, N, N},
		codes.AlreadyExists:      {N, N, N, N, N, N},
		codes.PermissionDenied:   {N, N, N, N, N, N},
		codes.ResourceExhausted:  {R, R, R, R, R, R},
		codes.FailedPrecondition: {N, N, N, N, N, N},
		codes.Aborted:            {R, R, R, R, R, R},
		codes.OutOfRange:         {N, N, N, N, N, N},
		codes.Unimplemented:      {N, N, N, N, N, N},
		codes.Internal:           {R, R, R, R, R, R},
		codes.Unavailable:        {R, R, R, R, R, F},
		codes.DataLoss:           {N, N, N, N, N, N},
		codes.Unauthenticated:    {N, N, N, N, N, N},
	}
	if len(table) != 17 {
		t.Fatalf("table has %d codes", len(table))
	}
	type variant struct {
		name string
		p    MethodPolicy
		col  int // column offset in row, or -1 for "never"
		why  DecisionReason
	}
	variants := []variant{
		{"no-side-effects", MethodPolicy{Kind: KindNoSideEffects}, 0, ""},
		{"idempotent", MethodPolicy{Kind: KindIdempotent}, 2, ""},
		{"keyed+ledger", MethodPolicy{Kind: KindKeyed, DurableLedger: true}, 4, ""},
		{"keyed-no-ledger", MethodPolicy{Kind: KindKeyed}, -1, reasonNoLedger},
		{"non-idempotent", MethodPolicy{Kind: KindNonIdempotent}, -1, reasonNonIdempotent},
	}
	shapes := []Shape{ShapeUnary, ShapeClientStream, ShapeServerStream, ShapeBidiStream}
	bools := []bool{false, true}
	n := 0
	for code := codes.Code(0); code < 17; code++ {
		for _, v := range variants {
			for _, shape := range shapes {
				p := v.p
				p.Shape = shape
				for _, sent := range bools {
					for _, headers := range bools {
						for _, message := range bools {
							for _, key := range bools {
								ev := Evidence{Sent: sent, HeadersReceived: headers, MessageReceived: message, HasKey: key}
								got := Eligible(p, ev, code)
								name := fmt.Sprintf("%v/%s/%s/sent=%v,headers=%v,message=%v,key=%v", code, v.name, shape, sent, headers, message, key)
								n++
								var want string
								var wantReason DecisionReason
								switch {
								case code == codes.OK:
									want, wantReason = N, reasonSucceeded
								case (message || headers) && shape != ShapeUnary:
									want, wantReason = N, ReasonPrefixDelivered
								case v.col < 0:
									want, wantReason = N, v.why
									if v.p.Kind == KindKeyed && !key {
										wantReason = reasonNoKey
									}
								case v.p.Kind == KindKeyed && !key:
									want, wantReason = N, reasonNoKey
								default:
									// Headers or a message of a unary call: not
									// a prefix, but proof that the request was
									// sent.
									col := v.col
									if sent || headers || message {
										col++
									}
									want = table[code][col]
								}
								if got.Action.String() != want {
									t.Errorf("%s: got %v, want %s", name, got, want)
									continue
								}
								if wantReason != "" && got.Reason != wantReason {
									t.Errorf("%s: reason %q, want %q", name, got.Reason, wantReason)
								}
								if got.Reason == "" {
									t.Errorf("%s: empty reason", name)
								}
							}
						}
					}
				}
			}
		}
	}
	if n != 17*5*4*16 {
		t.Fatalf("ran %d cases", n)
	}
}

func TestEligibleReasons(t *testing.T) {
	idem := MethodPolicy{Kind: KindIdempotent}
	keyed := MethodPolicy{Kind: KindKeyed, DurableLedger: true}
	watch := MethodPolicy{Kind: KindNoSideEffects, Shape: ShapeServerStream}
	cases := []struct {
		p    MethodPolicy
		ev   Evidence
		code codes.Code
		want Decision
	}{
		{idem, Evidence{}, codes.Unavailable, Decision{Retry, reasonNotExecuted}},
		{idem, Evidence{Sent: true}, codes.Unavailable, Decision{Retry, reasonIdempotent}},
		{keyed, Evidence{HasKey: true}, codes.Unavailable, Decision{Retry, reasonNotExecuted}},
		{keyed, Evidence{Sent: true, HasKey: true}, codes.Unavailable, Decision{ResolveFirst, reasonMayHaveRun}},
		{keyed, Evidence{Sent: true, HasKey: true}, codes.DeadlineExceeded, Decision{ResolveFirst, reasonMayHaveRun}},
		{keyed, Evidence{Sent: true, HasKey: true}, codes.Internal, Decision{Retry, reasonKeyedReplay}},
		{keyed, Evidence{Sent: true, HasKey: true}, codes.InvalidArgument, Decision{DoNotRetry, reasonNotRetryable}},
		{idem, Evidence{Sent: true}, codes.Code(99), Decision{DoNotRetry, reasonNotRetryable}},
		{MethodPolicy{Kind: Kind(42)}, Evidence{}, codes.Unavailable, Decision{DoNotRetry, reasonNonIdempotent}},

		// Response headers without a message: for a unary method the
		// handler finished and the answer was lost on the way back, so a
		// keyed mutation resolves (the server returns the stored answer).
		{keyed, Evidence{Sent: true, HeadersReceived: true, HasKey: true}, codes.Unavailable, Decision{ResolveFirst, reasonMayHaveRun}},
		{keyed, Evidence{Sent: true, HeadersReceived: true, HasKey: true}, codes.DeadlineExceeded, Decision{ResolveFirst, reasonMayHaveRun}},
		{keyed, Evidence{Sent: true, HeadersReceived: true, HasKey: true}, codes.Internal, Decision{Retry, reasonKeyedReplay}},
		{keyed, Evidence{Sent: true, HeadersReceived: true}, codes.Unavailable, Decision{DoNotRetry, reasonNoKey}},
		{idem, Evidence{Sent: true, HeadersReceived: true}, codes.Unavailable, Decision{Retry, reasonIdempotent}},
		{MethodPolicy{Kind: KindNonIdempotent}, Evidence{Sent: true, HeadersReceived: true}, codes.Unavailable, Decision{DoNotRetry, reasonNonIdempotent}},
		// Headers imply that the request was sent: never "not executed".
		{keyed, Evidence{HeadersReceived: true, HasKey: true}, codes.Unavailable, Decision{ResolveFirst, reasonMayHaveRun}},
		{idem, Evidence{HeadersReceived: true}, codes.Unavailable, Decision{Retry, reasonIdempotent}},
		// A unary response message that did not reach the caller (its status
		// was lost, or something below the caller failed the call after it)
		// is no prefix either: a keyed mutation resolves.
		{keyed, Evidence{MessageReceived: true, HasKey: true}, codes.Unavailable, Decision{ResolveFirst, reasonMayHaveRun}},
		{keyed, Evidence{Sent: true, HeadersReceived: true, MessageReceived: true, HasKey: true}, codes.Unavailable, Decision{ResolveFirst, reasonMayHaveRun}},
		{idem, Evidence{Sent: true, MessageReceived: true}, codes.Unavailable, Decision{Retry, reasonIdempotent}},
		// For a stream a message is a delivered prefix.
		{watch, Evidence{Sent: true, HeadersReceived: true, MessageReceived: true}, codes.Unavailable, Decision{DoNotRetry, ReasonPrefixDelivered}},
		{watch, Evidence{Sent: true, MessageReceived: true}, codes.Unavailable, Decision{DoNotRetry, ReasonPrefixDelivered}},
		// For a stream, headers alone are a delivered prefix: the caller
		// may already have acted on them.
		{watch, Evidence{Sent: true, HeadersReceived: true}, codes.Unavailable, Decision{DoNotRetry, ReasonPrefixDelivered}},
		{MethodPolicy{Kind: KindIdempotent, Shape: ShapeBidiStream}, Evidence{Sent: true, HeadersReceived: true}, codes.Internal, Decision{DoNotRetry, ReasonPrefixDelivered}},
		{MethodPolicy{Kind: KindKeyed, DurableLedger: true, Shape: ShapeClientStream}, Evidence{HeadersReceived: true, HasKey: true}, codes.Unavailable, Decision{DoNotRetry, ReasonPrefixDelivered}},
		{watch, Evidence{Sent: true}, codes.Unavailable, Decision{Retry, reasonIdempotent}},
		{watch, Evidence{}, codes.Unavailable, Decision{Retry, reasonNotExecuted}},
	}
	for _, c := range cases {
		if got := Eligible(c.p, c.ev, c.code); got != c.want {
			t.Errorf("Eligible(%v %v, %+v, %v) = %v, want %v", c.p.Kind, c.p.Shape, c.ev, c.code, got, c.want)
		}
	}
	if s := (Decision{ResolveFirst, reasonMayHaveRun}).String(); s != "resolve-first (may-have-run)" {
		t.Errorf("String = %q", s)
	}
}
