package mesh

import (
	"fmt"
	"slices"
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

// linkerdTimeouts are the timeout annotations Linkerd's policy controller
// parses on a route (parse_timeouts): one it cannot parse makes it skip the
// route, retries included.
var linkerdTimeouts = []string{"timeout.linkerd.io/request", "timeout.linkerd.io/response", "timeout.linkerd.io/idle"}

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
	classes   bool // responseClasses decide which responses are failures
}

// linkerdRetry is the retry.linkerd.io annotations of one resource, read
// as Linkerd's policy controller reads them (linkerd2
// policy-controller/k8s/index/src/outbound/index/http.rs parse_http_retry
// and grpc.rs parse_grpc_retry): an HTTP route (and the default route of a
// Service without routes) takes retry.linkerd.io/http, a GRPCRoute
// retry.linkerd.io/grpc; both take /limit and /timeout.
type linkerdRetry struct {
	loc  location // the annotations
	http []string // retry.linkerd.io/http's conditions; nil: not set
	grpc []string // retry.linkerd.io/grpc's
	// limit is the number of retries; 0 when not set or "0", which the
	// controller reads as not set (1 retry when anything else is set).
	limit   int64
	timeout string // "": not set, or a zero duration
	// badHTTP and badGRPC say why the controller refuses the annotations
	// for an HTTP route and for a GRPCRoute: for a Service it then ignores
	// all of them, and a route that carries them is not used at all.
	badHTTP, badGRPC string
}

// linkerdProto names the protocol a Linkerd route table serves.
func linkerdProto(grpc bool) string {
	if grpc {
		return "gRPC"
	}
	return "HTTP"
}

// bad says why the controller refuses the annotations for the protocol.
func (r *linkerdRetry) bad(grpc bool) string {
	if r == nil {
		return ""
	}
	if grpc {
		return r.badGRPC
	}
	return r.badHTTP
}

// present reports whether the annotations configure retries for the
// protocol (the controller's parse returns a retry).
func (r *linkerdRetry) present(grpc bool) bool {
	if r == nil || r.bad(grpc) != "" {
		return false
	}
	conds := r.http
	if grpc {
		conds = r.grpc
	}
	return r.limit > 0 || r.timeout != "" || conds != nil
}

// rule is the retry the annotations configure for the protocol: 1 + limit
// attempts (1 retry when limit is not set), on the listed conditions and,
// as Linkerd's proxy does for every retry policy, on a refused stream and
// on a request that found no endpoint, both never sent (linkerd2-proxy
// linkerd/app/outbound/src/http/logical/policy/route/retry.rs); nil when
// they configure none. Annotations have no budget.
func (r *linkerdRetry) rule(grpc bool) *rule {
	if !r.present(grpc) {
		return nil
	}
	n := r.limit
	if n == 0 {
		n = 1
	}
	conds := append([]string{}, r.http...)
	if grpc {
		conds = append([]string{}, r.grpc...)
	}
	conds = append(conds, "refused-stream")
	if r.timeout != "" {
		conds = append(conds, "timeout ("+r.timeout+")")
	}
	return &rule{layer: layerLinkerd, loc: r.loc, attempts: Attempts{N: int(n) + 1}, conds: conds,
		via:      "Linkerd also retries, unsent, a request refused or with no endpoint available",
		noBudget: "retries configured with retry.linkerd.io annotations have no retry budget (only a ServiceProfile's retryBudget bounds Linkerd's retries)"}
}

// readAnnotations reads the retry.linkerd.io annotations of a resource (nil
// when it has none), and reports the annotations of other products that may
// change retries.
func (c *Config) readAnnotations(loc location, meta obj, kind string) *linkerdRetry {
	ann, ok := meta.child("annotations")
	if !ok {
		return nil
	}
	c.unknownAnnotations(loc, ann, kind)
	var r *linkerdRetry
	get := func(name string) (string, location, bool) {
		v, p, ok := ann.key(name)
		if !ok {
			return "", loc, false
		}
		if r == nil {
			r = &linkerdRetry{loc: loc.at(ann.path)}
		}
		s, isString := v.(string)
		if !isString {
			c.add(loc.at(p).finding(findingInvalidValue, layerLinkerd, fmt.Sprintf("annotation %s must be a string, not %s (quote it): the API server refuses the %s", name, describe(v), kind), fmt.Sprintf("write %s: \"%s\"", name, describe(v))))
			return "", loc, false
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
		c.annotationLimit(r, at, s, kind)
	}
	if s, at, ok := get(annoTimeout); ok {
		c.annotationTimeout(r, at, s, kind)
	}
	return r
}

// consequence says what Linkerd does with a resource whose annotations it
// refuses for a protocol.
func consequence(kind, proto string) string {
	if kind == "Service" {
		return "Linkerd's policy controller then ignores all of the Service's retry annotations for " + proto + " routes"
	}
	return "Linkerd's policy controller then does not use the " + kind + " at all"
}

// unknownAnnotations reports the retry.linkerd.io annotations Linkerd does
// not know, and other products' annotations that may configure retries
// (Kong's konghq.com/retries, a konghq.com/override naming a KongIngress,
// anything else that names retries), which the checker does not read.
func (c *Config) unknownAnnotations(loc location, ann obj, kind string) {
	for _, k := range ann.keys() {
		at := loc.at(joinPath(ann.path, k))
		switch {
		case strings.HasPrefix(k, "retry.linkerd.io/"):
			if !contains(linkerdAnnotations, k) {
				c.add(at.finding(findingUnknownField, layerLinkerd, fmt.Sprintf("unknown annotation %q%s; Linkerd ignores it", truncate(k), didYouMean(k, linkerdAnnotations)),
					"use "+strings.Join(linkerdAnnotations, ", ")))
			}
		case contains(linkerdTimeouts, k):
			if v, _ := ann.str(k); kind != "Service" && !linkerdDuration(v) {
				c.add(at.finding(findingInvalidValue, layerLinkerd, fmt.Sprintf("%s %q is not a duration Linkerd reads (a whole number and one of ms, s, m, h, d, such as \"300ms\"): %s", truncate(k), truncate(v), consequence(kind, "any")),
					"write a whole number with a unit"))
			}
		case k == "konghq.com/override" || strings.Contains(strings.ToLower(k), "retry") || strings.Contains(strings.ToLower(k), "retries"):
			c.add(at.finding(findingNotUnderstood, "", fmt.Sprintf("annotation %q may configure retries (Kong reads konghq.com/retries on a Service, and a KongIngress named by konghq.com/override can set proxy.retries, 5 by default); the checker does not read it, so the attempts it reports may be too low", truncate(k)),
				"check this layer's retries by hand, or remove the annotation"))
		}
	}
}

// annotationHTTP reads retry.linkerd.io/http (status codes, ranges,
// gateway-error, 5xx), which a GRPCRoute does not take. The controller
// splits the list at commas without trimming blanks.
func (c *Config) annotationHTTP(r *linkerdRetry, at location, s, kind string) {
	if kind == "GRPCRoute" {
		c.add(at.finding(findingInvalidValue, layerLinkerd, annoHTTP+" is not valid on a GRPCRoute; Linkerd ignores it", "use "+annoGRPC))
		return
	}
	r.http = []string{}
	for _, tok := range strings.Split(s, ",") {
		if !linkerdHTTPCondition(tok) {
			c.add(at.finding(findingUnknownCondition, layerLinkerd, fmt.Sprintf("%q is not a status code, a range xxx-yyy, gateway-error or 5xx (Linkerd does not trim blanks): %s", truncate(tok), consequence(kind, "HTTP")), "fix the list"))
			if r.badHTTP == "" {
				r.badHTTP = fmt.Sprintf("%s has %q", annoHTTP, truncate(tok))
			}
			continue
		}
		r.http = union(r.http, []string{strings.ToLower(tok)})
	}
}

// annotationGRPC reads retry.linkerd.io/grpc (gRPC conditions), which an
// HTTPRoute does not take.
func (c *Config) annotationGRPC(r *linkerdRetry, at location, s, kind string) {
	if kind == "HTTPRoute" {
		c.add(at.finding(findingInvalidValue, layerLinkerd, annoGRPC+" is not valid on an HTTPRoute; Linkerd ignores it", "use "+annoHTTP+", or a GRPCRoute"))
		return
	}
	r.grpc = []string{}
	for _, tok := range strings.Split(s, ",") {
		if !isGRPCCondition(strings.ToLower(tok)) {
			c.add(at.finding(findingUnknownCondition, layerLinkerd, fmt.Sprintf("%q is not one of cancelled, deadline-exceeded, internal, resource-exhausted, unavailable (Linkerd does not trim blanks): %s", truncate(tok), consequence(kind, "gRPC")), "fix the list"))
			if r.badGRPC == "" {
				r.badGRPC = fmt.Sprintf("%s has %q", annoGRPC, truncate(tok))
			}
			continue
		}
		r.grpc = union(r.grpc, []string{strings.ToLower(tok)})
	}
}

// annotationLimit reads retry.linkerd.io/limit, the number of retries (an
// unsigned 16-bit integer; 0 reads as not set).
func (c *Config) annotationLimit(r *linkerdRetry, at location, s, kind string) {
	n, err := strconv.ParseUint(strings.TrimPrefix(s, "+"), 10, 16)
	if err != nil {
		c.add(at.finding(findingInvalidValue, layerLinkerd, fmt.Sprintf("%s %q is not an integer from 0 to 65535: %s", annoLimit, truncate(s), consequence(kind, "HTTP and gRPC")), "write the number of retries, such as \"1\""))
		r.badHTTP, r.badGRPC = annoLimit+" is invalid", annoLimit+" is invalid"
		return
	}
	if n == 0 {
		c.add(at.finding(findingInvalidValue, layerLinkerd, annoLimit+" \"0\" does not switch retries off: Linkerd reads 0 as not set, so when any other retry annotation is set it retries once",
			"remove the retry.linkerd.io annotations to switch Linkerd's retries off"))
	}
	r.limit = int64(n)
}

// annotationTimeout reads retry.linkerd.io/timeout, which makes a timed-out
// attempt a retry condition.
func (c *Config) annotationTimeout(r *linkerdRetry, at location, s, kind string) {
	d, ok := linkerdParseDuration(s)
	if !ok {
		c.add(at.finding(findingInvalidValue, layerLinkerd, fmt.Sprintf("%s %q is not a duration Linkerd reads (a whole number and one of ms, s, m, h, d, such as \"300ms\"): %s", annoTimeout, truncate(s), consequence(kind, "HTTP and gRPC")), "write a whole number with a unit"))
		r.badHTTP, r.badGRPC = annoTimeout+" is invalid", annoTimeout+" is invalid"
		return
	}
	if d > 0 {
		r.timeout = strings.TrimSpace(s)
	}
}

// linkerdParseDuration reads a duration as Linkerd's policy controller does
// (outbound/index.rs parse_duration): blanks trimmed, a whole number and one
// unit of ms, s, m, h or d; "0" alone is zero.
func linkerdParseDuration(s string) (time.Duration, bool) {
	s = strings.TrimSpace(s)
	i := len(s)
	for i > 0 && s[i-1] >= 'a' && s[i-1] <= 'z' {
		i--
	}
	num, unit := s[:i], s[i:]
	n, err := strconv.ParseUint(num, 10, 63)
	if err != nil || strings.HasPrefix(num, "+") {
		return 0, false
	}
	units := map[string]time.Duration{"ms": time.Millisecond, "s": time.Second, "m": time.Minute, "h": time.Hour, "d": 24 * time.Hour}
	if unit == "" && n == 0 {
		return 0, true
	}
	u, ok := units[unit]
	if !ok || n > uint64(1<<62)/uint64(u) {
		return 0, false
	}
	return time.Duration(n) * u, true
}

func linkerdDuration(s string) bool { _, ok := linkerdParseDuration(s); return ok }

// linkerdHTTPCondition reports whether tok is a condition of
// retry.linkerd.io/http: 5xx, gateway-error (any case), a status code from
// 100 to 599, or a range of them.
func linkerdHTTPCondition(tok string) bool {
	if strings.EqualFold(tok, "5xx") || strings.EqualFold(tok, "gateway-error") {
		return true
	}
	if _, ok := httpStatus(tok); ok {
		return true
	}
	if lo, hi, ok := strings.Cut(tok, "-"); ok {
		a, okA := httpStatus(lo)
		b, okB := httpStatus(hi)
		return okA && okB && a <= b
	}
	return false
}

func (c *Config) readService(loc location, o obj, meta obj, name, ns string) {
	s := &k8sService{loc: loc, host: qualify(name, ns)}
	s.retry = c.readAnnotations(loc, meta, "Service")
	c.services = append(c.services, s)
}

var (
	linkerdBudgetFields  = []string{"retryRatio", "minRetriesPerSecond", "ttl"}
	serviceProfileFields = []string{"routes", "retryBudget", "dstOverrides", "opaquePorts"}
	spRouteFields        = []string{"name", "condition", "responseClasses", "isRetryable", "timeout"}
)

// readServiceProfile reads a ServiceProfile: its routes and its retry
// budget (Linkerd's default when it sets none).
func (c *Config) readServiceProfile(loc location, o obj, name, ns string) {
	spec, ok := o.child("spec")
	if !ok {
		c.add(loc.finding(findingInvalidValue, layerLinkerd, "a ServiceProfile without spec", "add spec.routes"))
		return
	}
	sp := &serviceProfile{loc: loc, host: strings.ToLower(name)}
	if strings.Count(name, ".") < 2 {
		c.add(loc.at("metadata.name").finding(findingInvalidValue, layerLinkerd, fmt.Sprintf("a ServiceProfile is named after the full name of its service (NAME.NAMESPACE.svc.cluster.local); %q applies to no service", truncate(name)),
			"name it "+qualify(name, ns)))
		sp.host = qualify(name, ns)
	}
	for _, k := range spec.unknownKeys(serviceProfileFields...) {
		c.add(loc.at(joinPath(spec.path, k)).finding(findingUnknownField, layerLinkerd, fmt.Sprintf("unknown field %q in a ServiceProfile's spec%s; the API server drops it", truncate(k), didYouMean(k, serviceProfileFields)),
			"use "+strings.Join(serviceProfileFields, ", ")))
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
	for _, k := range ro.unknownKeys(spRouteFields...) {
		c.add(loc.at(joinPath(ro.path, k)).finding(findingUnknownField, layerLinkerd, fmt.Sprintf("unknown field %q in a ServiceProfile route%s; the API server drops it", truncate(k), didYouMean(k, spRouteFields)),
			"use "+strings.Join(spRouteFields, ", ")))
	}
	sr.classes = has(ro, "responseClasses")
	if cond, ok := ro.child("condition"); ok {
		sr.match = c.spCondition(loc, cond, 0)
	} else {
		c.add(loc.at(ro.path).finding(findingInvalidValue, layerLinkerd, "a route without condition matches nothing", "add condition: {method: POST, pathRegex: ...}"))
		sr.match = matcher{desc: "no condition", never: true}
	}
	if v, p, ok := ro.key("isRetryable"); ok {
		b, ok := boolean(v)
		if !ok {
			c.add(loc.at(p).finding(findingInvalidValue, layerLinkerd, "isRetryable must be true or false", "fix the value"))
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
			c.add(loc.at(joinPath(rb.path, k)).finding(findingUnknownField, layerLinkerd, fmt.Sprintf("unknown field %q in a retryBudget%s", truncate(k), didYouMean(k, linkerdBudgetFields)), "use "+strings.Join(linkerdBudgetFields, ", ")))
		}
		if v, p, ok := rb.key("retryRatio"); ok {
			if x, ok := number(v); ok && x >= 0 {
				ratio = x
			} else {
				c.add(loc.at(p).finding(findingInvalidValue, layerLinkerd, "retryRatio must be a non-negative number", "write a ratio such as 0.1"))
			}
		}
		if v, p, ok := rb.key("minRetriesPerSecond"); ok {
			if n, ok := integer(v); ok && n >= 0 {
				minRPS = n
			} else {
				c.add(loc.at(p).finding(findingInvalidValue, layerLinkerd, "minRetriesPerSecond must be a non-negative integer", "write a small number such as 5"))
			}
		}
		if v, p, ok := rb.key("ttl"); ok {
			if d, ok := duration(v); ok && d > 0 {
				ttl = d
			} else {
				c.add(loc.at(p).finding(findingInvalidValue, layerLinkerd, "ttl must be a duration such as \"10s\"", "fix the duration"))
			}
		}
	}
	return fmt.Sprintf("%s: retries at most %s of requests plus %d per second, over %s", where, strconv.FormatFloat(ratio, 'f', -1, 64), minRPS, ttl)
}

// spCondition reads a ServiceProfile request match: pathRegex, method, all,
// any, not; several fields must all hold.
func (c *Config) spCondition(loc location, o obj, depth int) matcher {
	if depth > 16 {
		c.add(loc.at(o.path).finding(findingInvalidValue, layerLinkerd, "conditions nested too deeply", "simplify the condition"))
		return matcher{desc: "too deep", never: true}
	}
	var parts []matcher
	if re, ok := o.str("pathRegex"); ok {
		m, err := regexMatcher("pathRegex", re, false)
		if err != nil {
			c.add(loc.at(joinPath(o.path, "pathRegex")).finding(findingInvalidValue, layerLinkerd, err.Error(), "fix the expression"))
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
		c.add(loc.at(o.path).finding(findingInvalidValue, layerLinkerd, "a condition with none of pathRegex, method, all, any, not", "add one"))
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

// linkerdTables returns the Linkerd route tables for the hosts (every
// service when hosts is empty): a ServiceProfile's routes, or else the
// service's GRPCRoutes (or, without any, its HTTPRoutes) with their (or the
// Service's) annotations, or else the Service's annotations on its default
// route.
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
		if t := c.linkerdServiceTable(svcs.byHost[h], svcs.routes[h]); t != nil {
			out = append(out, t)
		}
	}
	return out
}

// profileTable is the table of a ServiceProfile's routes: a retryable one
// is retried until its timeout or the profile's budget stops it. A request
// no route matches takes the default route: served, without retries, which
// is no finding.
func profileTable(sp *serviceProfile) *table {
	t := &table{layer: layerLinkerd, loc: sp.loc, coverage: true, unmatchedServed: true}
	for _, r := range sp.routes {
		rt := route{loc: r.loc, name: r.name, matches: []matcher{r.match}}
		if r.retryable {
			cond := "isRetryable"
			if r.classes {
				cond = "isRetryable (the responses its responseClasses make failures)"
			}
			rt.rule = &rule{layer: layerLinkerd, loc: r.loc, attempts: Attempts{Unbounded: true}, conds: []string{cond}, budget: sp.budget,
				via: "a retryable route is retried until its timeout (10s unless set) or the budget stops it"}
		}
		t.routes = append(t.routes, rt)
	}
	return t
}

// linkerdServices are the Services and the routes whose parent is a
// Service, by host, with the hosts in the order they were read. A route the
// API server refuses is left out.
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
		if r.invalid {
			continue
		}
		for _, p := range r.parents {
			if !p.service {
				continue
			}
			if _, known := s.byHost[p.host]; !known && s.routes[p.host] == nil {
				s.order = append(s.order, p.host)
			}
			if !slices.Contains(s.routes[p.host], r) {
				s.routes[p.host] = append(s.routes[p.host], r)
			}
		}
	}
	return s
}

// overriddenAnnotations reports the retry annotations of a Service that has
// a ServiceProfile, and of its routes: Linkerd ignores them. svc may be nil.
func (c *Config) overriddenAnnotations(svc *k8sService, routes []*k8sRoute) {
	if svc != nil && svc.retry != nil {
		c.add(svc.retry.loc.finding(findingOverridden, layerLinkerd, "retry annotations on a Service that has a ServiceProfile: Linkerd uses the profile's retries and ignores the annotations",
			"move the retries into the ServiceProfile, or delete the profile"))
	}
	for _, r := range routes {
		if r.retry != nil {
			c.add(r.retry.loc.finding(findingOverridden, layerLinkerd, "retry annotations on a route of a Service that has a ServiceProfile: Linkerd uses the profile's retries and ignores the annotations",
				"move the retries into the ServiceProfile, or delete the profile"))
		}
	}
}

// linkerdServiceTable is the table of a Service without a ServiceProfile,
// as Linkerd's policy controller builds it (policy-controller
// grpc/src/outbound.rs): the Service's GRPCRoutes when it has any, with the
// gRPC retry annotations; else its HTTPRoutes, with the HTTP ones; else
// one default route for every request with the Service's HTTP retry
// annotations (retry.linkerd.io/http, /limit, /timeout). A route's own
// retry annotations replace all of the Service's. A request no route
// matches is refused. It is nil when nothing retries and Linkerd is not
// meant to be the Service's mesh (linkerdRelevant). svc may be nil.
func (c *Config) linkerdServiceTable(svc *k8sService, routes []*k8sRoute) *table {
	var svcRetry *linkerdRetry
	if svc != nil {
		svcRetry = svc.retry
	}
	relevant := linkerdRelevant(svc, routes)
	used, grpc := c.linkerdRoutes(routes, relevant)
	var svcRule *rule
	if svcRetry != nil {
		svcRule = svcRetry.rule(grpc)
	}
	if len(used) == 0 {
		if svcRetry != nil && svcRetry.grpc != nil {
			c.add(svcRetry.loc.at(joinPath(svcRetry.loc.path, annoGRPC)).finding(findingInvalidValue, layerLinkerd,
				"Linkerd reads a Service's retry.linkerd.io/grpc only for the Service's GRPCRoutes; this Service has none, so its calls take the default route, which retries as retry.linkerd.io/http, /limit and /timeout say, and this annotation is not used",
				"attach a GRPCRoute to the Service (its rules then take the Service's gRPC retries), or use retry.linkerd.io/http"))
		}
		if svcRule == nil {
			return nil
		}
		return &table{layer: layerLinkerd, loc: svc.loc, routes: []route{{loc: svcRetry.loc, name: "service", rule: svcRule}}}
	}
	t := &table{layer: layerLinkerd, loc: used[0].loc, rank: rankLinkerd, coverage: relevant}
	retries := false
	for _, r := range used {
		ru := svcRule
		if r.retry != nil && r.retry.present(grpc) { // a route's annotations replace all of the Service's
			ru = r.retry.rule(grpc)
		}
		retries = retries || ru != nil
		for i, kr := range r.rules {
			rr := ru
			if kr.redirect { // answered by the proxy: nothing is sent, nothing retried
				rr = nil
			}
			t.routes = append(t.routes, route{loc: kr.loc, name: kr.name, matches: kr.matches, rule: rr, ref: r.ref, index: i,
				host: hostScore{unknown: len(r.hostnames) > 0}})
		}
	}
	if !retries && !relevant {
		return nil
	}
	return t
}

// linkerdRoutes returns the routes Linkerd uses for a Service: its
// GRPCRoutes when it has any (grpc), else its HTTPRoutes; a route the policy
// controller cannot convert is left out. When Linkerd is meant to be the
// Service's mesh (relevant), the routes left out are reported.
func (c *Config) linkerdRoutes(routes []*k8sRoute, relevant bool) (used []*k8sRoute, grpc bool) {
	var grpcRoutes, httpRoutes []*k8sRoute
	for _, r := range routes {
		if why := r.linkerdIgnores(); why != "" {
			if relevant {
				c.add(r.loc.finding(findingInvalidResource, layerLinkerd, fmt.Sprintf("Linkerd's policy controller cannot convert this %s (%s) and does not use it: its rules apply to no call through Linkerd", r.kind, why),
					"fix it as the message says"))
			}
			continue
		}
		if r.kind == "GRPCRoute" {
			grpcRoutes = append(grpcRoutes, r)
		} else {
			httpRoutes = append(httpRoutes, r)
		}
	}
	if len(grpcRoutes) == 0 {
		return httpRoutes, false
	}
	if relevant {
		for _, r := range httpRoutes {
			c.add(r.loc.finding(findingOverridden, layerLinkerd, "Linkerd routes the calls to a Service that has GRPCRoutes by its GRPCRoutes alone: this HTTPRoute, and its retry annotations, do not apply",
				"move its rules into a GRPCRoute, or remove it"))
		}
	}
	return grpcRoutes, true
}

// linkerdRelevant reports whether Linkerd is meant to be the mesh of a
// Service: it or one of its routes has retry.linkerd.io annotations, or a
// route is Linkerd's own (policy.linkerd.io). Its table then reports the
// methods its routes refuse, in place of the Gateway API table's.
func linkerdRelevant(svc *k8sService, routes []*k8sRoute) bool {
	relevant := svc != nil && svc.retry != nil
	for _, r := range routes {
		relevant = relevant || r.retry != nil || r.linkerdGroup
	}
	return relevant
}

// linkerdHost reports whether Linkerd is meant to be the mesh of the
// Service host: a ServiceProfile names it, or linkerdRelevant.
func (c *Config) linkerdHost(host string) bool {
	for _, sp := range c.profiles {
		if sp.host == host {
			return true
		}
	}
	svcs := c.linkerdServices()
	return linkerdRelevant(svcs.byHost[host], svcs.routes[host])
}
