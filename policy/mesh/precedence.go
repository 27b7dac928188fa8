package mesh

import (
	"sort"
	"strings"
	"time"
)

// ranking is how a route table picks, among the routes that match a
// request, the one that applies.
type ranking uint8

const (
	// rankFirst: the first matching route in the table's order (Istio,
	// Envoy, xDS, a Linkerd ServiceProfile).
	rankFirst ranking = iota
	// rankGateway: Gateway API's precedence over every rule of the HTTPRoutes
	// or GRPCRoutes attached to one parent (see gatewayPrecedes).
	rankGateway
	// rankLinkerd: the precedence Linkerd's proxy applies to the HTTPRoutes
	// or GRPCRoutes of a Service (see linkerdPrecedes).
	rankLinkerd
)

// pathKind is the type of an HTTPRoute path match.
type pathKind uint8

const (
	pathPrefix pathKind = iota // PathPrefix, and the default match of "/"
	pathExact
	pathRegex
)

// gwKey is what Gateway API's precedence ranks one match of an HTTPRoute or
// GRPCRoute rule by.
type gwKey struct {
	// HTTPRoute: the path match's type and, for Exact and PathPrefix, its
	// number of characters; whether it matches the HTTP method; its number
	// of header and query parameter matches.
	path    pathKind
	pathLen int
	prefix  string // the PathPrefix value, for Linkerd's count of characters
	method  bool
	headers int
	queries int
	// GRPCRoute: the characters of an Exact service and method match, or a
	// RegularExpression match (whose rank is the implementation's).
	grpc            bool
	svcLen, methLen int
	regex           bool
}

// hostScore is what Gateway API ranks a route's hostnames by for the host of
// a request: the characters of the matching hostname, and of it when it is
// not a wildcard. unknown: the route names hostnames that the request may or
// may not carry (the channel's host is not given, or the route's parent is a
// Service, where GAMMA leaves hostnames to the implementation): the route
// applies to some requests only, and ranks against the others as the
// implementation decides.
type hostScore struct {
	unknown      bool
	exact, chars int
}

// routeRef is the route object a rule of a ranked table comes from, with
// what Gateway API breaks ties by.
type routeRef struct {
	kind, namespace, name string
	created               time.Time // zero: not in the file
}

// hit is one match of a route that matches a request.
type hit struct {
	route       *route
	m           *matcher
	conditional bool
}

// resolveRanked returns the routes of a precedence table that can apply to a
// request for path: every matching route that no matching route without
// further conditions definitely precedes. Where the order is the
// implementation's (a RegularExpression path match against a prefix, two
// routes whose creation times the files do not give), both can apply, and
// Check counts the worst of them.
func (t *table) resolveRanked(path string) []*route {
	var hits []hit
	for i := range t.routes {
		r := &t.routes[i]
		for j := range r.matches {
			m := &r.matches[j]
			if m.matches(path) {
				hits = append(hits, hit{route: r, m: m, conditional: m.conditional || r.host.unknown})
			}
		}
	}
	cands := hits
	if len(hits) <= maxRankedHits { // beyond, every matching route can apply: the worst case, in bounded time
		cands = nil
		for i, h := range hits {
			beaten := false
			for j, g := range hits {
				if i != j && !g.conditional && t.precedes(g, h, path) {
					beaten = true
					break
				}
			}
			if !beaten {
				cands = append(cands, h)
			}
		}
		// In precedence order where it is decided (the first one applies
		// when all of its conditions hold), else in the table's.
		sort.SliceStable(cands, func(i, j int) bool { return t.precedes(cands[i], cands[j], path) })
	}
	var out []*route
	seen := map[*route]bool{}
	for _, h := range cands {
		if !seen[h.route] {
			seen[h.route] = true
			out = append(out, h.route)
		}
	}
	return out
}

// maxRankedHits bounds the matches resolveRanked compares pairwise for one
// request (the API server allows 128 per route, but any number of routes).
const maxRankedHits = 1024

// precedes reports whether hit a certainly takes precedence over hit b for
// a request for path.
func (t *table) precedes(a, b hit, path string) bool {
	if t.rank == rankLinkerd {
		return linkerdPrecedes(a, b, path)
	}
	return gatewayPrecedes(a, b)
}

// order is the result of comparing two keys: a first, b first, or neither
// (a tie, or an order the specification leaves to the implementation).
type order int8

const (
	tie order = iota
	aFirst
	bFirst
	undecided
)

// more orders by the larger number.
func more(x, y int) order {
	switch {
	case x > y:
		return aFirst
	case x < y:
		return bFirst
	}
	return tie
}

// more orders by the true value.
func moreBool(x, y bool) order {
	switch {
	case x && !y:
		return aFirst
	case y && !x:
		return bFirst
	}
	return tie
}

// chain returns the first order that is not a tie.
func chain(os ...order) order {
	for _, o := range os {
		if o != tie {
			return o
		}
	}
	return tie
}

// gatewayPrecedes is Gateway API's precedence, from the HTTPRoute and
// GRPCRoute API reference (apis/v1/httproute_types.go, HTTPRouteRule.Matches
// and HTTPRouteSpec.Hostnames; grpcroute_types.go, GRPCRouteRule.Matches):
//
//   - hostnames: the largest number of characters in a matching
//     non-wildcard hostname, then in a matching hostname;
//   - HTTPRoute: an Exact path match; then a PathPrefix match with the
//     largest number of characters; a method match; the largest number of
//     header matches; the largest number of query parameter matches. "The
//     precedence of RegularExpression path matches are
//     implementation-specific": Istio ranks them below PathPrefix, Envoy
//     Gateway above, so against anything but an Exact match they are
//     undecided;
//   - GRPCRoute: the largest number of characters in a matching service,
//     then in a matching method; then the largest number of header
//     matches (a RegularExpression match is implementation-specific:
//     undecided);
//   - across routes, the oldest by creationTimestamp, then the first in
//     alphabetical order of "{namespace}/{name}"; within a route, the first
//     matching rule.
func gatewayPrecedes(a, b hit) bool {
	return chain(hostOrder(a.route.host, b.route.host), gatewayMatchOrder(a.m.gw, b.m.gw),
		routeOrder(a.route, b.route, false)) == aFirst
}

func hostOrder(a, b hostScore) order {
	if a.unknown || b.unknown {
		return undecided
	}
	return chain(more(a.exact, b.exact), more(a.chars, b.chars))
}

func gatewayMatchOrder(a, b gwKey) order {
	if a.grpc != b.grpc {
		return undecided // an HTTPRoute's rule against a GRPCRoute's: one of the two routes is accepted
	}
	if a.grpc {
		if a.regex || b.regex {
			return undecided
		}
		return chain(more(a.svcLen, b.svcLen), more(a.methLen, b.methLen), more(a.headers, b.headers))
	}
	var path order
	switch {
	case a.path == pathRegex && b.path == pathRegex:
		return undecided
	case a.path == pathRegex:
		if b.path == pathExact {
			return bFirst
		}
		return undecided
	case b.path == pathRegex:
		if a.path == pathExact {
			return aFirst
		}
		return undecided
	case a.path != b.path:
		path = moreBool(a.path == pathExact, b.path == pathExact)
	case a.path == pathPrefix:
		path = more(a.pathLen, b.pathLen)
	}
	return chain(path, moreBool(a.method, b.method), more(a.headers, b.headers), more(a.queries, b.queries))
}

// routeOrder breaks a tie between two rules: within one route, the first
// rule; across routes, the oldest, then by name ("{namespace}/{name}" for
// Gateway API, the name alone for Linkerd's policy controller). A route
// whose file does not give its creationTimestamp (a manifest not yet
// applied) is undecided against any other.
func routeOrder(a, b *route, nameOnly bool) order {
	if a.ref == nil || b.ref == nil {
		return undecided
	}
	if a.ref == b.ref {
		return more(b.index, a.index)
	}
	if a.ref.created.IsZero() || b.ref.created.IsZero() {
		return undecided
	}
	switch {
	case a.ref.created.Before(b.ref.created):
		return aFirst
	case b.ref.created.Before(a.ref.created):
		return bFirst
	}
	na, nb := a.ref.namespace+"/"+a.ref.name, b.ref.namespace+"/"+b.ref.name
	if nameOnly {
		na, nb = a.ref.name, b.ref.name
	}
	switch c := strings.Compare(na, nb); {
	case c < 0:
		return aFirst
	case c > 0:
		return bFirst
	}
	return undecided // two routes of one name: duplicate documents
}

// linkerdPrecedes is the order Linkerd's proxy picks a route by
// (linkerd2-proxy linkerd/http/route: http/match.rs, http/match/path.rs,
// grpc/match.rs, lib.rs), which the policy controller feeds routes to
// sorted by creation time and then name (policy-controller outbound.rs,
// timestamp_then_name):
//
//   - HTTPRoute: the number of characters the path match covers, whatever
//     its type (an Exact or RegularExpression match covers the whole path,
//     a PathPrefix its value without a trailing "/"); then a method match;
//     the number of header matches; of query parameter matches;
//   - GRPCRoute: the characters of the service, then of the method; then
//     the number of header matches;
//   - then the first route in the controller's order, and within a route
//     the first rule.
//
// A route with hostnames ranks above every route without them when the
// request's authority matches one: undecided, since the authority is not
// known here.
func linkerdPrecedes(a, b hit, path string) bool {
	if a.route.host.unknown || b.route.host.unknown {
		return false
	}
	ka, kb := a.m.gw, b.m.gw
	var o order
	switch {
	case ka.grpc != kb.grpc:
		return false
	case ka.grpc:
		o = chain(more(ka.svcLen, kb.svcLen), more(ka.methLen, kb.methLen), more(ka.headers, kb.headers))
	default:
		o = chain(more(linkerdPathLen(ka, path), linkerdPathLen(kb, path)), moreBool(ka.method, kb.method),
			more(ka.headers, kb.headers), more(ka.queries, kb.queries))
	}
	return chain(o, routeOrder(a.route, b.route, true)) == aFirst
}

// linkerdPathLen is the number of characters Linkerd's proxy counts for a
// path match of a request for path.
func linkerdPathLen(k gwKey, path string) int {
	switch k.path {
	case pathExact, pathRegex:
		return len(path)
	}
	if k.prefix == "/" || k.prefix == "" {
		return 1
	}
	return len(strings.TrimRight(k.prefix, "/"))
}
