package mesh

import (
	"fmt"
	"net"
	"sort"
	"strconv"
	"strings"
)

// envoyFilter is an Istio EnvoyFilter: patches to the Envoy configuration
// istiod generates. The check models one kind of patch, a MERGE of a
// retry_policy into the HTTP routes (applyTo HTTP_ROUTE) or the virtual
// hosts (VIRTUAL_HOST) of the sidecars' outbound routes; every other patch
// is reported as not understood.
type envoyFilter struct {
	loc      location
	ns       string
	selected bool // a workloadSelector or targetRefs picks some workloads
	priority int64
	order    int
	patches  []*efPatch
}

// efPatch is a modelled patch: where it applies and the RetryPolicy it
// merges.
type efPatch struct {
	loc        location
	vhostLevel bool
	host       string // the virtual host's service ("" any)
	port       int    // 0 any
	route      string // the route's name ("" any)
	maybe      bool   // a match the check cannot decide
	never      bool   // it matches no forwarding route
	retry      *envoyRetry
}

// patchTarget is an outbound route Istio generates for the mesh channel.
type patchTarget struct {
	host  string // qualified; "" not known
	port  int    // 0 not known
	route string // the route's name (a VirtualService route's name, or "default")
}

// envoyFilterRetryKeys are the fields of Envoy's configuration through
// which a patch can change retries.
var envoyFilterRetryKeys = map[string]bool{"retry_policy": true, "retryPolicy": true, "retry_policy_typed_config": true,
	"retryPolicyTypedConfig": true, "hedge_policy": true, "hedgePolicy": true, "request_mirror_policies": true,
	"requestMirrorPolicies": true, "circuit_breakers": true, "circuitBreakers": true, "max_retries": true, "maxRetries": true,
	"retry_budget": true, "retryBudget": true, "request_headers_to_add": true, "requestHeadersToAdd": true}

func (c *Config) readEnvoyFilter(loc location, o obj, ns string) {
	spec, _ := o.child("spec")
	ef := &envoyFilter{loc: loc, ns: ns, selected: has(spec, "workloadSelector") || has(spec, "targetRefs"), order: len(c.envoyFilters)}
	ef.priority, _ = integer(spec.m["priority"])
	patches, paths := spec.list("configPatches")
	for i, p := range patches {
		if ep := c.readPatch(loc.at(paths[i]), p); ep != nil {
			ef.patches = append(ef.patches, ep)
		}
	}
	c.envoyFilters = append(c.envoyFilters, ef)
}

// readPatch reads one configPatches entry: a modelled patch, or nil after
// reporting it as not understood.
func (c *Config) readPatch(at location, v any) *efPatch {
	po, ok := asObj(v, at.path)
	if !ok {
		return nil
	}
	applyTo, _ := po.str("applyTo")
	match, _ := po.child("match")
	context, _ := match.str("context")
	patch, _ := po.child("patch")
	op, _ := patch.str("operation")
	value, _ := patch.child("value")
	rv, rp, found := patchRetryPolicy(applyTo, value)
	touches := retryKeyPaths(value, 0)
	outbound := context == "" || context == "ANY" || context == "SIDECAR_OUTBOUND"
	if !found || op != "MERGE" || !outbound || len(touches) != 1 {
		c.add(at.finding(findingNotUnderstood, layerIstio, patchMessage(applyTo, op, context, touches),
			"check by hand what the patch does to retries, or configure retries with a VirtualService (retries) and a DestinationRule (retryBudget)"))
		return nil
	}
	p := &efPatch{loc: at.at(rp), vhostLevel: applyTo == "VIRTUAL_HOST"}
	patchMatch(p, match)
	p.retry = c.readEnvoyRetry(at.at(rp), rv, layerIstio)
	if p.retry == nil {
		return nil
	}
	return p
}

// patchMessage explains why a patch is not modelled.
func patchMessage(applyTo, op, context string, touches []string) string {
	what := fmt.Sprintf("an EnvoyFilter patch (applyTo %s, operation %s", orNone(applyTo), orNone(op))
	if context != "" {
		what += ", context " + context
	}
	what += ")"
	switch {
	case context == "GATEWAY" || context == "WAYPOINT":
		what += " changes gateways' configuration, a channel this check does not judge"
	case context == "SIDECAR_INBOUND":
		what += " changes the server-side sidecar's inbound configuration, whose retries this check does not count"
	default:
		what += " that the check does not model (it models a MERGE of a retry_policy into outbound HTTP_ROUTE or VIRTUAL_HOST)"
	}
	if len(touches) > 0 {
		return what + "; it sets " + strings.Join(touches, ", ") + ", which can change how the mesh retries: the attempts reported may be too low"
	}
	return what + "; no retry setting is visible in it, but what it does is not counted"
}

func orNone(s string) string {
	if s == "" {
		return "(none)"
	}
	return s
}

// patchRetryPolicy finds the RetryPolicy a patch's value merges: the
// route's (HTTP_ROUTE: value.route.retry_policy) or the virtual host's
// (VIRTUAL_HOST: value.retry_policy).
func patchRetryPolicy(applyTo string, value obj) (any, string, bool) {
	switch applyTo {
	case "HTTP_ROUTE":
		ra, ok := value.child("route")
		if !ok {
			return nil, "", false
		}
		return ra.key("retry_policy")
	case "VIRTUAL_HOST":
		return value.key("retry_policy")
	}
	return nil, "", false
}

// retryKeyPaths lists the paths of the fields in a patch's value through
// which it can change retries (not looking inside them), and of Envoy's
// retry request headers it names.
func retryKeyPaths(o obj, depth int) []string {
	if depth > maxDepth {
		return nil
	}
	var out []string
	for _, k := range o.keys() {
		p := joinPath(o.path, k)
		if envoyFilterRetryKeys[k] && (k != "request_headers_to_add" && k != "requestHeadersToAdd" || namesRetryHeader(o.m[k], 0)) {
			out = append(out, p)
			continue
		}
		out = append(out, retryKeyPathsIn(o.m[k], p, depth+1)...)
	}
	return out
}

func retryKeyPathsIn(v any, p string, depth int) []string {
	switch t := v.(type) {
	case map[string]any:
		return retryKeyPaths(obj{m: t, path: p}, depth)
	case []any:
		var out []string
		for i, e := range t {
			out = append(out, retryKeyPathsIn(e, p+"["+strconv.Itoa(i)+"]", depth+1)...)
		}
		return out
	}
	return nil
}

// namesRetryHeader reports whether a value names one of Envoy's retry
// request headers anywhere.
func namesRetryHeader(v any, depth int) bool {
	if depth > maxDepth {
		return false
	}
	switch t := v.(type) {
	case string:
		return isEnvoyRetryHeader(t)
	case map[string]any:
		for _, e := range t {
			if namesRetryHeader(e, depth+1) {
				return true
			}
		}
	case []any:
		for _, e := range t {
			if namesRetryHeader(e, depth+1) {
				return true
			}
		}
	}
	return false
}

// patchMatch reads where a patch applies (match.routeConfiguration); what
// the check cannot decide (a proxy version, a gateway, a route
// configuration's name) makes it apply maybe.
func patchMatch(p *efPatch, match obj) {
	if has(match, "proxy") || has(match, "listener") || has(match, "cluster") {
		p.maybe = true
	}
	rc, ok := match.child("routeConfiguration")
	if !ok {
		return
	}
	if n, ok := integer(rc.m["portNumber"]); ok && n > 0 {
		p.port = int(n)
	}
	if name, _ := rc.str("name"); name != "" {
		if n, err := strconv.Atoi(name); err == nil {
			p.port = n
		} else {
			p.maybe = true
		}
	}
	if has(rc, "gateway") || has(rc, "portName") {
		p.maybe = true
	}
	vh, _ := rc.child("vhost")
	if name, _ := vh.str("name"); name != "" {
		p.host = name
		if h, port, err := net.SplitHostPort(name); err == nil {
			p.host = h
			if n, err := strconv.Atoi(port); err == nil {
				p.port = n
			}
		}
	}
	if dn, _ := vh.str("domainName"); dn != "" {
		p.host = dn
	}
	r, _ := vh.child("route")
	p.route, _ = r.str("name")
	if a, _ := r.str("action"); a == "REDIRECT" || a == "DIRECT_RESPONSE" {
		p.never = true
	}
}

// patchApplies reports whether a patch applies to a route, and whether it
// only may.
func (c *Config) patchApplies(ef *envoyFilter, p *efPatch, t patchTarget) (applies, maybe bool) {
	root := c.rootNamespace
	if root == "" {
		root = "istio-system"
	}
	maybe = p.maybe || ef.selected || ef.ns != root
	switch {
	case p.never:
		return false, false
	case p.route != "" && p.route != t.route:
		return false, false
	case p.host != "" && t.host == "":
		maybe = true
	case p.host != "" && !hostMatches(t.host, p.host) && !hostMatches(p.host, t.host):
		return false, false
	}
	switch {
	case p.port != 0 && t.port == 0:
		maybe = true
	case p.port != 0 && p.port != t.port:
		return false, false
	}
	return true, maybe
}

// sortedEnvoyFilters returns the EnvoyFilters in the order Istio applies
// them: by priority, then as read.
func (c *Config) sortedEnvoyFilters() []*envoyFilter {
	out := append([]*envoyFilter(nil), c.envoyFilters...)
	sort.SliceStable(out, func(i, j int) bool { return out[i].priority < out[j].priority })
	return out
}

// patchedRule merges the EnvoyFilter patches that apply to a route into the
// policy Istio gives it, and returns the worst of the outcomes that may
// apply.
func (c *Config) patchedRule(pol *proxyRetry, t patchTarget) *rule {
	routeAlts := []*proxyRetry{pol}
	vhostAlts := []*proxyRetry{nil}
	for _, ef := range c.sortedEnvoyFilters() {
		for _, p := range ef.patches {
			ok, maybe := c.patchApplies(ef, p, t)
			if !ok {
				continue
			}
			if p.vhostLevel {
				vhostAlts = mergeAlternatives(vhostAlts, ef, p, maybe)
			} else {
				routeAlts = mergeAlternatives(routeAlts, ef, p, maybe)
			}
		}
	}
	var rules []*rule
	for _, a := range routeAlts {
		if a != nil {
			rules = append(rules, proxyRule(a, layerIstio))
			continue
		}
		for _, v := range vhostAlts { // no route policy: the virtual host's applies
			rules = append(rules, proxyRule(v, layerIstio))
		}
	}
	if len(rules) == 1 {
		return rules[0]
	}
	return worstRule(rules)
}

// maxAlternatives bounds the outcomes tracked for one route.
const maxAlternatives = 32

// mergeAlternatives merges a patch into each outcome; when it only may
// apply, the outcomes without it stay too.
func mergeAlternatives(alts []*proxyRetry, ef *envoyFilter, p *efPatch, maybe bool) []*proxyRetry {
	var out []*proxyRetry
	if maybe {
		out = append(out, alts...)
	}
	for _, a := range alts {
		if len(out) >= maxAlternatives {
			break
		}
		out = append(out, mergePatch(a, ef, p))
	}
	return out
}

// mergePatch merges a patch's RetryPolicy into a policy as a protobuf merge
// does: num_retries and retry_on replace when set to a non-zero value (a
// num_retries of 0 cannot switch retries off this way, istio/istio#22574),
// retriable_status_codes are appended. Merged into no policy, the patch's
// is the policy, with Envoy's default of 1 retry when it sets none.
func mergePatch(a *proxyRetry, ef *envoyFilter, p *efPatch) *proxyRetry {
	r := p.retry
	m := &proxyRetry{num: 1}
	if a != nil {
		cp := *a
		m = &cp
		m.codes = append([]int(nil), a.codes...)
		m.isDefault = false
		if r.numSet && r.numRetries != 0 {
			m.num = r.numRetries
		}
	} else if r.numSet {
		m.num = r.numRetries
	}
	if r.onSet {
		m.on = append([]string(nil), r.retryOn...)
	}
	for _, code := range r.codes {
		m.codes = append(m.codes, int(code))
	}
	m.loc = p.loc
	m.via = fmt.Sprintf("%s merges this retry_policy into the route Istio builds", ef.loc.object)
	return m
}
