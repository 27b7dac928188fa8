package mesh

import (
	"fmt"
	"math"
	"sort"
	"strings"
)

// Istio's built-in default retry policy (pilot's retry.DefaultPolicy), used
// for every HTTP route that sets no retries when the mesh config sets no
// defaultHttpRetryPolicy: 2 retries on these conditions. Since Istio 1.24
// (EXCLUDE_UNSAFE_503_FROM_DEFAULT_RETRY, unconditional since 1.26) it
// lists no status code, so retriable-status-codes retries none; before, it
// retried 503.
const (
	istioDefaultRetries = 2
	istioDefaultRetryOn = "connect-failure,refused-stream,unavailable,cancelled,retriable-status-codes"
)

// istioUnlimitedRetries is DestinationRule's default
// connectionPool.http.maxRetries (2^32−1): no limit on concurrent retries.
const istioUnlimitedRetries = math.MaxUint32

// istioRetry is an HTTPRetry: a VirtualService route's retries or the mesh
// config's defaultHttpRetryPolicy.
type istioRetry struct {
	loc        location
	attempts   int64 // Istio's "attempts" counts retries
	retryOn    []string
	codes      []int
	retryOnSet bool
}

type virtualService struct {
	loc      location
	name, ns string
	hosts    []string // qualified; none: a delegate
	http     []istioRoute
	// invalid: Istio's validation rejects it, so it is not applied.
	invalid bool
	// gatewayOnly: spec.gateways does not name mesh, so sidecars do not
	// apply it.
	gatewayOnly bool
	exportTo    []string // nil: not set (the mesh config's default)
}

type istioRoute struct {
	loc      location
	name     string
	matches  []matcher
	retries  *istioRetry // nil: not set, the mesh default applies
	dests    []istioDest
	delegate *istioDelegate
}

type istioDest struct {
	host, subset string // host qualified
	port         int    // 0: not set
}

type istioDelegate struct{ name, ns string }

var istioHTTPRouteFields = []string{"name", "match", "route", "redirect", "directResponse", "delegate", "rewrite", "timeout", "retries",
	"fault", "mirror", "mirrors", "mirrorPercent", "mirrorPercentage", "mirror_percent", "corsPolicy", "headers"}

var istioMatchFields = []string{"uri", "scheme", "method", "authority", "headers", "port", "sourceLabels", "gateways", "queryParams",
	"ignoreUriCase", "withoutHeaders", "sourceNamespace", "statPrefix", "name"}

func (c *Config) readVirtualService(loc location, o obj, name, ns string) {
	val := &istioValidation{c: c, what: "VirtualService", effect: "the mesh default retries stay in force for its hosts"}
	spec, ok := o.child("spec")
	if !ok {
		val.reject(loc, "a VirtualService without spec", "add spec.hosts and spec.http")
		return
	}
	vs := &virtualService{loc: loc, name: name, ns: ns}
	raw := c.vsHosts(vs, spec, ns, val)
	c.vsScope(vs, spec, val)
	hv, hp, hasHTTP := spec.key("http")
	if _, isList := hv.([]any); hasHTTP && !isList {
		val.reject(loc.at(hp), "spec.http must be a list of routes, not "+describe(hv), "write http: [{match: ..., route: ...}]")
	}
	routes, paths := spec.list("http")
	for i, r := range routes {
		ro, ok := asObj(r, paths[i])
		if !ok {
			val.reject(loc.at(paths[i]), "an http route must be an object, not "+describe(r), "fix the route")
			continue
		}
		vs.http = append(vs.http, c.istioHTTPRoute(loc, ro, ns, len(raw) == 0, val))
	}
	c.validateVSShape(loc, spec, raw, len(routes) > 0, val)
	vs.invalid = val.rejected
	c.virtualServices = append(c.virtualServices, vs)
}

// vsHosts reads spec.hosts into vs.hosts (qualified) and returns them as
// written.
func (c *Config) vsHosts(vs *virtualService, spec obj, ns string, val *istioValidation) []string {
	raw, p, ok := strList(spec, "hosts")
	if !ok {
		val.reject(vs.loc.at(p), "spec.hosts must be a list of host names", "write hosts: [orders]")
	}
	for _, h := range raw {
		vs.hosts = append(vs.hosts, qualify(h, ns))
	}
	return raw
}

// vsScope reads what decides whether the sidecars apply the VirtualService
// at all: spec.gateways (a VirtualService bound to gateways without the
// reserved gateway "mesh" applies to those gateways only) and
// spec.exportTo (the namespaces whose sidecars see it).
func (c *Config) vsScope(vs *virtualService, spec obj, val *istioValidation) {
	gws, gp, ok := strList(spec, "gateways")
	if !ok {
		val.reject(vs.loc.at(gp), "spec.gateways must be a list of gateway names", "write gateways: [mesh]")
	}
	if len(gws) > 0 && !contains(gws, "mesh") {
		vs.gatewayOnly = true
		c.add(vs.loc.at(gp).finding(findingNotUnderstood, layerIstio,
			fmt.Sprintf("spec.gateways [%s] does not name mesh, so only those gateways apply this VirtualService and the sidecars ignore it: the mesh channel keeps the mesh default retries for its hosts, and the retries the gateways make are a channel this check does not judge",
				truncate(strings.Join(gws, ", "))),
			"add mesh to spec.gateways if the sidecars should apply these routes (and keep a VirtualService for the mesh otherwise); check the channel through the gateway on its own"))
	}
	exp, ep, ok := strList(spec, "exportTo")
	if !ok {
		val.reject(vs.loc.at(ep), "spec.exportTo must be a list of namespaces", "write exportTo: [\"*\"]")
	}
	if len(exp) > 0 {
		vs.exportTo = exp
		c.validateExportTo(vs.loc.at(ep), exp, vs.ns, val)
		if !contains(exp, "*") {
			c.add(vs.loc.at(ep).finding(findingNotUnderstood, layerIstio,
				fmt.Sprintf("spec.exportTo [%s] shows this VirtualService only to the sidecars of those namespaces; the check does not know the namespace of the channel's client, so it counts both its retries and the mesh default for its hosts (the worst of them)",
					truncate(strings.Join(exp, ", "))),
				"export it to \"*\" if every client should follow it, or judge the channel with the resources its namespace sees"))
		}
	}
}

// validateVSShape applies Istio's rules on a VirtualService as a whole
// (ValidateVirtualService): some route, a delegate's limits, no wildcard
// host "*" for the mesh, no duplicate hosts.
func (c *Config) validateVSShape(loc location, spec obj, raw []string, hasHTTP bool, val *istioValidation) {
	tcp, _ := spec.list("tcp")
	tls, _ := spec.list("tls")
	if !hasHTTP && len(tcp) == 0 && len(tls) == 0 {
		val.reject(loc.at(joinPath(spec.path, "http")), "http, tcp or tls must be provided in a VirtualService", "add spec.http routes for the gRPC methods")
	}
	if len(raw) == 0 && (len(tcp) > 0 || len(tls) > 0) {
		val.reject(loc.at(joinPath(spec.path, "hosts")), "a VirtualService without hosts is a delegate, and a delegate must have no tcp or tls routes", "add spec.hosts")
	}
	gws, _, _ := strList(spec, "gateways")
	seen := map[string]bool{}
	for _, h := range raw {
		lh := strings.ToLower(h)
		if h == "*" && (len(gws) == 0 || contains(gws, "mesh")) {
			val.reject(loc.at(joinPath(spec.path, "hosts")), "wildcard host * is not allowed for a VirtualService bound to the mesh", "name the service's host")
		}
		if seen[lh] {
			val.reject(loc.at(joinPath(spec.path, "hosts")), fmt.Sprintf("duplicate host %q", truncate(h)), "list each host once")
		}
		seen[lh] = true
	}
}

// istioHTTPRoute reads and validates one HTTPRoute of a VirtualService.
func (c *Config) istioHTTPRoute(loc location, ro obj, ns string, inDelegate bool, val *istioValidation) istioRoute {
	rt := istioRoute{loc: loc.at(ro.path)}
	rt.name, _ = ro.str("name")
	c.httpRouteFields(loc, ro)
	rt.matches = c.istioMatches(loc, ro, val)
	if rv, rp, ok := ro.key("retries"); ok {
		rt.retries = c.readIstioRetry(loc.at(rp), rv, val)
	}
	rt.dests = c.istioDests(loc, ro, ns, val)
	c.validateHTTPRoute(loc, ro, inDelegate, val)
	if tv, tp, ok := ro.key("timeout"); ok {
		c.checkDuration(val, loc.at(tp), "timeout", tv)
	}
	if d, ok := ro.child("delegate"); ok && !inDelegate {
		name, _ := d.str("name")
		dns, _ := d.str("namespace")
		if dns == "" {
			dns = ns
		}
		rt.delegate = &istioDelegate{name: name, ns: dns}
		c.add(loc.at(d.path).finding(findingNotUnderstood, layerIstio,
			fmt.Sprintf("the route delegates to VirtualService %s/%s; the check does not merge a delegate's routes into the root's: it counts the worst of the delegate's retries (when given), the root route's and the mesh default for every request the root route matches", truncate(dns), truncate(name)),
			"check the delegate's routes by hand, or write the routes in one VirtualService"))
	}
	return rt
}

// httpRouteFields reports an HTTPRoute's unknown fields (the API server
// drops them) and the fields that change how many requests reach a service
// which the check does not count: mirrors, and headers that set Envoy's
// retry headers.
func (c *Config) httpRouteFields(loc location, ro obj) {
	for _, k := range ro.unknownKeys(istioHTTPRouteFields...) {
		c.add(loc.at(joinPath(ro.path, k)).finding(findingUnknownField, layerIstio,
			fmt.Sprintf("unknown field %q in an HTTPRoute%s; the API server drops it (kubectl apply --validate=strict refuses the resource), so it has no effect", truncate(k), didYouMean(k, istioHTTPRouteFields)),
			"spell it as Istio does: "+strings.Join(istioHTTPRouteFields, ", ")))
	}
	for _, k := range []string{"mirror", "mirrors"} {
		if _, p, ok := ro.key(k); ok {
			c.add(loc.at(p).finding(findingNotUnderstood, layerIstio,
				"the route mirrors requests: Envoy sends a copy of each to the mirror's destination and ignores its answer; the copies are not counted in the attempts (a mirror to the same service is one more request for each call)",
				"mirror to another service, or count the copies by hand"))
		}
	}
	if h, ok := ro.child("headers"); ok {
		c.retryHeaders(loc, h)
	}
}

// retryHeaders reports header manipulation that sets one of Envoy's retry
// request headers (x-envoy-retry-on, x-envoy-max-retries…): a request that
// carries them may be retried differently than the route says.
func (c *Config) retryHeaders(loc location, h obj) {
	for _, dir := range []string{"request"} {
		d, ok := h.child(dir)
		if !ok {
			continue
		}
		for _, op := range []string{"set", "add"} {
			m, ok := d.child(op)
			if !ok {
				continue
			}
			for _, k := range m.keys() {
				if isEnvoyRetryHeader(k) {
					c.add(loc.at(joinPath(m.path, k)).finding(findingNotUnderstood, layerIstio,
						fmt.Sprintf("the route sets the request header %s, which tells Envoy how to retry; the check does not read header values", truncate(k)),
						"configure retries with spec.http[].retries instead"))
				}
			}
		}
	}
}

// isEnvoyRetryHeader reports whether a request header name is one of those
// Envoy's router reads to retry a request.
func isEnvoyRetryHeader(name string) bool {
	switch strings.ToLower(strings.TrimSpace(name)) {
	case "x-envoy-retry-on", "x-envoy-retry-grpc-on", "x-envoy-max-retries", "x-envoy-retriable-status-codes",
		"x-envoy-retriable-header-names", "x-envoy-hedge-on-per-try-timeout", "x-envoy-upstream-rq-per-try-timeout-ms":
		return true
	}
	return false
}

// validateHTTPRoute applies Istio's rules on an HTTPRoute's actions
// (validateHTTPRouteConflict): a route, a redirect or a direct response,
// one of them; a root route with a delegate has none; mirror and mirrors
// not together.
func (c *Config) validateHTTPRoute(loc location, ro obj, inDelegate bool, val *istioValidation) {
	dests, _ := ro.list("route")
	route, redirect, direct, delegate := len(dests) > 0, has(ro, "redirect"), has(ro, "directResponse"), has(ro, "delegate")
	at := loc.at(ro.path)
	switch {
	case delegate && inDelegate:
		val.reject(at, "a delegate VirtualService's route cannot delegate again", "remove delegate")
	case delegate && (route || redirect):
		val.reject(at, "a root route with delegate must not also have route or redirect", "remove route and redirect, or the delegate")
	case delegate:
	case redirect && (route || direct):
		val.reject(at, "an HTTP route cannot have redirect together with route or directResponse", "keep one of them")
	case direct && route:
		val.reject(at, "an HTTP route cannot have both route and directResponse", "keep one of them")
	case !route && !redirect && !direct:
		val.reject(at, "HTTP route, redirect or direct_response is required: this route has none of route, redirect and directResponse", "add route: [{destination: {host: ...}}]")
	}
	if (redirect || direct) && (has(ro, "fault") || has(ro, "rewrite")) {
		val.reject(at, "an HTTP route with redirect or directResponse cannot have fault or rewrite", "remove them")
	}
	if has(ro, "mirror") && has(ro, "mirrors") {
		val.reject(at, "an HTTP route cannot have both mirror and mirrors", "keep mirrors")
	}
	if v, p, ok := ro.key("mirrorPercentage"); ok {
		if mp, isObj := asObj(v, p); isObj {
			if x, ok := number(mp.m["value"]); ok && (x < 0 || x > 100) {
				val.reject(loc.at(p), "mirrorPercentage must be between 0 and 100", "fix the percentage")
			}
		}
	}
}

// istioDests reads an HTTPRoute's destinations and applies Istio's rules
// on them (validateHTTPRouteDestinations): each names a host, and weights
// do not add up to 0 across several.
func (c *Config) istioDests(loc location, ro obj, ns string, val *istioValidation) []istioDest {
	list, paths := ro.list("route")
	var out []istioDest
	total := int64(0)
	for i, d := range list {
		do, ok := asObj(d, paths[i])
		dest, hasDest := do.child("destination")
		h, _ := dest.str("host")
		if !ok || !hasDest || h == "" {
			val.reject(loc.at(paths[i]), "a route destination must name destination.host", "add destination: {host: ...}")
			continue
		}
		w, _ := integer(do.m["weight"])
		if w < 0 || w > 100 {
			val.reject(loc.at(joinPath(do.path, "weight")), "a destination weight must be between 0 and 100", "fix the weight")
		}
		total += w
		if len(list) > 1 && w == 0 {
			continue // Istio ignores a 0 weight among several destinations
		}
		out = append(out, istioDest{host: qualify(h, ns), subset: strOr(dest, "subset"), port: destPort(dest)})
	}
	if len(list) > 1 && total == 0 {
		val.reject(loc.at(joinPath(ro.path, "route")), "the destination weights add up to 0", "give the destinations weights")
	}
	return out
}

func strOr(o obj, name string) string { s, _ := o.str(name); return s }

// destPort reads destination.port.number; 0 when not set.
func destPort(dest obj) int {
	p, ok := dest.child("port")
	if !ok {
		return 0
	}
	n, ok := integer(p.m["number"])
	if !ok || n <= 0 || n > 65535 {
		return 0
	}
	return int(n)
}

// istioMatches reads an http route's match list. No list matches every
// request.
func (c *Config) istioMatches(loc location, ro obj, val *istioValidation) []matcher {
	list, paths := ro.list("match")
	var out []matcher
	for i, m := range list {
		mo, ok := asObj(m, paths[i])
		if !ok {
			val.reject(loc.at(paths[i]), "a match must be an object, not "+describe(m), "fix the match")
			continue
		}
		out = append(out, c.istioMatch(loc, mo, val))
	}
	return out
}

// istioMatch reads one HTTPMatchRequest: its uri selects the method; the
// other conditions make the match conditional, but a method other than
// POST (gRPC always posts) or gateways without mesh never match the mesh
// channel.
func (c *Config) istioMatch(loc location, mo obj, val *istioValidation) matcher {
	ignoreCase := false
	if v, _, ok := mo.key("ignoreUriCase"); ok {
		ignoreCase, _ = boolean(v)
	}
	mt := allMatcher("any uri")
	if uri, ok := mo.child("uri"); ok {
		mt = c.stringMatch(loc, uri, "uri", ignoreCase, val)
	}
	for _, k := range mo.unknownKeys(istioMatchFields...) {
		c.add(loc.at(joinPath(mo.path, k)).finding(findingUnknownField, layerIstio,
			fmt.Sprintf("unknown field %q in an HTTPMatchRequest%s; the API server drops it, so it does not restrict the match", truncate(k), didYouMean(k, istioMatchFields)),
			"spell it as Istio does: "+strings.Join(istioMatchFields, ", ")))
	}
	for _, k := range []string{"scheme", "method", "authority"} {
		if sm, ok := mo.child(k); ok {
			if v, isStr := sm.str("prefix"); isStr && v == "" {
				val.reject(loc.at(joinPath(sm.path, "prefix")), k+": a prefix match must not be empty", "remove the match, or give the prefix")
			}
			if re, isStr := sm.str("regex"); isStr {
				if why := validateRegex(re); why != "" {
					val.reject(loc.at(joinPath(sm.path, "regex")), k+": "+why, "fix the expression (RE2 syntax)")
				}
			}
		}
	}
	if meth, ok := mo.child("method"); ok && !stringMatchAccepts(meth, "POST") {
		mt.never = true // gRPC is always POST
	}
	if gws, _, _ := strList(mo, "gateways"); len(gws) > 0 && !contains(gws, "mesh") {
		mt.never = true // a match for gateways only
	}
	for _, k := range []string{"headers", "port", "sourceLabels", "queryParams", "withoutHeaders", "authority", "sourceNamespace", "scheme"} {
		if has(mo, k) {
			mt.conditional = true
		}
	}
	return mt
}

// stringMatch reads an Istio StringMatch {exact|prefix|regex} on the path.
func (c *Config) stringMatch(loc location, sm obj, what string, ignoreCase bool, val *istioValidation) matcher {
	if v, ok := sm.str("exact"); ok {
		return exactMatcher(what, v, ignoreCase)
	}
	if v, ok := sm.str("prefix"); ok {
		return prefixMatcher(what, v, ignoreCase)
	}
	if v, ok := sm.str("regex"); ok {
		if why := validateRegex(v); why != "" {
			val.reject(loc.at(joinPath(sm.path, "regex")), what+": "+why, "fix the expression (RE2 syntax)")
			return matcher{desc: what + " regex (invalid)", never: true}
		}
		m, err := regexMatcher(what, v, ignoreCase)
		if err != nil {
			val.reject(loc.at(joinPath(sm.path, "regex")), err.Error(), "fix the expression (RE2 syntax)")
			return matcher{desc: what + " regex (invalid)", never: true}
		}
		return m
	}
	c.add(loc.at(sm.path).finding(findingInvalidValue, layerIstio, what+" has none of exact, prefix and regex, so it matches every path", "set one of them"))
	return allMatcher(what + " (empty)")
}

// stringMatchAccepts reports whether an Istio StringMatch accepts s.
func stringMatchAccepts(sm obj, s string) bool {
	if v, ok := sm.str("exact"); ok {
		return v == s
	}
	if v, ok := sm.str("prefix"); ok {
		return strings.HasPrefix(s, v)
	}
	if v, ok := sm.str("regex"); ok {
		m, err := regexMatcher("method", v, false)
		return err != nil || m.fn(s) // an invalid expression is reported elsewhere
	}
	return true
}

func conditionNames() []string {
	out := make([]string, 0, len(envoyConditions))
	for k := range envoyConditions {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}
