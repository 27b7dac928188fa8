package policy

import (
	"fmt"
	"testing"

	"google.golang.org/grpc/codes"
)

// TestEligibleTable checks every code (0–16) against every kind (keyed split
// by ledger) and every evidence combination (sent × prefix × key): 17 × 5 × 8
// = 680 cases, against a table written out by hand.
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
		why  Reason
	}
	variants := []variant{
		{"no-side-effects", MethodPolicy{Kind: KindNoSideEffects}, 0, ""},
		{"idempotent", MethodPolicy{Kind: KindIdempotent}, 2, ""},
		{"keyed+ledger", MethodPolicy{Kind: KindKeyed, DurableLedger: true}, 4, ""},
		{"keyed-no-ledger", MethodPolicy{Kind: KindKeyed}, -1, ReasonNoLedger},
		{"non-idempotent", MethodPolicy{Kind: KindNonIdempotent}, -1, ReasonNonIdempotent},
	}
	n := 0
	for code := codes.Code(0); code < 17; code++ {
		for _, v := range variants {
			for _, sent := range []bool{false, true} {
				for _, prefix := range []bool{false, true} {
					for _, key := range []bool{false, true} {
						ev := Evidence{Sent: sent, PrefixDelivered: prefix, HasKey: key}
						got := Eligible(v.p, ev, code)
						name := fmt.Sprintf("%s/%s/sent=%v,prefix=%v,key=%v", CodeName(code), v.name, sent, prefix, key)
						n++
						var want string
						var wantReason Reason
						switch {
						case code == codes.OK:
							want, wantReason = N, ReasonSucceeded
						case prefix:
							want, wantReason = N, ReasonPrefixDelivered
						case v.col < 0:
							want, wantReason = N, v.why
							if v.p.Kind == KindKeyed && !key {
								wantReason = ReasonNoKey
							}
						case v.p.Kind == KindKeyed && !key:
							want, wantReason = N, ReasonNoKey
						default:
							col := v.col
							if sent {
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
	if n != 17*5*8 {
		t.Fatalf("ran %d cases", n)
	}
}

func TestEligibleReasons(t *testing.T) {
	idem := MethodPolicy{Kind: KindIdempotent}
	keyed := MethodPolicy{Kind: KindKeyed, DurableLedger: true}
	cases := []struct {
		p    MethodPolicy
		ev   Evidence
		code codes.Code
		want Decision
	}{
		{idem, Evidence{}, codes.Unavailable, Decision{Retry, ReasonNotExecuted}},
		{idem, Evidence{Sent: true}, codes.Unavailable, Decision{Retry, ReasonIdempotent}},
		{keyed, Evidence{HasKey: true}, codes.Unavailable, Decision{Retry, ReasonNotExecuted}},
		{keyed, Evidence{Sent: true, HasKey: true}, codes.Unavailable, Decision{ResolveFirst, ReasonMayHaveRun}},
		{keyed, Evidence{Sent: true, HasKey: true}, codes.DeadlineExceeded, Decision{ResolveFirst, ReasonMayHaveRun}},
		{keyed, Evidence{Sent: true, HasKey: true}, codes.Internal, Decision{Retry, ReasonKeyedReplay}},
		{keyed, Evidence{Sent: true, HasKey: true}, codes.InvalidArgument, Decision{DoNotRetry, ReasonNotRetryable}},
		{idem, Evidence{Sent: true}, codes.Code(99), Decision{DoNotRetry, ReasonNotRetryable}},
		{MethodPolicy{Kind: Kind(42)}, Evidence{}, codes.Unavailable, Decision{DoNotRetry, ReasonNonIdempotent}},
	}
	for _, c := range cases {
		if got := Eligible(c.p, c.ev, c.code); got != c.want {
			t.Errorf("Eligible(%v, %+v, %v) = %v, want %v", c.p.Kind, c.ev, c.code, got, c.want)
		}
	}
	if s := (Decision{ResolveFirst, ReasonMayHaveRun}).String(); s != "resolve-first (may-have-run)" {
		t.Errorf("String = %q", s)
	}
}
