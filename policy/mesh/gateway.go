package mesh

import (
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"time"
)

// k8sRoute is an HTTPRoute or a GRPCRoute (gateway.networking.k8s.io, or
// Linkerd's policy.linkerd.io HTTPRoute).
type k8sRoute struct {
	loc          location
	kind         string // HTTPRoute or GRPCRoute
	linkerdGroup bool   // policy.linkerd.io
	ref          *routeRef
	labels       map[string]string
	parents      []routeParent
	hostnames    []string // lower case
	retry        *linkerdRetry
	badTimeouts  bool // a timeout.linkerd.io annotation Linkerd cannot read
	rules        []k8sRule
	// invalid: the API server refuses the route (its CRD's validation), so
	// none of it applies.
	invalid bool
	// linkerdUnsupported says what of the route Linkerd's policy controller
	// cannot convert, so that it does not use the route ("": it can).
	linkerdUnsupported string
}

// routeParent is one parentRef of a route.
type routeParent struct {
	service bool   // a Service (GAMMA: the mesh's routes for it)
	key     string // "Service orders.shop.svc.cluster.local", "Gateway ns/name"
	host    string // a Service's qualified host
	ns      string
	name    string
	kind    string
}

// k8sRule is one rule of an HTTPRoute or GRPCRoute.
type k8sRule struct {
	loc      location
	name     string
	matches  []matcher
	retry    *rule    // the HTTPRoute retry field's rule; nil: none
	redirect bool     // a RequestRedirect filter answers the request: nothing is retried
	backends []string // the qualified hosts of its Service backendRefs
}

var (
	gatewayRetryFields = []string{"codes", "attempts", "backoff"}
	httpRuleFields     = []string{"name", "matches", "filters", "backendRefs", "timeouts", "retry", "sessionPersistence"}
	grpcRuleFields     = []string{"name", "matches", "filters", "backendRefs", "sessionPersistence"}
	httpMethods        = []string{"GET", "HEAD", "POST", "PUT", "DELETE", "CONNECT", "OPTIONS", "TRACE", "PATCH"}
	httpFilterTypes    = []string{"RequestHeaderModifier", "ResponseHeaderModifier", "RequestMirror", "RequestRedirect", "URLRewrite", "ExtensionRef", "CORS", "ExternalAuth"}
	grpcFilterTypes    = []string{"RequestHeaderModifier", "ResponseHeaderModifier", "RequestMirror", "ExtensionRef"}
	// The characters the CRD allows in an Exact or PathPrefix path, and in
	// an Exact GRPCRoute service and method.
	pathChars     = regexp.MustCompile(`^(?:[-A-Za-z0-9/._~!$&'()*+,;=:@]|[%][0-9a-fA-F]{2})+$`)
	grpcService   = regexp.MustCompile(`^(?i)\.?[a-z_][a-z_0-9]*(\.[a-z_][a-z_0-9]*)*$`)
	grpcMethod    = regexp.MustCompile(`^[A-Za-z_][A-Za-z_0-9]*$`)
	gatewayPeriod = regexp.MustCompile(`^([0-9]{1,5}(h|m|s|ms)){1,4}$`) // GEP-2257
)

// refuse marks a route the API server refuses, with a finding: its CRD's
// validation fails, so the route is not created (or not updated) and none
// of its rules apply.
func (c *Config) refuse(rt *k8sRoute, at location, msg, fix string) {
	rt.invalid = true
	c.add(at.finding(findingInvalidResource, layerGatewayAPI, fmt.Sprintf("%s: the API server refuses the %s, so none of its rules apply (for a Gateway, calls no other route matches get 404; for a Service, the mesh's default)", msg, rt.kind), fix))
}

// readRoute reads an HTTPRoute or a GRPCRoute.
func (c *Config) readRoute(loc location, o obj, meta obj, kind, name, ns string) {
	apiVersion, _ := o.str("apiVersion")
	rt := &k8sRoute{loc: loc, kind: kind, linkerdGroup: strings.HasPrefix(apiVersion, "policy.linkerd.io/"),
		ref: &routeRef{kind: kind, namespace: ns, name: name}}
	c.routeMeta(rt, loc, meta)
	spec, ok := o.child("spec")
	if !ok {
		c.refuse(rt, loc, "a "+kind+" without spec", "add spec.parentRefs and spec.rules")
		return
	}
	c.routeParents(rt, spec, ns)
	hostnames, _ := spec.list("hostnames")
	for _, h := range hostnames {
		if s, ok := h.(string); ok {
			rt.hostnames = append(rt.hostnames, strings.ToLower(s))
		}
	}
	c.routeRules(rt, loc, spec)
	c.routes = append(c.routes, rt)
}

// routeMeta reads a route's creationTimestamp, labels and annotations.
func (c *Config) routeMeta(rt *k8sRoute, loc location, meta obj) {
	if ts, ok := meta.str("creationTimestamp"); ok {
		t, err := time.Parse(time.RFC3339, ts)
		if err != nil {
			c.add(loc.at(joinPath(meta.path, "creationTimestamp")).finding(findingInvalidValue, layerGatewayAPI, fmt.Sprintf("creationTimestamp %q is not an RFC 3339 time; routes that tie on precedence are then ordered by it as unknown", truncate(ts)), "remove it, or copy it as the API server wrote it"))
		}
		rt.ref.created = t
	}
	if lo, ok := meta.child("labels"); ok {
		rt.labels = map[string]string{}
		for _, k := range lo.keys() {
			rt.labels[k], _ = lo.str(k)
		}
	}
	rt.retry = c.readAnnotations(loc, meta, rt.kind)
	if ann, ok := meta.child("annotations"); ok {
		for _, k := range ann.keys() {
			if v, _ := ann.str(k); contains(linkerdTimeouts, k) && !linkerdDuration(v) {
				rt.badTimeouts = true
			}
		}
	}
}

// routeRules reads a route's rules, within the CRD's limits: 16 rules, 64
// matches in a rule, 128 in the route.
func (c *Config) routeRules(rt *k8sRoute, loc location, spec obj) {
	rules, paths := spec.list("rules")
	if len(rules) == 0 && rt.kind == "HTTPRoute" {
		rules, paths = []any{map[string]any{}}, []string{"spec.rules[0]"} // the CRD's default: one rule matching every request
	}
	if len(rules) > 16 {
		c.refuse(rt, loc.at("spec.rules"), fmt.Sprintf("%d rules, more than the 16 a route may have", len(rules)), "split the route")
		rules = rules[:16]
	}
	total := 0
	for i, r := range rules {
		ro, ok := asObj(r, paths[i])
		if !ok {
			continue
		}
		list, _ := ro.list("matches")
		if len(list) > 64 {
			c.refuse(rt, loc.at(joinPath(ro.path, "matches")), fmt.Sprintf("%d matches, more than the 64 a rule may have", len(list)), "split the rule")
			continue
		}
		total += len(list)
		rt.rules = append(rt.rules, c.routeRule(rt, loc, ro))
	}
	if total > 128 {
		c.refuse(rt, loc.at("spec.rules"), fmt.Sprintf("%d matches in all, more than the 128 a route may have", total), "split the route")
	}
}

// routeParents reads a route's parentRefs; a route without any is its own
// parent, so that it is still checked.
func (c *Config) routeParents(rt *k8sRoute, spec obj, ns string) {
	parents, _ := spec.list("parentRefs")
	for _, p := range parents {
		po, ok := asObj(p, "")
		if !ok {
			continue
		}
		rp := routeParent{ns: ns}
		rp.kind, _ = po.str("kind")
		rp.name, _ = po.str("name")
		if pns, ok := po.str("namespace"); ok {
			rp.ns = pns
		}
		group, _ := po.str("group")
		if rp.kind == "" {
			rp.kind = "Gateway"
		}
		if rp.kind == "Service" && (group == "" || group == "core") {
			rp.service, rp.host = true, qualify(rp.name, rp.ns)
			rp.key = "Service " + rp.host
		} else {
			rp.key = rp.kind + " " + strings.ToLower(rp.ns+"/"+rp.name)
		}
		rt.parents = append(rt.parents, rp)
	}
	if len(rt.parents) == 0 {
		rt.parents = []routeParent{{key: rt.kind + " " + strings.ToLower(ns+"/"+rt.ref.name), ns: ns, name: rt.ref.name, kind: rt.kind}}
	}
}

// routeRule reads one rule: its matches, filters, backends and retry.
func (c *Config) routeRule(rt *k8sRoute, loc location, ro obj) k8sRule {
	kr := k8sRule{loc: loc.at(ro.path)}
	kr.name, _ = ro.str("name")
	known := httpRuleFields
	if rt.kind == "GRPCRoute" {
		known = grpcRuleFields
	}
	for _, k := range ro.unknownKeys(known...) {
		if k == "retry" { // a GRPCRoute rule
			c.add(loc.at(joinPath(ro.path, k)).finding(findingUnknownField, layerGatewayAPI, "a GRPCRoute rule has no retry field in the Gateway API standard; the API server drops it and implementations ignore it",
				"configure gRPC retries with the mesh's own resources or annotations (Linkerd's retry.linkerd.io/grpc, Envoy Gateway's BackendTrafficPolicy)"))
			continue
		}
		c.add(loc.at(joinPath(ro.path, k)).finding(findingUnknownField, layerGatewayAPI, fmt.Sprintf("unknown field %q in a%s %s rule%s; the API server drops it", truncate(k), article(rt.kind), rt.kind, didYouMean(k, known)),
			"use "+strings.Join(known, ", ")))
	}
	kr.matches = c.routeMatches(rt, loc, ro)
	filters, fpaths := ro.list("filters")
	for i, f := range filters {
		if fo, ok := asObj(f, fpaths[i]); ok {
			c.routeFilter(rt, &kr, loc, fo)
		}
	}
	refs, rpaths := ro.list("backendRefs")
	for i, b := range refs {
		bo, ok := asObj(b, rpaths[i])
		if !ok {
			continue
		}
		kind, _ := bo.str("kind")
		group, _ := bo.str("group")
		name, _ := bo.str("name")
		bns, ok := bo.str("namespace")
		if !ok {
			bns = rt.ref.namespace
		}
		if (kind == "" || kind == "Service") && group == "" {
			kr.backends = append(kr.backends, qualify(name, bns))
		}
		bf, bfpaths := bo.list("filters")
		for j, f := range bf {
			if fo, ok := asObj(f, bfpaths[j]); ok {
				c.routeFilter(rt, &kr, loc, fo)
			}
		}
	}
	if rv, rp, ok := ro.key("retry"); ok && rt.kind == "HTTPRoute" {
		kr.retry = c.gatewayRetry(rt, loc.at(rp), rv)
	}
	return kr
}

func article(kind string) string {
	if strings.HasPrefix(kind, "HTTP") {
		return "n"
	}
	return ""
}

// routeFilter reads one filter of a rule or a backendRef: a type the CRD
// does not know is refused; a RequestMirror or an ExtensionRef is a filter
// the checker does not model; Linkerd converts only some filters.
func (c *Config) routeFilter(rt *k8sRoute, kr *k8sRule, loc location, fo obj) {
	typ, _ := fo.str("type")
	at := loc.at(joinPath(fo.path, "type"))
	types := httpFilterTypes
	linkerdTypes := []string{"RequestHeaderModifier", "ResponseHeaderModifier", "RequestRedirect"}
	if rt.kind == "GRPCRoute" {
		types = grpcFilterTypes
		linkerdTypes = []string{"RequestHeaderModifier", "ResponseHeaderModifier"}
	}
	if !contains(types, typ) {
		c.refuse(rt, at, fmt.Sprintf("filter type %q is not one of %s", truncate(typ), strings.Join(types, ", ")), "fix the type")
		return
	}
	if !contains(linkerdTypes, typ) && rt.linkerdUnsupported == "" {
		rt.linkerdUnsupported = fmt.Sprintf("it does not support the %s filter at %s", typ, fo.path)
	}
	switch typ {
	case "RequestRedirect":
		if strings.Contains(fo.path, "backendRefs") {
			return
		}
		kr.redirect = true
	case "RequestMirror":
		mirror := "another backend"
		if m, ok := fo.child("requestMirror"); ok {
			if b, ok := m.child("backendRef"); ok {
				n, _ := b.str("name")
				mirror = strconv.Quote(truncate(n))
			}
		}
		c.add(loc.at(fo.path).finding(findingNotUnderstood, layerGatewayAPI, fmt.Sprintf("a RequestMirror filter sends a copy of every request it matches to %s, which the attempts do not count: a non-idempotent call mirrored to a backend that shares its data runs twice", mirror),
			"mirror only to a backend without side effects, or remove the filter"))
	case "ExtensionRef":
		what := "an implementation-specific filter"
		if e, ok := fo.child("extensionRef"); ok {
			g, _ := e.str("group")
			k, _ := e.str("kind")
			n, _ := e.str("name")
			what = fmt.Sprintf("implementation-specific filter %q", truncate(g+"/"+k+" "+n))
		}
		c.add(loc.at(fo.path).finding(findingNotUnderstood, layerGatewayAPI, what+" may change how the gateway retries (a plugin or a policy of the implementation); the checker does not read it, so the attempts it reports may be too low",
			"check the filter's retries by hand"))
	}
}

// routeMatches reads the matches of a rule; a rule without matches matches
// every request (an HTTPRoute's: the CRD's default, a PathPrefix of "/").
func (c *Config) routeMatches(rt *k8sRoute, loc location, ro obj) []matcher {
	list, paths := ro.list("matches")
	if len(list) == 0 {
		if rt.kind == "HTTPRoute" {
			return []matcher{prefixPathMatcher("/")}
		}
		m := allMatcher("any method")
		m.gw = gwKey{grpc: true}
		return []matcher{m}
	}
	var out []matcher
	for i, m := range list {
		mo, ok := asObj(m, paths[i])
		if !ok {
			continue
		}
		var mt matcher
		if rt.kind == "GRPCRoute" {
			mt = c.grpcRouteMatch(rt, loc, mo)
		} else {
			mt = c.httpRouteMatch(rt, loc, mo)
		}
		if n := distinctNames(mo, "headers", true); n > 0 {
			mt.conditional, mt.gw.headers = true, n
		}
		out = append(out, mt)
	}
	return out
}

// distinctNames counts the header or query parameter matches of a match:
// for the same name only the first counts (header names in any case).
func distinctNames(mo obj, field string, fold bool) int {
	list, _ := mo.list(field)
	seen := map[string]bool{}
	for _, h := range list {
		ho, ok := asObj(h, "")
		if !ok {
			continue
		}
		n, _ := ho.str("name")
		if fold {
			n = strings.ToLower(n)
		}
		seen[n] = true
	}
	return len(seen)
}

func prefixPathMatcher(v string) matcher {
	m := segmentPrefixMatcher("path", v, false)
	m.gw = gwKey{path: pathPrefix, pathLen: len(v), prefix: v}
	return m
}

// grpcRouteMatch reads a GRPCRoute match's method (any method without one).
func (c *Config) grpcRouteMatch(rt *k8sRoute, loc location, mo obj) matcher {
	mm, ok := mo.child("method")
	if !ok {
		m := allMatcher("any method")
		m.gw = gwKey{grpc: true}
		return m
	}
	typ, hasType := mm.str("type")
	svc, _ := mm.str("service")
	meth, _ := mm.str("method")
	switch {
	case hasType && typ != "Exact" && typ != "RegularExpression":
		c.refuse(rt, loc.at(joinPath(mm.path, "type")), fmt.Sprintf("method match type %q is not Exact or RegularExpression", truncate(typ)), "fix the type")
	case svc == "" && meth == "":
		c.refuse(rt, loc.at(mm.path), "a method match needs a service, a method or both", "add them")
	case typ != "RegularExpression" && svc != "" && !grpcService.MatchString(svc):
		c.refuse(rt, loc.at(joinPath(mm.path, "service")), fmt.Sprintf("service %q is not a valid service name for an Exact match", truncate(svc)), "write the full service name, such as shop.v1.Orders")
	case typ != "RegularExpression" && meth != "" && !grpcMethod.MatchString(meth):
		c.refuse(rt, loc.at(joinPath(mm.path, "method")), fmt.Sprintf("method %q is not a valid method name for an Exact match", truncate(meth)), "write the method's name, such as Create")
	}
	if typ == "RegularExpression" && rt.linkerdUnsupported == "" {
		rt.linkerdUnsupported = "it does not support a RegularExpression method match, at " + mm.path
	}
	mt, err := grpcMethodMatcher(svc, meth, typ == "RegularExpression")
	if err != nil {
		c.add(loc.at(mm.path).finding(findingInvalidValue, layerGatewayAPI, err.Error(), "fix the expression"))
		return matcher{desc: "method regex (invalid)", never: true}
	}
	return mt
}

// httpRouteMatch reads an HTTPRoute match: its path (the prefix "/"
// without one), its method (a method other than POST, which gRPC never
// sends, matches no call) and query parameters (a condition the checker
// does not evaluate).
func (c *Config) httpRouteMatch(rt *k8sRoute, loc location, mo obj) matcher {
	mt := prefixPathMatcher("/")
	if pm, ok := mo.child("path"); ok {
		mt = c.httpPathMatch(rt, loc, pm)
	}
	if meth, ok := mo.str("method"); ok {
		switch {
		case !contains(httpMethods, meth):
			c.refuse(rt, loc.at(joinPath(mo.path, "method")), fmt.Sprintf("method %q is not one of %s", truncate(meth), strings.Join(httpMethods, ", ")), "write the method in capitals")
		case meth == "POST":
			mt.gw.method = true
		default:
			mt.never = true
		}
	}
	if n := distinctNames(mo, "queryParams", false); n > 0 {
		mt.conditional, mt.gw.queries = true, n
	}
	return mt
}

// httpPathMatch reads an HTTPRoute path match of type PathPrefix (the
// default), Exact or RegularExpression, with the CRD's validation of the
// value.
func (c *Config) httpPathMatch(rt *k8sRoute, loc location, pm obj) matcher {
	typ, ok := pm.str("type")
	if !ok {
		typ = "PathPrefix"
	}
	val, ok := pm.str("value")
	if !ok {
		val = "/"
	}
	if typ == "Exact" || typ == "PathPrefix" {
		if msg := badPath(val); msg != "" {
			c.refuse(rt, loc.at(joinPath(pm.path, "value")), fmt.Sprintf("path %q %s", truncate(val), msg), "write an absolute path such as /shop.v1.Orders/")
		}
	}
	switch typ {
	case "PathPrefix":
		return prefixPathMatcher(val)
	case "Exact":
		m := exactMatcher("path", val, false)
		m.gw = gwKey{path: pathExact, pathLen: len(val)}
		return m
	case "RegularExpression":
		mt, err := regexMatcher("path", val, false)
		if err != nil {
			c.add(loc.at(pm.path).finding(findingInvalidValue, layerGatewayAPI, err.Error()+" (the implementation rejects the rule, or the route)", "fix the expression"))
			return matcher{desc: "path regex (invalid)", never: true}
		}
		mt.gw = gwKey{path: pathRegex}
		return mt
	}
	c.refuse(rt, loc.at(joinPath(pm.path, "type")), fmt.Sprintf("path match type %q is not Exact, PathPrefix or RegularExpression", truncate(typ)), "fix the type")
	return matcher{desc: "path (invalid)", never: true}
}

// badPath says why the CRD refuses an Exact or PathPrefix value, or "".
func badPath(v string) string {
	switch {
	case !strings.HasPrefix(v, "/"):
		return "must be an absolute path and start with '/'"
	case !pathChars.MatchString(v):
		return "has a character a path may not have"
	}
	for _, bad := range []string{"//", "/./", "/../", "%2f", "%2F", "#"} {
		if strings.Contains(v, bad) {
			return "must not contain " + strconv.Quote(bad)
		}
	}
	if strings.HasSuffix(v, "/..") || strings.HasSuffix(v, "/.") {
		return "must not end with '/..' or '/.'"
	}
	return ""
}

// gatewayRetry reads an HTTPRoute rule's retry field (Gateway API's
// HTTPRouteRetry, GEP-1731), as Istio (pilot/pkg/config/kube/gateway,
// conversion.go) and Envoy Gateway (internal/gatewayapi/route.go,
// internal/xds/translator/route.go) implement it: attempts retries (2 when
// not set), on the codes listed and on connection errors; both add the gRPC
// statuses unavailable and cancelled, and Envoy Gateway retries 503 when no
// codes are listed.
func (c *Config) gatewayRetry(rt *k8sRoute, loc location, v any) *rule {
	o, ok := asObj(v, loc.path)
	if !ok {
		c.refuse(rt, loc, "retry must be an object", "write retry: {codes: [503], attempts: 1}")
		return nil
	}
	for _, k := range o.unknownKeys(gatewayRetryFields...) {
		c.add(loc.at(joinPath(o.path, k)).finding(findingUnknownField, layerGatewayAPI, fmt.Sprintf("unknown field %q in an HTTPRoute retry%s; the API server rejects or drops it", truncate(k), didYouMean(k, gatewayRetryFields)), "use codes, attempts, backoff"))
	}
	retries := int64(gatewayDefaultRetries)
	assumed := true
	if av, ap, ok := o.key("attempts"); ok {
		n, ok := integer(av)
		switch {
		case !ok || n < 0:
			c.refuse(rt, loc.at(ap), "attempts must be an integer of at least 1", "write the number of retries")
		case n == 0:
			c.add(loc.at(ap).finding(findingInvalidValue, layerGatewayAPI, "attempts 0: the Gateway API CRDs since v1.6.0 refuse attempts below 1 (the route is then not applied); older ones accept it, and Istio and Envoy Gateway read it as no retries",
				"remove the retry field to switch the route's retries off"))
			retries, assumed = 0, false
		default:
			retries, assumed = n, false
		}
	}
	conds := []string{}
	codes, cpath := o.list("codes")
	for i, x := range codes {
		n, ok := integer(x)
		if !ok || n < 400 || n > 599 {
			c.refuse(rt, loc.at(cpath[i]), "a retry code must be an HTTP status from 400 to 599", "fix the code")
			continue
		}
		conds = union(conds, []string{strconv.FormatInt(n, 10)})
	}
	if len(conds) == 0 {
		conds = append(conds, "503 (Envoy Gateway's default when no codes are listed)")
	}
	conds = append(conds, "connection-error", "unavailable", "cancelled")
	if bv, bp, ok := o.key("backoff"); ok {
		if s, isString := bv.(string); !isString || !gatewayPeriod.MatchString(s) {
			c.refuse(rt, loc.at(bp), fmt.Sprintf("backoff %s is not a Gateway API duration (GEP-2257: such as \"100ms\" or \"1s500ms\")", describe(bv)), "fix the duration")
		}
	}
	if retries == 0 {
		return nil
	}
	ru := &rule{layer: layerGatewayAPI, loc: loc, attempts: Attempts{N: int(min(retries, 1<<20)) + 1}, conds: conds,
		noBudget: "an HTTPRoute retry has no budget in the Gateway API standard (an XBackendTrafficPolicy retryConstraint for its backends, or an Envoy Gateway BackendTrafficPolicy circuitBreaker, gives it one)"}
	if assumed {
		ru.via = fmt.Sprintf("attempts is not set: the number is the implementation's; %d retries (Istio's and Envoy Gateway's default) are assumed", gatewayDefaultRetries)
	}
	return ru
}

// linkerdIgnores says why Linkerd's policy controller does not use the
// route for its Service parents (policy-controller/k8s/index/src/outbound:
// a route it fails to convert is skipped), or "".
func (r *k8sRoute) linkerdIgnores() string {
	grpc := r.kind == "GRPCRoute"
	switch {
	case r.retry.bad(grpc) != "":
		return "its " + linkerdProto(grpc) + " retry annotations are invalid: " + r.retry.bad(grpc)
	case r.badTimeouts:
		return "a timeout.linkerd.io annotation is not a duration it reads"
	}
	return r.linkerdUnsupported
}

// gatewayTables returns the Gateway API route tables: per Service parent,
// the rules of its HTTPRoutes and GRPCRoutes; per Gateway parent and
// channel host, the rules of the routes whose hostnames match the host.
// Each table is ranked by Gateway API's precedence, and its rules carry
// the retries of the HTTPRoute retry field or of an Envoy Gateway
// BackendTrafficPolicy. A route the API server refuses is left out.
func (c *Config) gatewayTables(hosts []string) []*table {
	type tkey struct{ parent, host string }
	byKey := map[tkey]*table{}
	var order []tkey
	add := func(k tkey, r *k8sRoute, p routeParent, hs hostScore) {
		t, ok := byKey[k]
		if !ok {
			// A Service whose mesh is Linkerd: its table reports the methods its routes refuse.
			coverage := !p.service || !c.linkerdHost(p.host)
			t = &table{layer: layerGatewayAPI, loc: r.loc, rank: rankGateway, coverage: coverage, gateway: p.kind == "Gateway" || p.kind == "ListenerSet"}
			byKey[k] = t
			order = append(order, k)
		}
		for i, kr := range r.rules {
			t.routes = append(t.routes, route{loc: kr.loc, name: kr.name, matches: kr.matches, rule: c.gatewayRule(r, i, p),
				ref: r.ref, index: i, host: hs})
		}
	}
	for _, r := range c.routes {
		if r.invalid {
			continue
		}
		for _, p := range r.parents {
			switch {
			case p.service: // GAMMA: hostnames give the implementation no function
				if len(hosts) == 0 || anyHostMatches(hosts, []string{p.host}) {
					add(tkey{p.key, ""}, r, p, hostScore{unknown: len(r.hostnames) > 0})
				}
			case len(hosts) == 0:
				add(tkey{p.key, ""}, r, p, hostScore{unknown: len(r.hostnames) > 0})
			default:
				for _, h := range hosts {
					if hs, ok := gatewayHostScore(r.hostnames, h); ok {
						add(tkey{p.key, h}, r, p, hs)
					}
				}
			}
		}
	}
	out := make([]*table, 0, len(order))
	for _, k := range order {
		out = append(out, byKey[k])
	}
	return out
}
