package mesh

import (
	"fmt"
	"strings"
	"time"
)

func (c *Config) readCluster(loc location, o obj, xds bool) {
	if xds {
		return // grpc-go does not read a cluster's retry limits
	}
	name, _ := o.str("name")
	cl := &envoyCluster{name: name}
	cb, _ := o.child("circuit_breakers")
	th, paths := cb.list("thresholds")
	object := loc.object
	if object == "" {
		object = "Cluster " + truncate(name)
	}
	cl.budget = fmt.Sprintf("%s: Envoy's default circuit breaker, at most %d concurrent retries to the cluster", object, envoyDefaultMaxRetries)
	for i, t := range th {
		to, ok := asObj(t, paths[i])
		if !ok {
			continue
		}
		if p, _ := to.str("priority"); p != "" && p != "DEFAULT" {
			continue
		}
		cl.budget, cl.why = clusterThreshold(object, to)
		break
	}
	c.envoyClusters = append(c.envoyClusters, cl)
}

// clusterThreshold reads the DEFAULT priority's thresholds: a retry_budget
// (which replaces max_retries), else max_retries, else Envoy's default of 3.
func clusterThreshold(object string, to obj) (string, string) {
	if rb, ok := to.child("retry_budget"); ok {
		pct := 20.0
		if v, _, ok := rb.key("budget_percent"); ok {
			if x, ok := number(v); ok {
				pct = x
			}
		}
		min := int64(3)
		if v, _, ok := rb.key("min_retry_concurrency"); ok {
			if n, ok := wrappedInteger(v); ok {
				min = n
			}
		}
		return fmt.Sprintf("%s %s: retries at most %g%% of active requests, at least %d at once", object, rb.path, pct, min), ""
	}
	if v, p, ok := to.key("max_retries"); ok {
		if n, ok := wrappedInteger(v); ok && n < istioUnlimitedRetries {
			return fmt.Sprintf("%s %s: at most %d concurrent retries to the cluster", object, p, n), ""
		}
		return "", fmt.Sprintf("%s %s does not limit concurrent retries", object, p)
	}
	return fmt.Sprintf("%s: Envoy's default circuit breaker, at most %d concurrent retries to the cluster", object, envoyDefaultMaxRetries), ""
}

func (c *Config) envoyMatch(loc location, ro obj, layer Layer) matcher {
	mo, ok := ro.child("match")
	if !ok {
		c.add(loc.at(ro.path).finding(findingInvalidValue, layer, "a route without match; the product rejects it", "add match: {prefix: \"/\"} or a path"))
		return matcher{desc: "no match", never: true}
	}
	ignoreCase := false
	if v, _, ok := mo.key("case_sensitive"); ok {
		if b, ok := boolean(v); ok {
			ignoreCase = !b
		}
	}
	m, ok := c.envoyPathMatch(loc, mo, ignoreCase, layer)
	if !ok {
		return m
	}
	for _, k := range []string{"headers", "runtime_fraction", "tls_context", "dynamic_metadata", "filter_state", "cookies"} {
		if has(mo, k) {
			m.conditional = true
		}
	}
	if has(mo, "query_parameters") {
		if layer == layerXDS {
			m.never = true // grpc-go skips routes with query parameter matchers
		} else {
			m.conditional = true
		}
	}
	return m
}

// envoyPathMatch reads a RouteMatch's path specifier.
func (c *Config) envoyPathMatch(loc location, mo obj, ignoreCase bool, layer Layer) (matcher, bool) {
	switch {
	case has(mo, "prefix"):
		s, _ := mo.str("prefix")
		return prefixMatcher("path", s, ignoreCase), true
	case has(mo, "path"):
		s, _ := mo.str("path")
		return exactMatcher("path", s, ignoreCase), true
	case has(mo, "safe_regex"):
		sr, _ := mo.child("safe_regex")
		re, _ := sr.str("regex")
		m, err := regexMatcher("path", re, ignoreCase)
		if err != nil {
			c.add(loc.at(joinPath(sr.path, "regex")).finding(findingInvalidValue, layer, err.Error()+"; the product rejects the resource", "fix the expression (RE2 syntax)"))
			return matcher{desc: "path regex (invalid)", never: true}, true
		}
		return m, true
	case has(mo, "path_separated_prefix"):
		s, _ := mo.str("path_separated_prefix")
		m := segmentPrefixMatcher("path", s, ignoreCase)
		if layer == layerXDS {
			m.never = true
			c.add(loc.at(joinPath(mo.path, "path_separated_prefix")).finding(findingIgnoredByGRPC, layer, "grpc-go does not read path_separated_prefix; it ignores the route",
				"write prefix or path"))
		}
		return m, true
	case has(mo, "path_match_policy"):
		if layer == layerXDS {
			return matcher{desc: "path_match_policy", never: true}, false
		}
		_, p, _ := mo.key("path_match_policy")
		c.add(loc.at(p).finding(findingNotUnderstood, layer, "the route matches paths with a path_match_policy extension, which is not read: it is counted as matching every path, possibly", "match with prefix, path or safe_regex"))
		m := allMatcher("path_match_policy")
		m.conditional = true
		return m, false
	}
	c.add(loc.at(mo.path).finding(findingInvalidValue, layer, "the match has no prefix, path, safe_regex or path_separated_prefix", "add one"))
	return matcher{desc: "no path", never: true}, false
}

// readEnvoyRetry reads a RetryPolicy. On an xds:/// channel it is read as
// grpc-go reads it.
func (c *Config) readEnvoyRetry(loc location, v any, layer Layer) *envoyRetry {
	o, ok := asObj(v, loc.path)
	if !ok {
		c.add(loc.finding(findingInvalidValue, layer, "retry_policy must be an object, not "+describe(v), "write retry_policy: {retry_on: ..., num_retries: N}"))
		return nil
	}
	r := &envoyRetry{loc: loc, numRetries: 1}
	c.checkRetryFields(r, o, layer)
	c.envoyRetryOn(r, o, layer)
	c.envoyNumRetries(r, o, layer)
	if layer != layerXDS {
		c.envoyStatusCodes(r, o, layer)
		r.perTry = has(o, "per_try_timeout")
		hl, _ := o.list("retriable_headers")
		r.headers = len(hl) > 0
	}
	c.envoyBackOff(r, o, layer)
	if layer == layerXDS && len(r.retryOn) == 0 && !r.rejected {
		c.add(loc.finding(findingIgnoredByGRPC, layer, "no gRPC retry condition in retry_on, so grpc-go makes one attempt: the policy retries nothing",
			"add unavailable (and only conditions the methods' idempotency allows), or remove the retry_policy"))
	}
	return r
}

// checkRetryFields reports a RetryPolicy's unknown fields, the ones that
// are not modelled and, on an xds:/// channel, the fields grpc-go ignores
// (recorded in r.ignored).
func (c *Config) checkRetryFields(r *envoyRetry, o obj, layer Layer) {
	for _, k := range o.unknownKeys(append(envoyRetryFields, "@type")...) {
		c.add(r.loc.at(joinPath(o.path, k)).finding(findingUnknownField, layer, fmt.Sprintf("unknown field %q in a RetryPolicy%s; the resource is rejected", truncate(k), didYouMean(k, envoyRetryFields)),
			"spell it as the API does (snake_case or lowerCamelCase)"))
	}
	if layer != layerXDS {
		if _, p, ok := o.key("retry_options_predicates"); ok {
			c.add(r.loc.at(p).finding(findingNotUnderstood, layer, "retry_options_predicates are extensions that change how a retry is sent; they are not read (the count of attempts is taken from num_retries)",
				"check what the predicates do by hand"))
		}
		return
	}
	for _, k := range envoyRetryFields {
		if contains(grpcReadsRetryFields, k) || !has(o, k) {
			continue
		}
		r.ignored = append(r.ignored, k)
		_, p, _ := o.key(k)
		c.add(r.loc.at(p).finding(findingIgnoredByGRPC, layer, fmt.Sprintf("grpc-go ignores %s on an xds:/// channel (gRFC A44 reads retry_on, num_retries and retry_back_off only)", k),
			"remove it; a per-attempt timeout or status code list has no effect on proxyless gRPC"))
	}
}

// envoyRetryOn reads retry_on into r.retryOn: Envoy's known conditions, or
// on an xds:/// channel the gRPC ones grpc-go reads.
func (c *Config) envoyRetryOn(r *envoyRetry, o obj, layer Layer) {
	ov, op, ok := o.key("retry_on")
	if !ok {
		return
	}
	s, isString := ov.(string)
	if !isString {
		c.add(r.loc.at(op).finding(findingInvalidValue, layer, "retry_on must be a comma-separated string, not "+describe(ov), "write retry_on: \"unavailable\""))
	}
	r.onSet = s != ""
	for _, tok := range splitList(s) {
		if layer == layerXDS {
			if g := strings.ToLower(tok); isGRPCCondition(g) {
				r.retryOn = union(r.retryOn, []string{g})
				continue
			}
			c.add(r.loc.at(op).finding(findingIgnoredByGRPC, layer, fmt.Sprintf("grpc-go ignores the retry condition %q: it reads only cancelled, deadline-exceeded, internal, resource-exhausted and unavailable", truncate(tok)),
				"use the gRPC conditions"))
			continue
		}
		if _, ok := envoyConditions[tok]; !ok {
			c.add(r.loc.at(op).finding(findingUnknownCondition, layer, fmt.Sprintf("%q is not a retry condition Envoy knows%s; Envoy ignores it", truncate(tok), didYouMean(tok, conditionNames())),
				"use Envoy's names (5xx, gateway-error, reset, connect-failure, refused-stream, retriable-status-codes…) or the gRPC ones"))
			continue
		}
		r.retryOn = union(r.retryOn, []string{tok})
	}
}

// envoyNumRetries reads num_retries; on an xds:/// channel 0 makes grpc-go
// reject the resource, and more than grpcMaxAttempts attempts are clamped.
func (c *Config) envoyNumRetries(r *envoyRetry, o obj, layer Layer) {
	nv, np, ok := o.key("num_retries")
	if !ok {
		return
	}
	xds := layer == layerXDS
	n, ok := wrappedInteger(nv)
	switch {
	case !ok || n < 0 || n > 1<<32-1:
		c.add(r.loc.at(np).finding(findingInvalidValue, layer, "num_retries must be an unsigned 32-bit integer, not "+describe(nv), "write the number of retries"))
	case xds && n < 1:
		r.rejected = true
		c.add(r.loc.at(np).finding(findingInvalidValue, layer, "num_retries 0: grpc-go rejects (NACKs) the whole RouteConfiguration (\"must be >= 1\") and keeps the previous one",
			"remove the retry_policy to switch retries off"))
	default:
		r.numRetries, r.numSet = n, true
		if xds && n+1 > grpcMaxAttempts {
			c.add(r.loc.at(np).finding(findingMaxAttemptsClamped, layer, fmt.Sprintf("num_retries %d is %d attempts; grpc-go clamps them to %d silently", n, n+1, grpcMaxAttempts),
				fmt.Sprintf("write at most %d", grpcMaxAttempts-1)))
		}
	}
}

// envoyStatusCodes reads retriable_status_codes into r.codes, and reports
// retriable-status-codes without them: Envoy then retries no status code.
func (c *Config) envoyStatusCodes(r *envoyRetry, o obj, layer Layer) {
	cv, cp, ok := o.key("retriable_status_codes")
	if ok {
		list, _ := cv.([]any)
		for _, x := range list {
			if n, ok := integer(x); ok {
				r.codes = append(r.codes, n)
			} else {
				c.add(r.loc.at(cp).finding(findingInvalidValue, layer, "retriable_status_codes must list integers", "fix the list"))
			}
		}
	}
	if contains(r.retryOn, "retriable-status-codes") && len(r.codes) == 0 && layer == layerEnvoy {
		_, op, _ := o.key("retry_on")
		c.add(r.loc.at(op).finding(findingInvalidValue, layer, "retry_on has retriable-status-codes but retriable_status_codes lists no code: Envoy retries no status code (only those a request names in x-envoy-retriable-status-codes)",
			"list the codes in retriable_status_codes, or remove retriable-status-codes"))
	}
}

// envoyBackOff checks retry_back_off's intervals; on an xds:/// channel an
// invalid one makes grpc-go reject the resource (r.rejected).
func (c *Config) envoyBackOff(r *envoyRetry, o obj, layer Layer) {
	bo, ok := o.child("retry_back_off")
	if !ok {
		return
	}
	invalid := func(p, what, fix string) {
		if layer == layerXDS {
			r.rejected = true
			what += "; grpc-go rejects (NACKs) the whole RouteConfiguration"
		}
		c.add(r.loc.at(p).finding(findingInvalidValue, layer, what, fix))
	}
	base, _, hasBase := bo.key("base_interval")
	bd, okBase := time.Duration(0), false
	if hasBase {
		bd, okBase = duration(base)
	}
	if !okBase || bd <= 0 {
		invalid(joinPath(bo.path, "base_interval"), "retry_back_off.base_interval must be a positive duration", "write base_interval: 0.025s")
	}
	if mv, mp, ok := bo.key("max_interval"); ok {
		if md, ok := duration(mv); !ok || md <= 0 || (okBase && md < bd) {
			invalid(mp, "retry_back_off.max_interval must be a positive duration, not below base_interval", "write max_interval: 0.25s")
		}
	}
}
