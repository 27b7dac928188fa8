package mesh

import (
	"fmt"
	"strconv"
	"strings"
)

// Policies attached to Gateway API resources that change a gateway's
// retries: Envoy Gateway's BackendTrafficPolicy (gateway.envoyproxy.io), whose
// retry a route's rules take when their HTTPRoute retry field is not set,
// and Gateway API's XBackendTrafficPolicy (gateway.networking.x-k8s.io),
// whose retryConstraint is a retry budget for a backend Service.

// envoyGatewayDefaultMaxRetries is the max_retries circuit breaker Envoy
// Gateway gives every cluster (internal/xds/translator/cluster.go).
const envoyGatewayDefaultMaxRetries = 1024

// gatewayPolicy is one of those policies.
type gatewayPolicy struct {
	loc       location
	kind      string // BackendTrafficPolicy (Envoy Gateway) or XBackendTrafficPolicy
	namespace string
	targets   []policyTarget
	// Envoy Gateway:
	retry  *rule // nil: no retry field, or numRetries 0
	hasRet bool
	merge  bool   // mergeType: merged into the Gateway's policy
	budget string // circuitBreaker.retryBudget or maxParallelRetries; "": Envoy Gateway's default
	// XBackendTrafficPolicy: the budget of its Services.
	backendBudget string
}

// policyTarget is a targetRef, or a targetSelector (labels; anyLabels when
// the selector is one the checker cannot evaluate, so it is taken to select
// everything of its kind).
type policyTarget struct {
	kind, name, section string
	labels              map[string]string
	selector, anyLabels bool
}

// readGatewayPolicy reads the policies above, and reports Envoy Gateway's
// EnvoyPatchPolicy, which can patch any retry_policy. It returns false for
// any other kind, which the caller reports as unknown.
func (c *Config) readGatewayPolicy(loc location, o obj, group, kind, ns string) bool {
	switch {
	case group == "gateway.envoyproxy.io" && kind == "BackendTrafficPolicy":
		c.readEnvoyGatewayPolicy(loc, o, ns)
	case group == "gateway.envoyproxy.io" && kind == "EnvoyPatchPolicy":
		c.add(loc.at(joinPath(o.path, "spec")).finding(findingNotUnderstood, layerGatewayAPI, "an EnvoyPatchPolicy patches the xDS that Envoy Gateway generates, and can set or change any retry_policy; the checker does not apply its patches, so the attempts it reports may be too low",
			"check the patched routes by hand (egctl x translate shows the result), or pass the resulting RouteConfiguration with --mesh"))
	case group == "gateway.networking.x-k8s.io" && (kind == "XBackendTrafficPolicy" || kind == "BackendTrafficPolicy"):
		c.readBackendBudget(loc, o, ns)
	default:
		return false
	}
	return true
}

// policyTargets reads targetRef, targetRefs and targetSelectors.
func (c *Config) policyTargets(loc location, spec obj) []policyTarget {
	var out []policyTarget
	read := func(to obj) {
		t := policyTarget{}
		t.kind, _ = to.str("kind")
		t.name, _ = to.str("name")
		t.section, _ = to.str("sectionName")
		out = append(out, t)
	}
	if to, ok := spec.child("targetRef"); ok {
		read(to)
	}
	refs, paths := spec.list("targetRefs")
	for i, r := range refs {
		if to, ok := asObj(r, paths[i]); ok {
			read(to)
		}
	}
	sels, spaths := spec.list("targetSelectors")
	for i, s := range sels {
		so, ok := asObj(s, spaths[i])
		if !ok {
			continue
		}
		t := policyTarget{selector: true, labels: map[string]string{}}
		t.kind, _ = so.str("kind")
		if ml, ok := so.child("matchLabels"); ok {
			for _, k := range ml.keys() {
				t.labels[k], _ = ml.str(k)
			}
		}
		if has(so, "matchExpressions") || t.kind == "Gateway" || t.kind == "ListenerSet" {
			t.anyLabels = true
			c.add(loc.at(so.path).finding(findingNotUnderstood, layerGatewayAPI, fmt.Sprintf("a targetSelector with matchExpressions, or selecting Gateways by their labels, which the checker does not read: it takes the policy to apply to every %q of its namespace", truncate(t.kind)),
				"name the targets with targetRefs"))
		}
		out = append(out, t)
	}
	return out
}

var (
	egRetryFields   = []string{"numRetries", "numAttemptsPerPriority", "retryOn", "perRetry"}
	egRetryOnFields = []string{"triggers", "httpStatusCodes"}
	egTriggers      = []string{"5xx", "gateway-error", "reset", "reset-before-request", "connect-failure", "retriable-4xx", "refused-stream", "retriable-status-codes", "cancelled", "deadline-exceeded", "internal", "resource-exhausted", "unavailable"}
)

// readEnvoyGatewayPolicy reads an Envoy Gateway BackendTrafficPolicy: its
// targets, spec.retry (api/v1alpha1/retry_types.go: numRetries, 2 by
// default; retryOn.triggers, by default
// connect-failure,refused-stream,unavailable,cancelled,retriable-status-codes
// with the code 503; retryOn.httpStatusCodes) and the retry limits of
// spec.circuitBreaker.
func (c *Config) readEnvoyGatewayPolicy(loc location, o obj, ns string) {
	spec, ok := o.child("spec")
	if !ok {
		c.add(loc.finding(findingInvalidResource, layerGatewayAPI, "a BackendTrafficPolicy without spec: the API server refuses it", "add spec.targetRefs"))
		return
	}
	p := &gatewayPolicy{loc: loc, kind: "BackendTrafficPolicy", namespace: ns, targets: c.policyTargets(loc, spec), merge: has(spec, "mergeType")}
	if rv, ok := spec.child("retry"); ok {
		p.hasRet = true
		p.retry = c.envoyGatewayRetry(loc.at(rv.path), rv)
	}
	if cb, ok := spec.child("circuitBreaker"); ok {
		if rb, ok := cb.child("retryBudget"); ok {
			pct := "?"
			if pc, ok := rb.child("percent"); ok {
				num, _ := integer(pc.m["numerator"])
				den := int64(100)
				if d, ok := integer(pc.m["denominator"]); ok && d > 0 {
					den = d
				}
				pct = strconv.FormatFloat(float64(num)*100/float64(den), 'f', -1, 64)
			}
			min := int64(3)
			if v, ok := integer(rb.m["minRetryConcurrency"]); ok {
				min = v
			}
			p.budget = fmt.Sprintf("%s %s: retries at most %s%% of active requests, at least %d at once", loc.object, rb.path, pct, min)
		} else if v, pth, ok := cb.key("maxParallelRetries"); ok {
			if n, ok := integer(v); ok {
				p.budget = fmt.Sprintf("%s %s: at most %d concurrent retries to the backend", loc.object, pth, n)
			}
		}
	}
	c.policies = append(c.policies, p)
}

// envoyGatewayRetry reads a BackendTrafficPolicy's retry; nil for
// numRetries 0.
func (c *Config) envoyGatewayRetry(loc location, ro obj) *rule {
	for _, k := range ro.unknownKeys(egRetryFields...) {
		c.add(loc.at(joinPath(ro.path, k)).finding(findingUnknownField, layerGatewayAPI, fmt.Sprintf("unknown field %q in a BackendTrafficPolicy retry%s; the API server drops it", truncate(k), didYouMean(k, egRetryFields)), "use "+strings.Join(egRetryFields, ", ")))
	}
	n := int64(2)
	assumed := true
	if v, pth, ok := ro.key("numRetries"); ok {
		x, ok := integer(v)
		if !ok || x < 0 {
			c.add(loc.at(pth).finding(findingInvalidResource, layerGatewayAPI, "numRetries must be an integer of at least 0: the API server refuses the policy; 2 retries (the default) are counted", "fix the number"))
		} else {
			n, assumed = x, false
		}
	}
	triggers := []string{"connect-failure", "refused-stream", "unavailable", "cancelled", "retriable-status-codes"}
	var codes []string
	if on, ok := ro.child("retryOn"); ok {
		for _, k := range on.unknownKeys(egRetryOnFields...) {
			c.add(loc.at(joinPath(on.path, k)).finding(findingUnknownField, layerGatewayAPI, fmt.Sprintf("unknown field %q in retryOn%s; the API server drops it", truncate(k), didYouMean(k, egRetryOnFields)), "use triggers, httpStatusCodes"))
		}
		if list, paths := on.list("triggers"); len(list) > 0 {
			triggers = nil
			for i, t := range list {
				s, _ := t.(string)
				if !contains(egTriggers, s) {
					c.add(loc.at(paths[i]).finding(findingUnknownCondition, layerGatewayAPI, fmt.Sprintf("trigger %s is not one Envoy Gateway knows: the API server refuses the policy", describe(t)), "use "+strings.Join(egTriggers, ", ")))
					continue
				}
				triggers = union(triggers, []string{s})
			}
		}
		list, _ := on.list("httpStatusCodes")
		for _, x := range list {
			if v, ok := integer(x); ok {
				codes = append(codes, strconv.FormatInt(v, 10))
			}
		}
		if len(codes) > 0 && !contains(triggers, "retriable-status-codes") {
			c.add(loc.at(joinPath(on.path, "httpStatusCodes")).finding(findingInvalidValue, layerGatewayAPI, "httpStatusCodes without the retriable-status-codes trigger: Envoy retries none of these codes", "add retriable-status-codes to triggers"))
		}
	}
	if len(codes) == 0 {
		codes = []string{"503"}
	}
	conds := make([]string, 0, len(triggers))
	for _, t := range triggers {
		if t == "retriable-status-codes" {
			t += " (" + strings.Join(codes, ",") + ")"
		}
		conds = append(conds, t)
	}
	if n == 0 {
		return nil
	}
	ru := &rule{layer: layerGatewayAPI, loc: loc, attempts: Attempts{N: int(min(n, 1<<20)) + 1}, conds: conds}
	if assumed {
		ru.via = "numRetries is not set: Envoy Gateway's default of 2"
	}
	return ru
}

// readBackendBudget reads an XBackendTrafficPolicy (GEP-3388): its
// retryConstraint is a retry budget for the Services it targets (20% of
// active requests over 10s, at least 10 retries per second, by default).
func (c *Config) readBackendBudget(loc location, o obj, ns string) {
	spec, _ := o.child("spec")
	rc, ok := spec.child("retryConstraint")
	if !ok {
		return // session persistence only
	}
	pct, interval, count, per := int64(20), "10s", int64(10), "1s"
	if b, ok := rc.child("budget"); ok {
		if v, ok := integer(b.m["percent"]); ok {
			pct = v
		}
		if s, ok := b.str("interval"); ok {
			interval = s
		}
	}
	if m, ok := rc.child("minRetryRate"); ok {
		if v, ok := integer(m.m["count"]); ok {
			count = v
		}
		if s, ok := m.str("interval"); ok {
			per = s
		}
	}
	p := &gatewayPolicy{loc: loc, kind: "XBackendTrafficPolicy", namespace: ns, targets: c.policyTargets(loc, spec),
		backendBudget: fmt.Sprintf("%s %s: retries at most %d%% of the backend's requests over %s, at least %d per %s", loc.object, rc.path, pct, interval, count, per)}
	c.policies = append(c.policies, p)
}

// selects reports whether a policy's targets take the route (and, with a
// sectionName, the named rule) or the parent.
func (p *gatewayPolicy) selectsRoute(r *k8sRoute, ruleName string) (bool, bool) {
	if !sameNamespace(p.namespace, r.ref.namespace) {
		return false, false
	}
	for _, t := range p.targets {
		if t.kind != r.kind {
			continue
		}
		if t.selector {
			if t.anyLabels || labelsMatch(t.labels, r.labels) {
				return true, false
			}
			continue
		}
		if t.name == r.ref.name && (t.section == "" || t.section == ruleName) {
			return true, t.section != ""
		}
	}
	return false, false
}

func (p *gatewayPolicy) selectsParent(gw routeParent) bool {
	if !sameNamespace(p.namespace, gw.ns) {
		return false
	}
	for _, t := range p.targets {
		if t.kind == gw.kind && (t.selector && t.anyLabels || !t.selector && t.name == gw.name) {
			return true
		}
	}
	return false
}

// sameNamespace reports whether two resources can be in one namespace: a
// manifest without one is applied to the namespace kubectl is given.
func sameNamespace(a, b string) bool { return a == b || a == "" || b == "" }

// labelsMatch reports whether a label selector's matchLabels select the
// labels (an empty selector selects everything).
func labelsMatch(want, have map[string]string) bool {
	for k, v := range want {
		if have[k] != v {
			return false
		}
	}
	return true
}

// gatewayRule is the retry of rule i of route r at a parent: the HTTPRoute
// retry field, else (at a Gateway) the retry of the Envoy Gateway
// BackendTrafficPolicy that applies: one targeting the rule, else the
// route, else the Gateway; a route's policy replaces the Gateway's unless
// it sets mergeType (internal/ir/xds.go GetRetry; BackendTrafficPolicy's
// mergeType). Its budget comes from that policy's circuitBreaker, or from
// XBackendTrafficPolicies covering every backend of the rule.
func (c *Config) gatewayRule(r *k8sRoute, i int, p routeParent) *rule {
	kr := r.rules[i]
	if kr.redirect {
		return nil
	}
	var eg *gatewayPolicy
	if !p.service {
		eg = c.envoyGatewayPolicy(r, kr, p)
	}
	var ru *rule
	switch {
	case kr.retry != nil:
		ru = kr.retry
	case eg != nil && eg.retry != nil:
		ru = eg.retry
	default:
		return nil
	}
	out := *ru
	if eg != nil {
		out.via = strings.TrimPrefix(out.via+"; with "+eg.loc.object, "; ")
		if eg.budget != "" {
			out.budget = eg.budget
		} else {
			out.noBudget = fmt.Sprintf("%s sets no circuitBreaker.retryBudget, and Envoy Gateway's default limit of %d concurrent retries per backend bounds nothing at a service's usual concurrency", eg.loc.object, envoyGatewayDefaultMaxRetries)
		}
	}
	if out.budget == "" {
		if b := c.backendBudget(kr.backends); b != "" {
			out.budget = b
		}
	}
	return &out
}

// envoyGatewayPolicy returns the Envoy Gateway BackendTrafficPolicy that
// applies to a rule at a Gateway: one targeting the rule, else the route,
// else the Gateway, merged into the Gateway's with mergeType; nil for none.
func (c *Config) envoyGatewayPolicy(r *k8sRoute, kr k8sRule, p routeParent) *gatewayPolicy {
	var onRoute, onRule, onGateway *gatewayPolicy
	for _, pol := range c.policies {
		if pol.kind != "BackendTrafficPolicy" {
			continue
		}
		if ok, section := pol.selectsRoute(r, kr.name); ok {
			if section {
				onRule = worse(onRule, pol)
			} else {
				onRoute = worse(onRoute, pol)
			}
		} else if pol.selectsParent(p) {
			onGateway = worse(onGateway, pol)
		}
	}
	eg := onGateway
	for _, pol := range []*gatewayPolicy{onRoute, onRule} {
		if pol == nil {
			continue
		}
		if pol.merge && eg != nil && !pol.hasRet {
			merged := *pol
			merged.retry, merged.hasRet = eg.retry, eg.hasRet
			if merged.budget == "" {
				merged.budget = eg.budget
			}
			pol = &merged
		}
		eg = pol
	}
	return eg
}

// worse keeps, of two policies at the same level (a conflict, which Envoy
// Gateway settles by age), the one that retries more.
func worse(a, b *gatewayPolicy) *gatewayPolicy {
	if a == nil {
		return b
	}
	if b.retry != nil && (a.retry == nil || b.retry.attempts.more(a.retry.attempts)) {
		return b
	}
	return a
}

// backendBudget describes the XBackendTrafficPolicy budgets of every one of
// the backends, or "" when one has none.
func (c *Config) backendBudget(backends []string) string {
	if len(backends) == 0 {
		return ""
	}
	var out []string
	for _, b := range backends {
		found := ""
		for _, pol := range c.policies {
			if pol.kind != "XBackendTrafficPolicy" {
				continue
			}
			for _, t := range pol.targets {
				if t.kind == "Service" && (qualify(t.name, pol.namespace) == b || pol.namespace == "" && strings.HasPrefix(b, strings.ToLower(t.name)+".")) {
					found = pol.backendBudget
				}
			}
		}
		if found == "" {
			return ""
		}
		out = union(out, []string{found})
	}
	return strings.Join(out, "; ")
}
