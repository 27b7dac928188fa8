package mesh

import (
	"fmt"
	"strings"
	"time"
)

// grpcMaxAttempts is grpc-go's default cap on the attempts of one call;
// an xDS retry policy's num_retries+1 above it is clamped to it.
const grpcMaxAttempts = 5

// envoyDefaultMaxRetries is the max_retries circuit breaker of an Envoy
// cluster that sets none: at most 3 retries in flight to the cluster.
const envoyDefaultMaxRetries = 3

// envoyRetry is an Envoy RetryPolicy.
type envoyRetry struct {
	loc        location
	retryOn    []string // known conditions as written
	numRetries int64
	codes      []int64
	ignored    []string // fields set that grpc-go ignores
	rejected   bool     // grpc-go NACKs the resource because of this policy
}

type routeConfig struct {
	loc    location
	layer  Layer
	vhosts []*vhost
}

type vhost struct {
	loc     location
	name    string
	domains []string
	retry   *envoyRetry
	routes  []envoyRoute
}

type envoyRoute struct {
	loc      location
	name     string
	match    matcher
	retry    *envoyRetry
	forwards bool // a route action (not a redirect or direct response)
	cluster  string
}

type envoyCluster struct {
	name   string
	budget string
	why    string
}

// envoyRetryFields are a RetryPolicy's fields (proto names).
var envoyRetryFields = []string{"retry_on", "num_retries", "per_try_timeout", "per_try_idle_timeout", "retry_priority",
	"retry_host_predicate", "retry_options_predicates", "host_selection_retry_max_attempts", "retriable_status_codes",
	"retry_back_off", "rate_limited_retry_back_off", "retriable_headers", "retriable_request_headers"}

// grpcReadsRetryFields are the ones grpc-go reads on an xds:/// channel.
var grpcReadsRetryFields = []string{"retry_on", "num_retries", "retry_back_off"}

func (c *Config) envoyTyped(loc location, o obj, typ string, xds bool) {
	name := typ[strings.LastIndex(typ, "/")+1:]
	layer := LayerEnvoy
	if xds {
		layer = LayerXDS
	}
	switch name {
	case "envoy.config.route.v3.RouteConfiguration":
		c.readRouteConfiguration(loc, o, xds)
	case "envoy.config.listener.v3.Listener":
		c.readListener(loc, o, xds)
	case "envoy.config.bootstrap.v3.Bootstrap":
		c.readBootstrap(loc, o, xds)
	case "envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager":
		c.readHCM(loc, o, xds)
	case "envoy.config.cluster.v3.Cluster":
		c.readCluster(loc, o, xds)
	case "envoy.config.endpoint.v3.ClusterLoadAssignment":
		// Endpoints say nothing about retries.
	case "envoy.service.discovery.v3.DiscoveryResponse":
		res, paths := o.list("resources")
		for i, r := range res {
			c.value(loc.at(paths[i]), r, xds, 1)
		}
	default:
		c.add(loc.at(o.path).finding(FindingUnknownKind, layer, fmt.Sprintf("@type %q is not read (RouteConfiguration, Listener, HttpConnectionManager, Cluster, Bootstrap and DiscoveryResponse of the v3 API are)", truncate(typ)),
			"remove it from the input, or convert it to the v3 API"))
	}
}

func (c *Config) readBootstrap(loc location, o obj, xds bool) {
	sr, ok := o.child("static_resources")
	if !ok {
		return
	}
	if loc.object == "" {
		loc.object = "Bootstrap"
	}
	ls, paths := sr.list("listeners")
	for i, l := range ls {
		if lo, ok := asObj(l, paths[i]); ok {
			c.readListener(loc, lo, xds)
		}
	}
	cs, cpaths := sr.list("clusters")
	for i, cl := range cs {
		if co, ok := asObj(cl, cpaths[i]); ok {
			c.readCluster(loc, co, xds)
		}
	}
}

func (c *Config) readListener(loc location, o obj, xds bool) {
	name, _ := o.str("name")
	if loc.object == "" || strings.HasPrefix(loc.object, "Listener") {
		loc.object = "Listener " + truncate(name)
	}
	if al, ok := o.child("api_listener"); ok {
		if hcm, ok := al.child("api_listener"); ok {
			c.readHCM(loc, hcm, xds)
		}
	}
	chains, paths := o.list("filter_chains")
	for i, ch := range chains {
		co, ok := asObj(ch, paths[i])
		if !ok {
			continue
		}
		filters, fpaths := co.list("filters")
		for j, f := range filters {
			fo, ok := asObj(f, fpaths[j])
			if !ok {
				continue
			}
			if tc, ok := fo.child("typed_config"); ok {
				if typ, _ := tc.str("@type"); strings.HasSuffix(typ, "HttpConnectionManager") {
					c.readHCM(loc, tc, xds)
				}
			}
		}
	}
}

// readHCM reads an HttpConnectionManager's inline route_config. One that
// takes its routes over RDS has none: the RouteConfiguration must be given
// on its own.
func (c *Config) readHCM(loc location, o obj, xds bool) {
	if rc, ok := o.child("route_config"); ok {
		c.readRouteConfiguration(loc, rc, xds)
	}
}

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
	found := false
	for i, t := range th {
		to, ok := asObj(t, paths[i])
		if !ok {
			continue
		}
		if p, _ := to.str("priority"); p != "" && p != "DEFAULT" {
			continue
		}
		found = true
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
			cl.budget = fmt.Sprintf("%s %s: retries at most %g%% of active requests, at least %d at once", object, rb.path, pct, min)
			break
		}
		if v, p, ok := to.key("max_retries"); ok {
			n, ok := wrappedInteger(v)
			if ok && n < istioUnlimitedRetries {
				cl.budget = fmt.Sprintf("%s %s: at most %d concurrent retries to the cluster", object, p, n)
			} else {
				cl.why = fmt.Sprintf("%s %s does not limit concurrent retries", object, p)
			}
			break
		}
		cl.budget = fmt.Sprintf("%s: Envoy's default circuit breaker, at most %d concurrent retries to the cluster", object, envoyDefaultMaxRetries)
		break
	}
	if !found {
		cl.budget = fmt.Sprintf("%s: Envoy's default circuit breaker, at most %d concurrent retries to the cluster", object, envoyDefaultMaxRetries)
	}
	c.envoyClusters = append(c.envoyClusters, cl)
}

func (c *Config) readRouteConfiguration(loc location, o obj, xds bool) {
	name, _ := o.str("name")
	layer := LayerEnvoy
	if xds {
		layer = LayerXDS
	}
	rcLoc := loc
	if rcLoc.object == "" {
		rcLoc.object = "RouteConfiguration " + truncate(name)
	} else if name != "" {
		rcLoc.object += " RouteConfiguration " + truncate(name)
	}
	rc := &routeConfig{loc: rcLoc.at(o.path), layer: layer}
	vhs, paths := o.list("virtual_hosts")
	for i, v := range vhs {
		vo, ok := asObj(v, paths[i])
		if !ok {
			continue
		}
		vh := &vhost{loc: rcLoc.at(vo.path)}
		vh.name, _ = vo.str("name")
		ds, _ := vo.list("domains")
		for _, d := range ds {
			if s, ok := d.(string); ok {
				vh.domains = append(vh.domains, s)
			}
		}
		if rp, p, ok := vo.key("retry_policy"); ok {
			vh.retry = c.readEnvoyRetry(rcLoc.at(p), rp, layer)
		}
		routes, rpaths := vo.list("routes")
		for j, r := range routes {
			ro, ok := asObj(r, rpaths[j])
			if !ok {
				continue
			}
			er := envoyRoute{loc: rcLoc.at(ro.path)}
			er.name, _ = ro.str("name")
			er.match = c.envoyMatch(rcLoc, ro, layer)
			if ra, ok := ro.child("route"); ok {
				er.forwards = true
				er.cluster, _ = ra.str("cluster")
				if rp, p, ok := ra.key("retry_policy"); ok {
					er.retry = c.readEnvoyRetry(rcLoc.at(p), rp, layer)
				}
			}
			vh.routes = append(vh.routes, er)
		}
		rc.vhosts = append(rc.vhosts, vh)
	}
	if layer == LayerXDS {
		c.xdsRoutes = append(c.xdsRoutes, rc)
	} else {
		c.envoyRoutes = append(c.envoyRoutes, rc)
	}
}

func (c *Config) envoyMatch(loc location, ro obj, layer Layer) matcher {
	mo, ok := ro.child("match")
	if !ok {
		c.add(loc.at(ro.path).finding(FindingInvalidValue, layer, "a route without match; the product rejects it", "add match: {prefix: \"/\"} or a path"))
		return matcher{desc: "no match", never: true}
	}
	ignoreCase := false
	if v, _, ok := mo.key("case_sensitive"); ok {
		if b, ok := boolean(v); ok {
			ignoreCase = !b
		}
	}
	var m matcher
	switch {
	case has(mo, "prefix"):
		s, _ := mo.str("prefix")
		m = prefixMatcher("path", s, ignoreCase)
	case has(mo, "path"):
		s, _ := mo.str("path")
		m = exactMatcher("path", s, ignoreCase)
	case has(mo, "safe_regex"):
		sr, _ := mo.child("safe_regex")
		re, _ := sr.str("regex")
		var err error
		if m, err = regexMatcher("path", re, ignoreCase); err != nil {
			c.add(loc.at(joinPath(sr.path, "regex")).finding(FindingInvalidValue, layer, err.Error()+"; the product rejects the resource", "fix the expression (RE2 syntax)"))
			m = matcher{desc: "path regex (invalid)", never: true}
		}
	case has(mo, "path_separated_prefix"):
		s, _ := mo.str("path_separated_prefix")
		m = segmentPrefixMatcher("path", s, ignoreCase)
		if layer == LayerXDS {
			m.never = true
			c.add(loc.at(joinPath(mo.path, "path_separated_prefix")).finding(FindingIgnoredByGRPC, layer, "grpc-go does not read path_separated_prefix; it ignores the route",
				"write prefix or path"))
		}
	default:
		c.add(loc.at(mo.path).finding(FindingInvalidValue, layer, "the match has no prefix, path, safe_regex or path_separated_prefix", "add one"))
		return matcher{desc: "no path", never: true}
	}
	for _, k := range []string{"headers", "runtime_fraction", "tls_context", "dynamic_metadata", "filter_state"} {
		if has(mo, k) {
			m.conditional = true
		}
	}
	if has(mo, "query_parameters") {
		if layer == LayerXDS {
			m.never = true // grpc-go skips routes with query parameter matchers
		} else {
			m.conditional = true
		}
	}
	return m
}

// readEnvoyRetry reads a RetryPolicy. On an xds:/// channel it is read as
// grpc-go reads it.
func (c *Config) readEnvoyRetry(loc location, v any, layer Layer) *envoyRetry {
	o, ok := asObj(v, loc.path)
	if !ok {
		c.add(loc.finding(FindingInvalidValue, layer, "retry_policy must be an object, not "+describe(v), "write retry_policy: {retry_on: ..., num_retries: N}"))
		return nil
	}
	r := &envoyRetry{loc: loc, numRetries: 1}
	c.checkRetryFields(r, o, layer)
	c.envoyRetryOn(r, o, layer)
	c.envoyNumRetries(r, o, layer)
	if layer != LayerXDS {
		c.envoyStatusCodes(r, o, layer)
	}
	c.envoyBackOff(r, o, layer)
	if layer == LayerXDS && len(r.retryOn) == 0 && !r.rejected {
		c.add(loc.finding(FindingIgnoredByGRPC, layer, "no gRPC retry condition in retry_on, so grpc-go makes one attempt: the policy retries nothing",
			"add unavailable (and only conditions the methods' idempotency allows), or remove the retry_policy"))
	}
	return r
}

// checkRetryFields reports a RetryPolicy's unknown fields and, on an
// xds:/// channel, the fields grpc-go ignores (recorded in r.ignored).
func (c *Config) checkRetryFields(r *envoyRetry, o obj, layer Layer) {
	for _, k := range o.unknownKeys(append(envoyRetryFields, "@type")...) {
		c.add(r.loc.at(joinPath(o.path, k)).finding(FindingUnknownField, layer, fmt.Sprintf("unknown field %q in a RetryPolicy%s; the resource is rejected", truncate(k), didYouMean(k, envoyRetryFields)),
			"spell it as the API does (snake_case or lowerCamelCase)"))
	}
	if layer != LayerXDS {
		return
	}
	for _, k := range envoyRetryFields {
		if contains(grpcReadsRetryFields, k) || !has(o, k) {
			continue
		}
		r.ignored = append(r.ignored, k)
		_, p, _ := o.key(k)
		c.add(r.loc.at(p).finding(FindingIgnoredByGRPC, layer, fmt.Sprintf("grpc-go ignores %s on an xds:/// channel (gRFC A44 reads retry_on, num_retries and retry_back_off only)", k),
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
		c.add(r.loc.at(op).finding(FindingInvalidValue, layer, "retry_on must be a comma-separated string, not "+describe(ov), "write retry_on: \"unavailable\""))
	}
	for _, tok := range splitList(s) {
		if layer == LayerXDS {
			if g := strings.ToLower(tok); isGRPCCondition(g) {
				r.retryOn = union(r.retryOn, []string{g})
				continue
			}
			c.add(r.loc.at(op).finding(FindingIgnoredByGRPC, layer, fmt.Sprintf("grpc-go ignores the retry condition %q: it reads only cancelled, deadline-exceeded, internal, resource-exhausted and unavailable", truncate(tok)),
				"use the gRPC conditions"))
			continue
		}
		if _, ok := envoyConditions[tok]; !ok {
			c.add(r.loc.at(op).finding(FindingUnknownCondition, layer, fmt.Sprintf("%q is not a retry condition Envoy knows%s; Envoy ignores it", truncate(tok), didYouMean(tok, conditionNames())),
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
	xds := layer == LayerXDS
	n, ok := wrappedInteger(nv)
	switch {
	case !ok || n < 0 || n > 1<<32-1:
		c.add(r.loc.at(np).finding(FindingInvalidValue, layer, "num_retries must be an unsigned 32-bit integer, not "+describe(nv), "write the number of retries"))
	case xds && n < 1:
		r.rejected = true
		c.add(r.loc.at(np).finding(FindingInvalidValue, layer, "num_retries 0: grpc-go rejects (NACKs) the whole RouteConfiguration (\"must be >= 1\") and keeps the previous one",
			"remove the retry_policy to switch retries off"))
	default:
		r.numRetries = n
		if xds && n+1 > grpcMaxAttempts {
			c.add(r.loc.at(np).finding(FindingMaxAttemptsClamped, layer, fmt.Sprintf("num_retries %d is %d attempts; grpc-go clamps them to %d silently", n, n+1, grpcMaxAttempts),
				fmt.Sprintf("write at most %d", grpcMaxAttempts-1)))
		}
	}
}

// envoyStatusCodes reads retriable_status_codes into r.codes.
func (c *Config) envoyStatusCodes(r *envoyRetry, o obj, layer Layer) {
	cv, cp, ok := o.key("retriable_status_codes")
	if !ok {
		return
	}
	list, _ := cv.([]any)
	for _, x := range list {
		if n, ok := integer(x); ok {
			r.codes = append(r.codes, n)
		} else {
			c.add(r.loc.at(cp).finding(FindingInvalidValue, layer, "retriable_status_codes must list integers", "fix the list"))
		}
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
		if layer == LayerXDS {
			r.rejected = true
			what += "; grpc-go rejects (NACKs) the whole RouteConfiguration"
		}
		c.add(r.loc.at(p).finding(FindingInvalidValue, layer, what, fix))
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

// envoyRule turns a RetryPolicy into a rule.
func (c *Config) envoyRule(r *envoyRetry, layer Layer, cluster string) *rule {
	if r == nil || r.rejected || len(r.retryOn) == 0 || r.numRetries == 0 {
		return nil
	}
	n := r.numRetries + 1
	if layer == LayerXDS && n > grpcMaxAttempts {
		n = grpcMaxAttempts
	}
	if n > 1<<20 {
		n = 1 << 20
	}
	conds := append([]string(nil), r.retryOn...)
	for i, cond := range conds {
		if cond == "retriable-status-codes" && len(r.codes) > 0 {
			cs := make([]string, len(r.codes))
			for j, code := range r.codes {
				cs[j] = fmt.Sprint(code)
			}
			conds[i] += " (" + strings.Join(cs, ",") + ")"
		}
	}
	ru := &rule{layer: layer, loc: r.loc, attempts: Attempts{N: int(n)}, conds: conds}
	if layer == LayerXDS {
		if n <= xdsNumRetries+1 {
			ru.budget = "one retry per call (num_retries 1): a proxyless channel has no retry budget, and one retry is the bound Check accepts instead"
			return ru
		}
		ru.noBudget = "a proxyless xDS channel has no retry budget: grpc-go applies no retry throttling to the control plane's retry policies, so only num_retries 1 bounds them"
		return ru
	}
	ru.budget = fmt.Sprintf("Envoy's default circuit breaker of cluster %q: at most %d concurrent retries (no Cluster given)", cluster, envoyDefaultMaxRetries)
	for _, cl := range c.envoyClusters {
		if cl.name == cluster {
			ru.budget, ru.noBudget = cl.budget, cl.why
		}
	}
	return ru
}

// envoyTables returns one table per virtual host of the route
// configurations of a layer that apply to the hosts: for each host the
// virtual host whose domains match it best, as Envoy and grpc-go pick it;
// every virtual host when hosts is empty.
func (c *Config) envoyTables(layer Layer, hosts []string) []*table {
	rcs := c.envoyRoutes
	if layer == LayerXDS {
		rcs = c.xdsRoutes
	}
	var out []*table
	for _, rc := range rcs {
		chosen := map[*vhost]bool{}
		if len(hosts) == 0 {
			for _, vh := range rc.vhosts {
				chosen[vh] = true
			}
		}
		for _, h := range hosts {
			var best *vhost
			bestScore := 0
			for _, vh := range rc.vhosts {
				for _, d := range vh.domains {
					s := max(domainMatch(d, h), domainMatch(d, stripPort(h)))
					if s == 0 && hostMatches(h, d) {
						s = 1 << 19
					}
					if s > bestScore {
						best, bestScore = vh, s
					}
				}
			}
			if best != nil {
				chosen[best] = true
			}
		}
		for _, vh := range rc.vhosts {
			if !chosen[vh] {
				continue
			}
			t := &table{layer: layer, loc: vh.loc, coverage: true}
			for _, r := range vh.routes {
				rt := route{loc: r.loc, name: r.name, matches: []matcher{r.match}}
				if r.forwards {
					pol := r.retry
					if pol == nil {
						pol = vh.retry // a route's policy replaces its host's
					}
					rt.rule = c.envoyRule(pol, layer, r.cluster)
					if rt.rule != nil && r.retry == nil {
						rt.rule.via = r.loc.where() + " has no retry_policy, so its virtual host's applies"
					}
				}
				t.routes = append(t.routes, rt)
			}
			out = append(out, t)
		}
	}
	return out
}
