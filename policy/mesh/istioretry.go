package mesh

import (
	"fmt"
	"strconv"
	"strings"
)

var istioRetryFields = []string{"attempts", "perTryTimeout", "retryOn", "retryRemoteLocalities", "retryIgnorePreviousHosts", "backoff"}

// readIstioRetry reads an HTTPRetry. With a validation (a VirtualService's
// route) a value Istio's validation rejects (agent.ValidateHTTPRetry and
// the CRD schema) rejects the whole resource; without one (the mesh
// config's default) it is reported.
func (c *Config) readIstioRetry(loc location, v any, val *istioValidation) *istioRetry {
	o, ok := asObj(v, loc.path)
	if !ok {
		c.bad(val, loc, "retries must be an object, not "+describe(v), "write retries: {attempts: N, retryOn: ...}")
		return nil
	}
	r := &istioRetry{loc: loc}
	for _, k := range o.unknownKeys(istioRetryFields...) {
		c.add(loc.at(joinPath(o.path, k)).finding(findingUnknownField, layerIstio,
			fmt.Sprintf("unknown field %q in an HTTPRetry%s; the API server drops it (kubectl apply --validate=strict refuses the resource), so it has no effect", truncate(k), didYouMean(k, istioRetryFields)),
			"spell it as Istio does: "+strings.Join(istioRetryFields, ", ")))
	}
	c.retryAttempts(r, o, val)
	c.retryOn(r, o, val)
	for _, k := range []string{"perTryTimeout", "backoff"} {
		if tv, tp, ok := o.key(k); ok {
			c.checkDuration(val, loc.at(tp), k, tv)
		}
	}
	for _, k := range []string{"retryRemoteLocalities", "retryIgnorePreviousHosts"} {
		if bv, bp, ok := o.key(k); ok {
			if _, isBool := boolean(bv); !isBool {
				c.bad(val, loc.at(bp), k+" must be true or false, not "+describe(bv), "write true or false")
			}
		}
	}
	c.retriesWithoutAttempts(r, o, val)
	return r
}

// retryAttempts reads attempts, the number of retries.
func (c *Config) retryAttempts(r *istioRetry, o obj, val *istioValidation) {
	av, ap, ok := o.key("attempts")
	if !ok {
		return
	}
	n, isInt := integer(av)
	switch {
	case !isInt:
		c.bad(val, r.loc.at(ap), "attempts must be an integer, not "+describe(av), "write the number of retries")
	case n < 0:
		c.bad(val, r.loc.at(ap), "attempts cannot be negative", "write 0 to switch retries off")
	default:
		r.attempts = n
	}
}

// retriesWithoutAttempts: attempts 0 (or none) switches retries off, and
// Istio's validation refuses a route that sets retryOn, perTryTimeout or
// retryRemoteLocalities with it ("http retry policy configured when
// attempts are set to 0 (disabled)"). The mesh config's default is not
// validated: it is simply off.
func (c *Config) retriesWithoutAttempts(r *istioRetry, o obj, val *istioValidation) {
	if r.attempts != 0 {
		return
	}
	_, _, hasAttempts := o.key("attempts")
	var set []string
	for _, k := range []string{"retryOn", "perTryTimeout", "retryRemoteLocalities"} {
		if v, _, ok := o.key(k); ok && v != "" {
			set = append(set, k)
		}
	}
	if len(set) == 0 {
		return
	}
	what := "attempts 0"
	if !hasAttempts {
		what = "no attempts (which is 0)"
	}
	if val != nil {
		val.reject(r.loc, fmt.Sprintf("retries with %s but %s: http retry policy configured when attempts are set to 0 (disabled)", what, strings.Join(set, ", ")),
			"write attempts: N to retry, or retries: {attempts: 0} alone to switch the route's retries off")
		return
	}
	c.add(r.loc.finding(findingInvalidValue, layerIstio, fmt.Sprintf("retries with %s: Istio switches these retries off, whatever else is set (%s)", what, strings.Join(set, ", ")),
		"write attempts: N to retry, or attempts: 0 alone to say that nothing retries"))
}

// retryOn reads retryOn as pilot's retry.ConvertPolicy does: a
// comma-separated list of Envoy's conditions, in which HTTP status codes
// are the retriable-status-codes list. Istio's validation splits it at
// commas without trimming: an element with a blank, or an empty one, is
// rejected.
func (c *Config) retryOn(r *istioRetry, o obj, val *istioValidation) {
	ov, op, ok := o.key("retryOn")
	if !ok {
		return
	}
	s, isStr := ov.(string)
	if !isStr {
		c.bad(val, r.loc.at(op), "retryOn must be a comma-separated string, not "+describe(ov), "write retryOn: \"unavailable,connect-failure\"")
		return
	}
	r.retryOnSet = s != ""
	if val != nil && s != "" {
		for _, tok := range strings.Split(s, ",") {
			if !istioRetryOnValid(tok) {
				val.reject(r.loc.at(op), fmt.Sprintf("%q is not a valid retryOn policy%s", truncate(tok), didYouMean(strings.TrimSpace(tok), conditionNames())),
					"use Envoy's conditions (5xx, gateway-error, reset, connect-failure, refused-stream, retriable-status-codes…), the gRPC ones (cancelled, deadline-exceeded, internal, resource-exhausted, unavailable) or status codes, separated by commas without blanks")
			}
		}
	}
	for _, tok := range splitList(s) {
		if n, err := strconv.Atoi(tok); err == nil && knownHTTPStatus(n) {
			r.codes = append(r.codes, n)
			continue
		}
		if _, known := envoyConditions[tok]; !known {
			if val == nil {
				c.add(r.loc.at(op).finding(findingUnknownCondition, layerIstio, fmt.Sprintf("%q is not a retry condition Envoy knows%s; Envoy ignores it", truncate(tok), didYouMean(tok, conditionNames())),
					"use Envoy's names (5xx, gateway-error, reset, connect-failure, refused-stream, retriable-status-codes…) or the gRPC ones (cancelled, deadline-exceeded, internal, resource-exhausted, unavailable)"))
			}
			continue
		}
		r.retryOn = append(r.retryOn, tok)
	}
	if contains(r.retryOn, "retriable-status-codes") && len(r.codes) == 0 {
		c.add(r.loc.at(op).finding(findingInvalidValue, layerIstio,
			"retryOn has retriable-status-codes but no status code: Istio passes no code to Envoy (pilot's retry.ConvertPolicy takes the codes from retryOn alone), so it retries no status code",
			"list the codes in retryOn, such as \"retriable-status-codes,503\", or remove retriable-status-codes"))
	}
}

// readMeshConfig reads the defaultHttpRetryPolicy of a mesh config, and the
// settings that decide where VirtualServices and EnvoyFilters apply.
func (c *Config) readMeshConfig(loc location, mc obj, object string) {
	c.istioSeen = true
	if loc.object == "" {
		loc.object = object
	}
	if v, p, ok := mc.key("defaultHttpRetryPolicy"); ok {
		c.meshDefault = c.readIstioRetry(loc.at(p), v, nil)
	}
	if ns, ok := mc.str("rootNamespace"); ok && ns != "" {
		c.rootNamespace = ns
	}
	exp, ep, _ := strList(mc, "defaultVirtualServiceExportTo")
	if len(exp) > 0 {
		c.vsExportTo = exp
		if !contains(exp, "*") {
			c.add(loc.at(ep).finding(findingNotUnderstood, layerIstio,
				fmt.Sprintf("defaultVirtualServiceExportTo [%s] shows a VirtualService without exportTo only to the sidecars of those namespaces; the check does not know the namespace of the channel's client, so for such a VirtualService it counts both its retries and the mesh default (the worst of them)",
					truncate(strings.Join(exp, ", "))),
				"judge the channel with the resources its namespace sees"))
		}
	}
}

// proxyRetry is a retry policy as the proxy gets it: Envoy's RetryPolicy
// after Istio's conversion (and an EnvoyFilter's merge).
type proxyRetry struct {
	loc       location
	num       int64 // num_retries
	on        []string
	codes     []int
	isDefault bool // a product's default, not written in the file
	via       string
}

// istioPolicy converts an HTTPRetry (nil: not set) into the RetryPolicy
// Envoy gets, as pilot's retry.ConvertPolicy does: not set means the mesh
// default (or the built-in default); attempts 0 means none (nil); retryOn
// not set keeps the default conditions, without status codes; HTTP status
// codes in retryOn are the status code list and add
// retriable-status-codes.
func (c *Config) istioPolicy(r *istioRetry) *proxyRetry {
	src := r
	if src == nil {
		src = c.meshDefault
	}
	if src == nil { // Istio's built-in default
		return &proxyRetry{loc: location{object: "Istio defaults", path: "meshConfig.defaultHttpRetryPolicy (not set)"},
			num: istioDefaultRetries, on: splitList(istioDefaultRetryOn), isDefault: true}
	}
	if src.attempts <= 0 {
		return nil
	}
	p := &proxyRetry{loc: src.loc, num: src.attempts, on: splitList(istioDefaultRetryOn), isDefault: r == nil}
	if src.retryOnSet {
		p.on, p.codes = src.retryOn, src.codes
		if len(p.codes) > 0 && !contains(p.on, "retriable-status-codes") {
			p.on = append(append([]string(nil), p.on...), "retriable-status-codes")
		}
	}
	return p
}

// proxyRule turns a policy into a rule; nil when it retries nothing.
func proxyRule(p *proxyRetry, layer Layer) *rule {
	if p == nil || p.num <= 0 {
		return nil
	}
	conds := effectiveConditions(p.on, p.codes, false)
	if len(conds) == 0 {
		return nil
	}
	n := p.num + 1
	if n > 1<<20 {
		n = 1 << 20
	}
	return &rule{layer: layer, loc: p.loc, attempts: Attempts{N: int(n)}, conds: conds, isDefault: p.isDefault, via: p.via}
}

// worstRule combines the rules of which any may apply: the most attempts,
// every condition, and a budget only if each has one.
func worstRule(rules []*rule) *rule {
	var w *rule
	n := 0
	for _, r := range rules {
		if r == nil {
			continue
		}
		n++
		if w == nil {
			cp := *r
			w = &cp
			continue
		}
		if r.attempts.more(w.attempts) {
			conds := w.conds
			cp := *r
			w = &cp
			w.conds = union(append([]string(nil), r.conds...), conds)
			continue
		}
		w.conds = union(append([]string(nil), w.conds...), r.conds)
	}
	if w != nil && n < len(rules) || n > 1 {
		w.via = strings.TrimSpace(w.via + " (the worst of the policies that may apply)")
	}
	return w
}
