package retry

import (
	"strconv"

	"google.golang.org/genproto/googleapis/rpc/errdetails"

	"github.com/opledger/opledger/keyed"
	"github.com/opledger/opledger/policy"
)

// Action returns policy's name of n: policy.DoNotRetry for keyed.Stop,
// policy.Retry, policy.ResolveFirst for keyed.Resolve.
func Action(n keyed.Next) policy.Action {
	switch n {
	case keyed.Retry:
		return policy.Retry
	case keyed.Resolve:
		return policy.ResolveFirst
	}
	return policy.DoNotRetry
}

// NextOf returns the classification's name of a: keyed.Stop for
// policy.DoNotRetry.
func NextOf(a policy.Action) keyed.Next {
	switch a {
	case policy.Retry:
		return keyed.Retry
	case policy.ResolveFirst:
		return keyed.Resolve
	}
	return keyed.Stop
}

// The keys of an Info's metadata (see Info.Metadata).
const (
	metaAttempts = "attempts"
	metaResolves = "resolves"
	metaNext     = "next"
	metaKey      = "key"
	metaDecision = "decision"
)

// Metadata is the Info as the ErrorInfo metadata the client adds to the
// error it returns (its reason is the outcome's): attempts, resolves,
// next (policy's name of the action), decision and, for a keyed call,
// key. Every transport whose errors carry ErrorInfo details writes it so.
func (i Info) Metadata() map[string]string {
	md := map[string]string{
		metaAttempts: strconv.Itoa(i.Attempts),
		metaResolves: strconv.Itoa(i.Resolves),
		metaNext:     Action(i.Next).String(),
		metaDecision: i.Decision,
	}
	if i.Key != "" {
		md[metaKey] = i.Key
	}
	return md
}

// InfoOf reads back what Metadata wrote in an ErrorInfo with reason, and
// false when md is not a client's (it has no attempt count).
func InfoOf(reason string, md map[string]string) (Info, bool) {
	if _, ok := md[metaAttempts]; !ok {
		return Info{}, false
	}
	i := Info{Key: md[metaKey], Decision: md[metaDecision], Next: keyed.Stop}
	i.Outcome, _ = keyed.OfReason(reason)
	i.Attempts, _ = strconv.Atoi(md[metaAttempts])
	i.Resolves, _ = strconv.Atoi(md[metaResolves])
	switch md[metaNext] {
	case policy.Retry.String():
		i.Next = keyed.Retry
	case policy.ResolveFirst.String():
		i.Next = keyed.Resolve
	}
	return i, true
}

// Suffix is what the client adds to the message of the error it returns:
// " (after 3 attempts, 1 of them resolve: max-attempts)".
func (i Info) Suffix() string {
	s := " (after " + strconv.Itoa(i.Attempts) + " attempt"
	if i.Attempts != 1 {
		s += "s"
	}
	if i.Resolves > 0 {
		s += ", " + strconv.Itoa(i.Resolves) + " of them resolve"
		if i.Resolves != 1 {
			s += "s"
		}
	}
	return s + ": " + i.Decision + ")"
}

// CallInfoOf reads the CallInfo the client wrote among the kit's ErrorInfo
// details of an error (the last one it wrote), and false when there is
// none.
func CallInfoOf(infos []*errdetails.ErrorInfo) (keyed.CallInfo, bool) {
	for i := len(infos) - 1; i >= 0; i-- {
		ri, ok := InfoOf(infos[i].GetReason(), infos[i].GetMetadata())
		if !ok {
			continue
		}
		return keyed.CallInfo{Reason: infos[i].GetReason(), Outcome: ri.Outcome, Next: Action(ri.Next), Key: ri.Key,
			Attempts: ri.Attempts, Resolves: ri.Resolves, Decision: ri.Decision}, true
	}
	return keyed.CallInfo{}, false
}

// KitInfos returns the ErrorInfo details of domain among an error's
// details, in order: the kit's, which ReasonOf and CallInfoOf read.
func KitInfos(details []any, domain string) []*errdetails.ErrorInfo {
	var out []*errdetails.ErrorInfo
	for _, d := range details {
		if ei, ok := d.(*errdetails.ErrorInfo); ok && ei.GetDomain() == domain {
			out = append(out, ei)
		}
	}
	return out
}

// LastReason is the reason of the last of the kit's ErrorInfo details of
// an error, "" without one: the transports' ReasonOf.
func LastReason(infos []*errdetails.ErrorInfo) string {
	if len(infos) == 0 {
		return ""
	}
	return infos[len(infos)-1].GetReason()
}

// PolicyOf is the catalog's policy of method, and for a method it does
// not know that of a non-idempotent one: never retried.
func PolicyOf(c *policy.Catalog, method string) policy.MethodPolicy {
	if p, ok := c.Lookup(method); ok {
		return p
	}
	return policy.MethodPolicy{FullMethod: method, Kind: policy.KindNonIdempotent}
}
