package mesh

import (
	"fmt"
	"math"
	"sort"
	"strconv"
	"strings"
)

// Istio's built-in default retry policy (pilot's DefaultPolicy), used for
// every HTTP route that sets no retries when the mesh config sets no
// defaultHttpRetryPolicy: 2 retries on these conditions, the status codes
// being 503.
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
	loc   location
	hosts []string // qualified
	http  []istioRoute
}

type istioRoute struct {
	loc      location
	name     string
	matches  []matcher
	retries  *istioRetry // nil: not set, the mesh default applies
	destHost string      // qualified; "" when the route has no destination
	subset   string
}

type destinationRule struct {
	loc     location
	host    string // qualified
	budget  istioBudget
	subsets map[string]istioBudget
}

// istioBudget is what bounds retries to a host: retryBudget, or a finite
// connectionPool.http.maxRetries.
type istioBudget struct {
	set  bool   // the traffic policy sets one of the two
	desc string // "" when neither bounds retries
	why  string // when desc is "": why not
}

func (c *Config) readVirtualService(loc location, o obj, name, ns string) {
	spec, ok := o.child("spec")
	if !ok {
		c.add(loc.finding(FindingInvalidValue, LayerIstio, "a VirtualService without spec", "add spec.hosts and spec.http"))
		return
	}
	vs := &virtualService{loc: loc}
	hosts, _ := spec.list("hosts")
	for _, h := range hosts {
		if s, ok := h.(string); ok {
			vs.hosts = append(vs.hosts, qualify(s, ns))
		}
	}
	routes, paths := spec.list("http")
	for i, r := range routes {
		ro, ok := asObj(r, paths[i])
		if !ok {
			c.add(loc.at(paths[i]).finding(FindingInvalidValue, LayerIstio, "an http route must be an object", "fix the route"))
			continue
		}
		rt := istioRoute{loc: loc.at(ro.path)}
		rt.name, _ = ro.str("name")
		rt.matches = c.istioMatches(loc, ro)
		if rv, rp, ok := ro.key("retries"); ok {
			rt.retries = c.readIstioRetry(loc.at(rp), rv)
		}
		dests, _ := ro.list("route")
		if len(dests) > 0 {
			if d, ok := asObj(dests[0], ""); ok {
				if dest, ok := d.child("destination"); ok {
					h, _ := dest.str("host")
					rt.destHost = qualify(h, ns)
					rt.subset, _ = dest.str("subset")
				}
			}
		}
		vs.http = append(vs.http, rt)
	}
	if len(vs.http) == 0 {
		if _, _, hasTCP := spec.key("tcp"); !hasTCP {
			if _, _, hasTLS := spec.key("tls"); !hasTLS {
				c.add(loc.at(joinPath(spec.path, "http")).finding(FindingInvalidValue, LayerIstio, "a VirtualService without http routes", "add spec.http routes for the gRPC methods"))
			}
		}
	}
	c.virtualServices = append(c.virtualServices, vs)
}

// istioMatches reads an http route's match list. No list matches every
// request.
func (c *Config) istioMatches(loc location, ro obj) []matcher {
	list, paths := ro.list("match")
	var out []matcher
	for i, m := range list {
		mo, ok := asObj(m, paths[i])
		if !ok {
			c.add(loc.at(paths[i]).finding(FindingInvalidValue, LayerIstio, "a match must be an object", "fix the match"))
			continue
		}
		ignoreCase := false
		if v, _, ok := mo.key("ignoreUriCase"); ok {
			ignoreCase, _ = boolean(v)
		}
		mt := allMatcher("any uri")
		if uri, ok := mo.child("uri"); ok {
			mt = c.stringMatch(loc, uri, "uri", ignoreCase, LayerIstio)
		}
		for _, k := range mo.keys() {
			switch k {
			case "uri", "ignoreUriCase", "name", "statPrefix", "scheme":
			case "method":
				if meth, ok := mo.child("method"); ok {
					if !stringMatchAccepts(meth, "POST") {
						mt.never = true // gRPC is always POST
					}
				}
			default: // headers, port, sourceLabels, gateways, queryParams, withoutHeaders, authority, sourceNamespace
				mt.conditional = true
			}
		}
		out = append(out, mt)
	}
	return out
}

// stringMatch reads an Istio StringMatch {exact|prefix|regex} on the path.
func (c *Config) stringMatch(loc location, sm obj, what string, ignoreCase bool, layer Layer) matcher {
	if v, ok := sm.str("exact"); ok {
		return exactMatcher(what, v, ignoreCase)
	}
	if v, ok := sm.str("prefix"); ok {
		return prefixMatcher(what, v, ignoreCase)
	}
	if v, ok := sm.str("regex"); ok {
		m, err := regexMatcher(what, v, ignoreCase)
		if err != nil {
			c.add(loc.at(joinPath(sm.path, "regex")).finding(FindingInvalidValue, layer, err.Error()+"; the product rejects the resource", "fix the expression (RE2 syntax)"))
			return matcher{desc: what + " regex (invalid)", never: true}
		}
		return m
	}
	c.add(loc.at(sm.path).finding(FindingInvalidValue, layer, what+" has none of exact, prefix and regex", "set one of them"))
	return matcher{desc: what + " (empty)", never: true}
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

var istioRetryFields = []string{"attempts", "perTryTimeout", "retryOn", "retryRemoteLocalities", "retryIgnorePreviousHosts", "backoff"}

// readIstioRetry reads an HTTPRetry object.
func (c *Config) readIstioRetry(loc location, v any) *istioRetry {
	o, ok := asObj(v, loc.path)
	if !ok {
		c.add(loc.finding(FindingInvalidValue, LayerIstio, "retries must be an object, not "+describe(v), "write retries: {attempts: N, retryOn: ...}"))
		return nil
	}
	r := &istioRetry{loc: loc}
	for _, k := range o.unknownKeys(istioRetryFields...) {
		c.add(loc.at(joinPath(o.path, k)).finding(FindingUnknownField, LayerIstio, fmt.Sprintf("unknown field %q in an HTTPRetry%s; Istio rejects the resource", truncate(k), didYouMean(k, istioRetryFields)),
			"spell it as Istio does: "+strings.Join(istioRetryFields, ", ")))
	}
	if av, ap, ok := o.key("attempts"); ok {
		n, ok := integer(av)
		switch {
		case !ok:
			c.add(loc.at(ap).finding(FindingInvalidValue, LayerIstio, "attempts must be an integer, not "+describe(av), "write the number of retries"))
		case n < 0:
			c.add(loc.at(ap).finding(FindingInvalidValue, LayerIstio, "attempts must not be negative; Istio rejects the resource", "write 0 to switch retries off"))
		default:
			r.attempts = n
		}
	} else if len(o.m) > 0 {
		c.add(loc.finding(FindingInvalidValue, LayerIstio, "retries without attempts: Istio reads attempts 0 and switches retries off for this route, whatever else is set",
			"write attempts: N to retry, or attempts: 0 alone to say that the route does not retry"))
	}
	if ov, op, ok := o.key("retryOn"); ok {
		s, ok := ov.(string)
		if !ok {
			c.add(loc.at(op).finding(FindingInvalidValue, LayerIstio, "retryOn must be a comma-separated string, not "+describe(ov), "write retryOn: \"unavailable,connect-failure\""))
		} else {
			r.retryOnSet = len(splitList(s)) > 0
			for _, tok := range splitList(s) {
				if n, ok := httpStatus(tok); ok {
					r.codes = append(r.codes, n)
					continue
				}
				if _, ok := envoyConditions[tok]; !ok {
					c.add(loc.at(op).finding(FindingUnknownCondition, LayerIstio, fmt.Sprintf("%q is not a retry condition Envoy knows%s; Istio's validation rejects it", truncate(tok), didYouMean(tok, conditionNames())),
						"use Envoy's names (5xx, gateway-error, reset, connect-failure, refused-stream, retriable-status-codes…) or the gRPC ones (cancelled, deadline-exceeded, internal, resource-exhausted, unavailable)"))
					continue
				}
				r.retryOn = append(r.retryOn, tok)
			}
		}
	}
	if tv, tp, ok := o.key("perTryTimeout"); ok {
		if d, ok := duration(tv); !ok || d < 1e6 {
			c.add(loc.at(tp).finding(FindingInvalidValue, LayerIstio, "perTryTimeout must be a duration of at least 1ms, such as \"2s\"", "fix the duration"))
		}
	}
	if bv, bp, ok := o.key("backoff"); ok {
		if d, ok := duration(bv); !ok || d < 1e6 {
			c.add(loc.at(bp).finding(FindingInvalidValue, LayerIstio, "backoff must be a duration of at least 1ms, such as \"25ms\"", "fix the duration"))
		}
	}
	return r
}

func conditionNames() []string {
	out := make([]string, 0, len(envoyConditions))
	for k := range envoyConditions {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// readMeshConfig reads the defaultHttpRetryPolicy of a mesh config.
func (c *Config) readMeshConfig(loc location, mc obj, object string) {
	c.istioSeen = true
	if loc.object == "" {
		loc.object = object
	}
	if v, p, ok := mc.key("defaultHttpRetryPolicy"); ok {
		c.meshDefault = c.readIstioRetry(loc.at(p), v)
	}
}

func (c *Config) readDestinationRule(loc location, o obj, ns string) {
	spec, ok := o.child("spec")
	if !ok {
		c.add(loc.finding(FindingInvalidValue, LayerIstio, "a DestinationRule without spec", "add spec.host"))
		return
	}
	host, _ := spec.str("host")
	dr := &destinationRule{loc: loc, host: qualify(host, ns), subsets: map[string]istioBudget{}}
	if tp, ok := spec.child("trafficPolicy"); ok {
		dr.budget = c.readIstioBudget(loc, tp)
	}
	subsets, paths := spec.list("subsets")
	for i, s := range subsets {
		so, ok := asObj(s, paths[i])
		if !ok {
			continue
		}
		name, _ := so.str("name")
		if tp, ok := so.child("trafficPolicy"); ok {
			dr.subsets[name] = c.readIstioBudget(loc, tp)
		}
	}
	c.destinationRules = append(c.destinationRules, dr)
}

var istioRetryBudgetFields = []string{"percent", "minRetryConcurrency", "budgetInterval"}

func (c *Config) readIstioBudget(loc location, tp obj) istioBudget {
	b := istioBudget{}
	if rb, ok := tp.child("retryBudget"); ok {
		b.set = true
		for _, k := range rb.unknownKeys(istioRetryBudgetFields...) {
			c.add(loc.at(joinPath(rb.path, k)).finding(FindingUnknownField, LayerIstio, fmt.Sprintf("unknown field %q in a retryBudget%s; Istio rejects the resource", truncate(k), didYouMean(k, istioRetryBudgetFields)),
				"spell it as Istio does: "+strings.Join(istioRetryBudgetFields, ", ")))
		}
		pct, min := 20.0, int64(3) // Envoy's defaults
		if v, p, ok := rb.key("percent"); ok {
			if x, ok := number(v); ok && x >= 0 && x <= 100 {
				pct = x
			} else {
				c.add(loc.at(p).finding(FindingInvalidValue, LayerIstio, "percent must be a number from 0 to 100", "write the share of active requests that may be retries, such as 10"))
			}
		}
		if v, p, ok := rb.key("minRetryConcurrency"); ok {
			if n, ok := integer(v); ok && n >= 0 {
				min = n
			} else {
				c.add(loc.at(p).finding(FindingInvalidValue, LayerIstio, "minRetryConcurrency must be a non-negative integer", "write a small number, such as 3"))
			}
		}
		b.desc = fmt.Sprintf("%s %s: retries at most %s%% of active requests, at least %d at once", loc.object, rb.path, strconv.FormatFloat(pct, 'f', -1, 64), min)
		return b
	}
	if http, ok := tp.child("connectionPool"); ok {
		if h, ok := http.child("http"); ok {
			if v, p, ok := h.key("maxRetries"); ok {
				b.set = true
				n, ok := integer(v)
				switch {
				case !ok || n < 0:
					c.add(loc.at(p).finding(FindingInvalidValue, LayerIstio, "maxRetries must be a non-negative integer", "write the number of concurrent retries allowed, such as 3"))
					b.why = "connectionPool.http.maxRetries is not a valid number"
				case n == 0 || n >= istioUnlimitedRetries:
					b.why = fmt.Sprintf("%s %s is %d: Istio reads it as its default, 4294967295 concurrent retries, which switches off Envoy's limit of 3", loc.object, p, n)
				default:
					b.desc = fmt.Sprintf("%s %s: at most %d concurrent retries to the host", loc.object, p, n)
				}
			}
		}
	}
	return b
}

// istioRule turns an HTTPRetry (nil: not set) into the rule Envoy gets, as
// Istio's pilot converts it: not set means the mesh default (or the built-in
// default); attempts 0 switches retries off; retryOn not set keeps the
// default conditions; HTTP status codes in retryOn add
// retriable-status-codes.
func (c *Config) istioRule(r *istioRetry) (*rule, bool) {
	src := r
	if src == nil {
		src = c.meshDefault
	}
	if src == nil { // Istio's built-in default
		return &rule{layer: LayerIstio, loc: location{object: "Istio defaults", path: "meshConfig.defaultHttpRetryPolicy (not set)"},
			attempts: Attempts{N: istioDefaultRetries + 1}, conds: istioConditions(splitList(istioDefaultRetryOn), []int{503}), isDefault: true}, true
	}
	if src.attempts <= 0 {
		return nil, false
	}
	conds := istioConditions(splitList(istioDefaultRetryOn), []int{503})
	if src.retryOnSet {
		codes := src.codes
		on := src.retryOn
		if len(codes) > 0 && !contains(on, "retriable-status-codes") {
			on = append(append([]string(nil), on...), "retriable-status-codes")
		}
		if len(codes) == 0 && contains(on, "retriable-status-codes") {
			codes = []int{503} // the default list stays
		}
		conds = istioConditions(on, codes)
	}
	n := src.attempts + 1
	if n > 1<<20 {
		n = 1 << 20
	}
	return &rule{layer: LayerIstio, loc: src.loc, attempts: Attempts{N: int(n)}, conds: conds, isDefault: r == nil}, true
}

func istioConditions(on []string, codes []int) []string {
	out := make([]string, 0, len(on))
	for _, c := range on {
		if c == "retriable-status-codes" && len(codes) > 0 {
			cs := make([]string, len(codes))
			for i, n := range codes {
				cs[i] = strconv.Itoa(n)
			}
			c += " (" + strings.Join(cs, ",") + ")"
		}
		out = append(out, c)
	}
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

// istioBudgetFor finds the DestinationRule budget for a host and subset: the
// rule with the most specific matching host (exact before wildcards, longer
// wildcards first); a subset's traffic policy replaces the host's.
func (c *Config) istioBudgetFor(host, subset string) (string, string) {
	var best *destinationRule
	bestScore := -1
	for _, dr := range c.destinationRules {
		score := -1
		switch {
		case host == "":
			score = 0
		case dr.host == host:
			score = 3 << 20
		case !strings.HasPrefix(dr.host, "*") && hostMatches(host, dr.host):
			score = 2 << 20
		case strings.HasPrefix(dr.host, "*") && hostMatches(host, dr.host):
			score = len(dr.host)
		}
		if score > bestScore {
			best, bestScore = dr, score
		}
	}
	if best == nil {
		return "", "no DestinationRule sets connectionPool.http.maxRetries or retryBudget for the host, so Istio's default of 4294967295 concurrent retries applies (it switches off Envoy's limit of 3)"
	}
	b := best.budget
	if sb, ok := best.subsets[subset]; ok && subset != "" && sb.set {
		b = sb
	}
	if b.desc != "" {
		return b.desc, ""
	}
	if b.why != "" {
		return "", b.why
	}
	return "", fmt.Sprintf("%s sets neither trafficPolicy.connectionPool.http.maxRetries nor trafficPolicy.retryBudget, so Istio's default of 4294967295 concurrent retries applies (it switches off Envoy's limit of 3)", best.loc.object)
}

// istioTables returns the route tables of the VirtualServices that apply
// to the hosts (every one when hosts is empty), and a default table when
// Istio is the mesh and none applies: Istio retries every route that sets
// nothing.
func (c *Config) istioTables(hosts []string) []*table {
	if !c.istioSeen {
		return nil
	}
	var out []*table
	for _, vs := range c.virtualServices {
		if len(hosts) > 0 && !anyHostMatches(hosts, vs.hosts) {
			continue
		}
		t := &table{layer: LayerIstio, loc: vs.loc, coverage: true}
		for _, r := range vs.http {
			rt := route{loc: r.loc, name: r.name, matches: r.matches}
			if ru, ok := c.istioRule(r.retries); ok {
				host := r.destHost
				if host == "" && len(vs.hosts) > 0 {
					host = vs.hosts[0]
				}
				ru.budget, ru.noBudget = c.istioBudgetFor(host, r.subset)
				if r.retries == nil {
					ru.via = r.loc.where() + " sets no retries, so the mesh default applies"
				}
				rt.rule = ru
			}
			t.routes = append(t.routes, rt)
		}
		out = append(out, t)
	}
	if len(out) > 0 {
		return out
	}
	t := &table{layer: LayerIstio, loc: location{object: "Istio default route"}}
	rt := route{loc: t.loc, name: "default", matches: nil}
	if ru, ok := c.istioRule(nil); ok {
		host := ""
		if len(hosts) > 0 {
			host = hosts[0]
		}
		ru.budget, ru.noBudget = c.istioBudgetFor(host, "")
		ru.via = "no VirtualService routes the host, so the mesh default applies"
		rt.rule = ru
	}
	t.routes = append(t.routes, rt)
	return []*table{t}
}
