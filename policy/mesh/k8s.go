package mesh

import (
	"fmt"
	"strconv"
	"strings"
	"time"
)

// Linkerd's annotation names (2.16 and later).
const (
	annoHTTP    = "retry.linkerd.io/http"
	annoGRPC    = "retry.linkerd.io/grpc"
	annoLimit   = "retry.linkerd.io/limit"
	annoTimeout = "retry.linkerd.io/timeout"
)

var linkerdAnnotations = []string{annoHTTP, annoGRPC, annoLimit, annoTimeout}

// Linkerd's ServiceProfile retry budget defaults.
const (
	linkerdDefaultRatio  = 0.2
	linkerdDefaultMinRPS = 10
	linkerdDefaultTTL    = 10 * time.Second
)

// gatewayDefaultRetries is the retry count assumed for an HTTPRoute retry
// without attempts (the standard leaves it to the implementation; Istio
// and Envoy Gateway retry twice).
const gatewayDefaultRetries = 2

// linkerdRetry is the retry.linkerd.io annotations of one resource.
type linkerdRetry struct {
	loc   location
	conds []string
	limit int64
}

type k8sService struct {
	loc   location
	host  string // qualified
	retry *linkerdRetry
}

type serviceProfile struct {
	loc    location
	host   string // the profile's name: the service's full name
	routes []spRoute
	budget string
}

type spRoute struct {
	loc       location
	name      string
	match     matcher
	retryable bool
}

type k8sRoute struct {
	loc     location
	kind    string
	parents []string // "Service host" or "Gateway ns/name", qualified
	hosts   []string // parent services' hosts and hostnames, for scoping
	retry   *linkerdRetry
	rules   []k8sRule
}

type k8sRule struct {
	loc     location
	matches []matcher
	retry   *rule // the HTTPRoute retry field's rule; nil: none
}

// readAnnotations reads the retry.linkerd.io annotations of a resource; nil
// when it has none that are strings.
func (c *Config) readAnnotations(loc location, meta obj, kind string) *linkerdRetry {
	ann, ok := meta.child("annotations")
	if !ok {
		return nil
	}
	c.unknownAnnotations(loc, ann)
	var r *linkerdRetry
	get := func(name string) (string, location, bool) {
		v, p, ok := ann.key(name)
		if !ok {
			return "", loc, false
		}
		s, isString := v.(string)
		if !isString {
			c.add(loc.at(p).finding(FindingInvalidValue, LayerLinkerd, fmt.Sprintf("annotation %s must be a string, not %s (quote it)", name, describe(v)), fmt.Sprintf("write %s: \"%s\"", name, describe(v))))
			return "", loc, false
		}
		if r == nil {
			r = &linkerdRetry{loc: loc.at(ann.path), limit: 1}
		}
		return s, loc.at(p), true
	}
	if s, at, ok := get(annoHTTP); ok {
		c.annotationHTTP(r, at, s, kind)
	}
	if s, at, ok := get(annoGRPC); ok {
		c.annotationGRPC(r, at, s, kind)
	}
	if s, at, ok := get(annoLimit); ok {
		c.annotationLimit(r, at, s)
	}
	if s, at, ok := get(annoTimeout); ok {
		c.annotationTimeout(r, at, s)
	}
	return r
}

// unknownAnnotations reports the retry.linkerd.io annotations Linkerd does
// not know.
func (c *Config) unknownAnnotations(loc location, ann obj) {
	for _, k := range ann.keys() {
		if strings.HasPrefix(k, "retry.linkerd.io/") && !contains(linkerdAnnotations, k) {
			c.add(loc.at(joinPath(ann.path, k)).finding(FindingUnknownField, LayerLinkerd, fmt.Sprintf("unknown annotation %q%s; Linkerd ignores it", truncate(k), didYouMean(k, linkerdAnnotations)),
				"use "+strings.Join(linkerdAnnotations, ", ")))
		}
	}
}

// annotationHTTP reads retry.linkerd.io/http (status codes, ranges,
// gateway-error, 5xx), which a GRPCRoute does not take.
func (c *Config) annotationHTTP(r *linkerdRetry, at location, s, kind string) {
	if kind == "GRPCRoute" {
		c.add(at.finding(FindingInvalidValue, LayerLinkerd, annoHTTP+" is not valid on a GRPCRoute; Linkerd ignores it", "use "+annoGRPC))
		return
	}
	for _, tok := range splitList(s) {
		if !linkerdHTTPCondition(tok) {
			c.add(at.finding(FindingUnknownCondition, LayerLinkerd, fmt.Sprintf("%q is not a status code, a range xxx-yyy, gateway-error or 5xx", truncate(tok)), "fix the list"))
			continue
		}
		r.conds = union(r.conds, []string{tok})
	}
}

// annotationGRPC reads retry.linkerd.io/grpc (gRPC conditions), which an
// HTTPRoute does not take.
func (c *Config) annotationGRPC(r *linkerdRetry, at location, s, kind string) {
	if kind == "HTTPRoute" {
		c.add(at.finding(FindingInvalidValue, LayerLinkerd, annoGRPC+" is not valid on an HTTPRoute; Linkerd ignores it", "use "+annoHTTP+", or a GRPCRoute"))
		return
	}
	for _, tok := range splitList(s) {
		if !isGRPCCondition(tok) {
			c.add(at.finding(FindingUnknownCondition, LayerLinkerd, fmt.Sprintf("%q is not one of cancelled, deadline-exceeded, internal, resource-exhausted, unavailable", truncate(tok)), "fix the list"))
			continue
		}
		r.conds = union(r.conds, []string{tok})
	}
}

// annotationLimit reads retry.linkerd.io/limit, the number of retries.
func (c *Config) annotationLimit(r *linkerdRetry, at location, s string) {
	n, err := strconv.ParseInt(strings.TrimSpace(s), 10, 32)
	if err != nil || n < 0 {
		c.add(at.finding(FindingInvalidValue, LayerLinkerd, fmt.Sprintf("%s %q is not a non-negative integer", annoLimit, truncate(s)), "write the number of retries, such as \"1\""))
		return
	}
	r.limit = n
}

// annotationTimeout reads retry.linkerd.io/timeout, which makes a timed-out
// attempt a retry condition.
func (c *Config) annotationTimeout(r *linkerdRetry, at location, s string) {
	if d, err := time.ParseDuration(strings.TrimSpace(s)); err != nil || d <= 0 {
		c.add(at.finding(FindingInvalidValue, LayerLinkerd, fmt.Sprintf("%s %q is not a duration with units, such as \"300ms\"", annoTimeout, truncate(s)), "write a duration with units"))
		return
	}
	r.conds = union(r.conds, []string{"timeout (" + strings.TrimSpace(s) + ")"})
}

func linkerdHTTPCondition(tok string) bool {
	if tok == "5xx" || tok == "gateway-error" {
		return true
	}
	if lo, hi, ok := strings.Cut(tok, "-"); ok {
		a, okA := httpStatus(lo)
		b, okB := httpStatus(hi)
		return okA && okB && a <= b
	}
	_, ok := httpStatus(tok)
	return ok
}

// linkerdRule turns annotations into a rule: 1 + limit attempts on the
// conditions; no budget (only ServiceProfiles have one).
func linkerdRule(r *linkerdRetry) *rule {
	if r == nil || len(r.conds) == 0 || r.limit == 0 {
		return nil
	}
	return &rule{layer: LayerLinkerd, loc: r.loc, attempts: Attempts{N: int(min(r.limit, 1<<20)) + 1}, conds: r.conds,
		noBudget: "retries configured with retry.linkerd.io annotations have no retry budget (only a ServiceProfile's retryBudget bounds Linkerd's retries)"}
}

func (c *Config) readService(loc location, o obj, meta obj, name, ns string) {
	s := &k8sService{loc: loc, host: qualify(name, ns)}
	s.retry = c.readAnnotations(loc, meta, "Service")
	c.services = append(c.services, s)
}

var linkerdBudgetFields = []string{"retryRatio", "minRetriesPerSecond", "ttl"}

// readServiceProfile reads a ServiceProfile: its routes and its retry
// budget (Linkerd's default when it sets none).
func (c *Config) readServiceProfile(loc location, o obj, name, ns string) {
	spec, ok := o.child("spec")
	if !ok {
		c.add(loc.finding(FindingInvalidValue, LayerLinkerd, "a ServiceProfile without spec", "add spec.routes"))
		return
	}
	sp := &serviceProfile{loc: loc, host: strings.ToLower(name)}
	if strings.Count(name, ".") < 2 {
		c.add(loc.at("metadata.name").finding(FindingInvalidValue, LayerLinkerd, fmt.Sprintf("a ServiceProfile is named after the full name of its service (NAME.NAMESPACE.svc.cluster.local); %q applies to no service", truncate(name)),
			"name it "+qualify(name, ns)))
		sp.host = qualify(name, ns)
	}
	routes, paths := spec.list("routes")
	for i, r := range routes {
		if ro, ok := asObj(r, paths[i]); ok {
			sp.routes = append(sp.routes, c.spRoute(loc, ro))
		}
	}
	sp.budget = c.linkerdBudget(loc, spec)
	c.profiles = append(c.profiles, sp)
}

// spRoute reads one route of a ServiceProfile: its condition and whether it
// is retryable.
func (c *Config) spRoute(loc location, ro obj) spRoute {
	sr := spRoute{loc: loc.at(ro.path)}
	sr.name, _ = ro.str("name")
	if cond, ok := ro.child("condition"); ok {
		sr.match = c.spCondition(loc, cond, 0)
	} else {
		c.add(loc.at(ro.path).finding(FindingInvalidValue, LayerLinkerd, "a route without condition matches nothing", "add condition: {method: POST, pathRegex: ...}"))
		sr.match = matcher{desc: "no condition", never: true}
	}
	if v, p, ok := ro.key("isRetryable"); ok {
		b, ok := boolean(v)
		if !ok {
			c.add(loc.at(p).finding(FindingInvalidValue, LayerLinkerd, "isRetryable must be true or false", "fix the value"))
		}
		sr.retryable = b
	}
	return sr
}

// linkerdBudget describes a ServiceProfile's spec.retryBudget, with
// Linkerd's defaults for what it does not set.
func (c *Config) linkerdBudget(loc location, spec obj) string {
	ratio, minRPS, ttl := linkerdDefaultRatio, int64(linkerdDefaultMinRPS), linkerdDefaultTTL
	where := loc.object + " spec.retryBudget (not set: Linkerd's default)"
	if rb, ok := spec.child("retryBudget"); ok {
		where = loc.object + " " + rb.path
		for _, k := range rb.unknownKeys(linkerdBudgetFields...) {
			c.add(loc.at(joinPath(rb.path, k)).finding(FindingUnknownField, LayerLinkerd, fmt.Sprintf("unknown field %q in a retryBudget%s", truncate(k), didYouMean(k, linkerdBudgetFields)), "use "+strings.Join(linkerdBudgetFields, ", ")))
		}
		if v, p, ok := rb.key("retryRatio"); ok {
			if x, ok := number(v); ok && x >= 0 {
				ratio = x
			} else {
				c.add(loc.at(p).finding(FindingInvalidValue, LayerLinkerd, "retryRatio must be a non-negative number", "write a ratio such as 0.1"))
			}
		}
		if v, p, ok := rb.key("minRetriesPerSecond"); ok {
			if n, ok := integer(v); ok && n >= 0 {
				minRPS = n
			} else {
				c.add(loc.at(p).finding(FindingInvalidValue, LayerLinkerd, "minRetriesPerSecond must be a non-negative integer", "write a small number such as 5"))
			}
		}
		if v, p, ok := rb.key("ttl"); ok {
			if d, ok := duration(v); ok && d > 0 {
				ttl = d
			} else {
				c.add(loc.at(p).finding(FindingInvalidValue, LayerLinkerd, "ttl must be a duration such as \"10s\"", "fix the duration"))
			}
		}
	}
	return fmt.Sprintf("%s: retries at most %s of requests plus %d per second, over %s", where, strconv.FormatFloat(ratio, 'f', -1, 64), minRPS, ttl)
}

// spCondition reads a ServiceProfile request match: pathRegex, method, all,
// any, not; several fields must all hold.
func (c *Config) spCondition(loc location, o obj, depth int) matcher {
	if depth > 16 {
		c.add(loc.at(o.path).finding(FindingInvalidValue, LayerLinkerd, "conditions nested too deeply", "simplify the condition"))
		return matcher{desc: "too deep", never: true}
	}
	var parts []matcher
	if re, ok := o.str("pathRegex"); ok {
		m, err := regexMatcher("pathRegex", re, false)
		if err != nil {
			c.add(loc.at(joinPath(o.path, "pathRegex")).finding(FindingInvalidValue, LayerLinkerd, err.Error(), "fix the expression"))
			m = matcher{desc: "pathRegex (invalid)", never: true}
		}
		parts = append(parts, m)
	}
	if meth, ok := o.str("method"); ok {
		m := allMatcher("method " + strconv.Quote(truncate(meth)))
		m.never = !strings.EqualFold(meth, "POST") // gRPC is always POST
		parts = append(parts, m)
	}
	for _, k := range []string{"all", "any"} {
		list, paths := o.list(k)
		if list == nil {
			continue
		}
		var subs []matcher
		for i, e := range list {
			if eo, ok := asObj(e, paths[i]); ok {
				subs = append(subs, c.spCondition(loc, eo, depth+1))
			}
		}
		if k == "all" {
			parts = append(parts, subs...)
		} else {
			parts = append(parts, anyOf(subs))
		}
	}
	if n, ok := o.child("not"); ok {
		inner := c.spCondition(loc, n, depth+1)
		parts = append(parts, matcher{desc: "not (" + inner.desc + ")", fn: func(p string) bool { return !inner.matches(p) }})
	}
	if len(parts) == 0 {
		c.add(loc.at(o.path).finding(FindingInvalidValue, LayerLinkerd, "a condition with none of pathRegex, method, all, any, not", "add one"))
		return matcher{desc: "empty condition", never: true}
	}
	return allOf(parts)
}

func allOf(ms []matcher) matcher {
	if len(ms) == 1 {
		return ms[0]
	}
	descs := make([]string, len(ms))
	for i, m := range ms {
		descs[i] = m.desc
	}
	return matcher{desc: strings.Join(descs, " and "), fn: func(p string) bool {
		for _, m := range ms {
			if !m.matches(p) {
				return false
			}
		}
		return true
	}}
}

func anyOf(ms []matcher) matcher {
	descs := make([]string, len(ms))
	for i, m := range ms {
		descs[i] = m.desc
	}
	return matcher{desc: "any of (" + strings.Join(descs, ", ") + ")", fn: func(p string) bool {
		for _, m := range ms {
			if m.matches(p) {
				return true
			}
		}
		return false
	}}
}

var gatewayRetryFields = []string{"codes", "attempts", "backoff"}

// readRoute reads an HTTPRoute or a GRPCRoute.
func (c *Config) readRoute(loc location, o obj, meta obj, kind, name, ns string) {
	spec, ok := o.child("spec")
	if !ok {
		c.add(loc.finding(FindingInvalidValue, LayerGatewayAPI, "a "+kind+" without spec", "add spec.parentRefs and spec.rules"))
		return
	}
	rt := &k8sRoute{loc: loc, kind: kind}
	rt.retry = c.readAnnotations(loc, meta, kind)
	parents, _ := spec.list("parentRefs")
	for _, p := range parents {
		po, ok := asObj(p, "")
		if !ok {
			continue
		}
		pk, _ := po.str("kind")
		pn, _ := po.str("name")
		pns, ok := po.str("namespace")
		if !ok {
			pns = ns
		}
		if pk == "" {
			pk = "Gateway"
		}
		if pk == "Service" {
			h := qualify(pn, pns)
			rt.parents = append(rt.parents, "Service "+h)
			rt.hosts = append(rt.hosts, h)
		} else {
			rt.parents = append(rt.parents, pk+" "+strings.ToLower(pns+"/"+pn))
		}
	}
	hostnames, _ := spec.list("hostnames")
	for _, h := range hostnames {
		if s, ok := h.(string); ok {
			rt.hosts = append(rt.hosts, strings.ToLower(s))
		}
	}
	if len(rt.parents) == 0 {
		rt.parents = []string{kind + " " + strings.ToLower(ns+"/"+name)}
	}
	rules, paths := spec.list("rules")
	for i, r := range rules {
		ro, ok := asObj(r, paths[i])
		if !ok {
			continue
		}
		kr := k8sRule{loc: loc.at(ro.path)}
		kr.matches = c.routeMatches(loc, ro, kind)
		if rv, rp, ok := ro.key("retry"); ok {
			if kind == "GRPCRoute" {
				c.add(loc.at(rp).finding(FindingUnknownField, LayerGatewayAPI, "a GRPCRoute rule has no retry field in the Gateway API standard; implementations ignore it",
					"configure gRPC retries with the mesh's own resources or annotations"))
			} else {
				kr.retry = c.gatewayRetry(loc.at(rp), rv)
			}
		}
		rt.rules = append(rt.rules, kr)
	}
	c.routes = append(c.routes, rt)
}

// routeMatches reads the matches of an HTTPRoute or GRPCRoute rule; a rule
// without matches matches every request.
func (c *Config) routeMatches(loc location, ro obj, kind string) []matcher {
	list, paths := ro.list("matches")
	if len(list) == 0 {
		if kind == "HTTPRoute" {
			return []matcher{segmentPrefixMatcher("path", "/", false)}
		}
		return nil // every method
	}
	var out []matcher
	for i, m := range list {
		mo, ok := asObj(m, paths[i])
		if !ok {
			continue
		}
		var mt matcher
		if kind == "GRPCRoute" {
			mt = c.grpcRouteMatch(loc, mo)
		} else {
			mt = c.httpRouteMatch(loc, mo)
		}
		if has(mo, "headers") {
			mt.conditional = true
		}
		out = append(out, mt)
	}
	return out
}

// grpcRouteMatch reads a GRPCRoute match's method (any method without one).
func (c *Config) grpcRouteMatch(loc location, mo obj) matcher {
	mm, ok := mo.child("method")
	if !ok {
		return allMatcher("any method")
	}
	typ, _ := mm.str("type")
	svc, _ := mm.str("service")
	meth, _ := mm.str("method")
	if svc == "" && meth == "" {
		c.add(loc.at(mm.path).finding(FindingInvalidValue, LayerGatewayAPI, "a method match needs a service, a method or both", "add them"))
	}
	mt, err := grpcMethodMatcher(svc, meth, typ == "RegularExpression")
	if err != nil {
		c.add(loc.at(mm.path).finding(FindingInvalidValue, LayerGatewayAPI, err.Error(), "fix the expression"))
		return matcher{desc: "method regex (invalid)", never: true}
	}
	return mt
}

// httpRouteMatch reads an HTTPRoute match: its path (the prefix "/"
// without one), a method other than POST (which gRPC never sends) and
// query parameters (a condition the checker does not evaluate).
func (c *Config) httpRouteMatch(loc location, mo obj) matcher {
	mt := segmentPrefixMatcher("path", "/", false)
	if pm, ok := mo.child("path"); ok {
		mt = c.httpPathMatch(loc, pm)
	}
	if meth, ok := mo.str("method"); ok && !strings.EqualFold(meth, "POST") {
		mt.never = true
	}
	if has(mo, "queryParams") {
		mt.conditional = true
	}
	return mt
}

// httpPathMatch reads an HTTPRoute path match of type PathPrefix (the
// default), Exact or RegularExpression.
func (c *Config) httpPathMatch(loc location, pm obj) matcher {
	typ, _ := pm.str("type")
	val, ok := pm.str("value")
	if !ok {
		val = "/"
	}
	switch typ {
	case "", "PathPrefix":
		return segmentPrefixMatcher("path", val, false)
	case "Exact":
		return exactMatcher("path", val, false)
	case "RegularExpression":
		mt, err := regexMatcher("path", val, false)
		if err != nil {
			c.add(loc.at(pm.path).finding(FindingInvalidValue, LayerGatewayAPI, err.Error(), "fix the expression"))
			return matcher{desc: "path regex (invalid)", never: true}
		}
		return mt
	}
	c.add(loc.at(joinPath(pm.path, "type")).finding(FindingInvalidValue, LayerGatewayAPI, fmt.Sprintf("path match type %q is not Exact, PathPrefix or RegularExpression", truncate(typ)), "fix the type"))
	return matcher{desc: "path (invalid)", never: true}
}

// gatewayRetry reads an HTTPRoute rule's retry field.
func (c *Config) gatewayRetry(loc location, v any) *rule {
	o, ok := asObj(v, loc.path)
	if !ok {
		c.add(loc.finding(FindingInvalidValue, LayerGatewayAPI, "retry must be an object", "write retry: {codes: [503], attempts: 1}"))
		return nil
	}
	for _, k := range o.unknownKeys(gatewayRetryFields...) {
		c.add(loc.at(joinPath(o.path, k)).finding(FindingUnknownField, LayerGatewayAPI, fmt.Sprintf("unknown field %q in an HTTPRoute retry%s; the API server rejects or drops it", truncate(k), didYouMean(k, gatewayRetryFields)), "use codes, attempts, backoff"))
	}
	retries := int64(gatewayDefaultRetries)
	assumed := true
	if av, ap, ok := o.key("attempts"); ok {
		n, ok := integer(av)
		if !ok || n < 1 {
			c.add(loc.at(ap).finding(FindingInvalidValue, LayerGatewayAPI, "attempts must be an integer of at least 1", "write the number of retries"))
		} else {
			retries, assumed = n, false
		}
	}
	conds := []string{}
	codes, cpath := o.list("codes")
	for i, x := range codes {
		n, ok := integer(x)
		if !ok || n < 400 || n > 599 {
			c.add(loc.at(cpath[i]).finding(FindingInvalidValue, LayerGatewayAPI, "a retry code must be an HTTP status from 400 to 599", "fix the code"))
			continue
		}
		conds = union(conds, []string{strconv.FormatInt(n, 10)})
	}
	conds = append(conds, "connection-error")
	if bv, bp, ok := o.key("backoff"); ok {
		if d, ok := duration(bv); !ok || d < 0 {
			c.add(loc.at(bp).finding(FindingInvalidValue, LayerGatewayAPI, "backoff must be a duration such as \"100ms\"", "fix the duration"))
		}
	}
	ru := &rule{layer: LayerGatewayAPI, loc: loc, attempts: Attempts{N: int(min(retries, 1<<20)) + 1}, conds: conds,
		noBudget: "an HTTPRoute retry has no budget in the Gateway API standard (the experimental BackendTrafficPolicy retryConstraint, GEP-3388, is not read)"}
	if assumed {
		ru.via = fmt.Sprintf("attempts is not set: the number is the implementation's; %d retries (Istio's and Envoy Gateway's default) are assumed", gatewayDefaultRetries)
	}
	return ru
}

// linkerdTables returns the Linkerd route tables for the hosts (every
// service when hosts is empty): a ServiceProfile's routes, or else the
// service's HTTPRoutes and GRPCRoutes with their (or the Service's)
// annotations, or else the Service's annotations for every request.
func (c *Config) linkerdTables(hosts []string) []*table {
	inScope := func(h string) bool { return len(hosts) == 0 || anyHostMatches(hosts, []string{h}) }
	var out []*table
	profiled := map[string]bool{}
	for _, sp := range c.profiles {
		if inScope(sp.host) {
			profiled[sp.host] = true
			out = append(out, profileTable(sp))
		}
	}
	svcs := c.linkerdServices()
	for _, h := range svcs.order {
		if !inScope(h) {
			continue
		}
		if profiled[h] {
			c.overriddenAnnotations(svcs.byHost[h], svcs.routes[h])
			continue
		}
		if t := linkerdAnnotationTable(svcs.byHost[h], svcs.routes[h]); t != nil {
			out = append(out, t)
		}
	}
	return out
}

// profileTable is the table of a ServiceProfile's routes: a retryable one
// is retried until its timeout or the profile's budget stops it.
func profileTable(sp *serviceProfile) *table {
	t := &table{layer: LayerLinkerd, loc: sp.loc, coverage: true, unmatchedServed: true}
	for _, r := range sp.routes {
		rt := route{loc: r.loc, name: r.name, matches: []matcher{r.match}}
		if r.retryable {
			rt.rule = &rule{layer: LayerLinkerd, loc: r.loc, attempts: Attempts{Unbounded: true}, conds: []string{"isRetryable"}, budget: sp.budget,
				via: "a retryable route is retried until its timeout (10s unless set) or the budget stops it"}
		}
		t.routes = append(t.routes, rt)
	}
	return t
}

// linkerdServices are the Services and the routes whose parent is a
// Service, by host, with the hosts in the order they were read.
type linkerdServices struct {
	order  []string
	byHost map[string]*k8sService // the last Service read for a host
	routes map[string][]*k8sRoute
}

// linkerdServices groups the Services and their routes by host.
func (c *Config) linkerdServices() linkerdServices {
	s := linkerdServices{byHost: map[string]*k8sService{}, routes: map[string][]*k8sRoute{}}
	for _, svc := range c.services {
		if _, dup := s.byHost[svc.host]; !dup {
			s.order = append(s.order, svc.host)
		}
		s.byHost[svc.host] = svc
	}
	for _, r := range c.routes {
		for _, p := range r.parents {
			if h, ok := strings.CutPrefix(p, "Service "); ok {
				if _, known := s.byHost[h]; !known && s.routes[h] == nil {
					s.order = append(s.order, h)
				}
				s.routes[h] = append(s.routes[h], r)
			}
		}
	}
	return s
}

// overriddenAnnotations reports the retry annotations of a Service that has
// a ServiceProfile, and of its routes: Linkerd ignores them. svc may be nil.
func (c *Config) overriddenAnnotations(svc *k8sService, routes []*k8sRoute) {
	if svc != nil && svc.retry != nil {
		c.add(svc.retry.loc.finding(FindingOverridden, LayerLinkerd, "retry annotations on a Service that has a ServiceProfile: Linkerd uses the profile's retries and ignores the annotations",
			"move the retries into the ServiceProfile, or delete the profile"))
	}
	for _, r := range routes {
		if r.retry != nil {
			c.add(r.retry.loc.finding(FindingOverridden, LayerLinkerd, "retry annotations on a route of a Service that has a ServiceProfile: Linkerd uses the profile's retries and ignores the annotations",
				"move the retries into the ServiceProfile, or delete the profile"))
		}
	}
}

// linkerdAnnotationTable is the table of a Service without a
// ServiceProfile: its routes' rules with their annotations (which replace
// all of the Service's) or the Service's, or else one route for every
// request with the Service's annotations. It is nil when nothing retries.
// svc may be nil.
func linkerdAnnotationTable(svc *k8sService, routes []*k8sRoute) *table {
	var svcRule *rule
	if svc != nil {
		svcRule = linkerdRule(svc.retry)
	}
	if len(routes) == 0 {
		if svcRule == nil {
			return nil
		}
		return &table{layer: LayerLinkerd, loc: svc.loc, routes: []route{{loc: svc.retry.loc, name: "service", rule: svcRule}}}
	}
	t := &table{layer: LayerLinkerd, loc: routes[0].loc, mostSpecific: true}
	any := svcRule != nil
	for _, r := range routes {
		ru := svcRule
		if r.retry != nil { // a route's annotations replace all of the Service's
			ru = linkerdRule(r.retry)
			any = any || ru != nil
		}
		for _, kr := range r.rules {
			t.routes = append(t.routes, route{loc: kr.loc, matches: kr.matches, rule: ru})
		}
	}
	if !any {
		return nil
	}
	return t
}

// gatewayTables returns, per parent (a Service or a Gateway), one table of
// the rules of all HTTPRoutes and GRPCRoutes attached to it, in Gateway
// API's precedence, with the HTTPRoute retry field's rules.
func (c *Config) gatewayTables(hosts []string) []*table {
	byParent := map[string]*table{}
	var order []string
	for _, r := range c.routes {
		if len(hosts) > 0 && !anyHostMatches(hosts, r.hosts) {
			continue
		}
		for _, p := range r.parents {
			t, ok := byParent[p]
			if !ok {
				t = &table{layer: LayerGatewayAPI, loc: r.loc, mostSpecific: true, coverage: true}
				byParent[p] = t
				order = append(order, p)
			}
			for _, kr := range r.rules {
				t.routes = append(t.routes, route{loc: kr.loc, matches: kr.matches, rule: kr.retry})
			}
		}
	}
	out := make([]*table, 0, len(order))
	for _, p := range order {
		out = append(out, byParent[p])
	}
	return out
}
