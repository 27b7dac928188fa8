package mesh

import (
	"fmt"
	"sort"
	"strconv"
	"strings"
)

type destinationRule struct {
	loc     location
	host    string // qualified
	invalid bool   // Istio's validation rejects it: not applied
	// selector: a workloadSelector limits it to some client workloads.
	selector bool
	policy   *istioTP // spec.trafficPolicy; nil: not set
	subsets  map[string]*istioTP
}

// istioTP is what bounds retries in a TrafficPolicy (or a port's, or a
// subset's): retryBudget, or a finite connectionPool.http.maxRetries.
type istioTP struct {
	pool       bool   // connectionPool is set
	maxRetries int64  // connectionPool.http.maxRetries; 0: not set
	maxPath    string // where maxRetries is
	budget     string // retryBudget, described; "": not set
	ports      []portTP
}

// portTP is a portLevelSettings entry: it replaces the destination-level
// settings for its port entirely (no retryBudget is inherited).
type portTP struct {
	port int
	tp   *istioTP
}

var (
	istioTrafficPolicyFields = []string{"connectionPool", "loadBalancer", "outlierDetection", "portLevelSettings", "proxyProtocol", "retryBudget", "tls", "tunnel"}
	istioPortPolicyFields    = []string{"connectionPool", "loadBalancer", "outlierDetection", "port", "tls"}
	istioRetryBudgetFields   = []string{"percent", "minRetryConcurrency", "budgetInterval"}
)

func (c *Config) readDestinationRule(loc location, o obj, ns string) {
	val := &istioValidation{c: c, what: "DestinationRule", effect: "its traffic policy does not apply, so its host keeps Istio's default of 4294967295 concurrent retries"}
	spec, ok := o.child("spec")
	host, _ := spec.str("host")
	if !ok || host == "" {
		val.reject(loc, "a DestinationRule without spec.host", "add spec.host")
		return
	}
	dr := &destinationRule{loc: loc, host: qualify(host, ns), subsets: map[string]*istioTP{}, selector: has(spec, "workloadSelector")}
	if v, p, ok := spec.key("trafficPolicy"); ok {
		dr.policy = c.readTrafficPolicy(loc.at(p), v, val, istioTrafficPolicyFields)
	}
	subsets, paths := spec.list("subsets")
	for i, s := range subsets {
		so, ok := asObj(s, paths[i])
		name, _ := so.str("name")
		if !ok || name == "" {
			val.reject(loc.at(paths[i]), "a subset must have a name", "add name")
			continue
		}
		if _, dup := dr.subsets[name]; dup {
			val.reject(loc.at(paths[i]), fmt.Sprintf("duplicate subset name %q", truncate(name)), "name each subset once")
		}
		dr.subsets[name] = nil
		if v, p, ok := so.key("trafficPolicy"); ok {
			dr.subsets[name] = c.readTrafficPolicy(loc.at(p), v, val, istioTrafficPolicyFields)
		}
	}
	if exp, ep, ok := strList(spec, "exportTo"); ok && len(exp) > 0 {
		c.validateExportTo(loc.at(ep), exp, ns, val)
	}
	dr.invalid = val.rejected
	c.destinationRules = append(c.destinationRules, dr)
}

// readTrafficPolicy reads a TrafficPolicy, or a port's (known lists its
// fields), with Istio's rules (validateTrafficPolicy,
// validatePortTrafficPolicies): at least one field set.
func (c *Config) readTrafficPolicy(at location, v any, val *istioValidation, known []string) *istioTP {
	o, ok := asObj(v, at.path)
	if !ok {
		val.reject(at, "a traffic policy must be an object, not "+describe(v), "fix it")
		return nil
	}
	tp := &istioTP{}
	set := false
	for _, k := range known {
		set = set || (has(o, k) && k != "port")
	}
	if !set {
		val.reject(at, "a traffic policy must have at least one field", "set a field, or remove the traffic policy")
	}
	for _, k := range o.unknownKeys(known...) {
		c.add(at.at(joinPath(o.path, k)).finding(findingUnknownField, layerIstio,
			fmt.Sprintf("unknown field %q in a traffic policy%s; the API server drops it, so it has no effect", truncate(k), didYouMean(k, known)),
			"spell it as Istio does: "+strings.Join(known, ", ")))
	}
	if cv, cp, ok := o.key("connectionPool"); ok {
		c.readConnectionPool(at.at(cp), cv, tp, val)
	}
	if rv, rp, ok := o.key("retryBudget"); ok {
		tp.budget = c.readRetryBudget(at.at(rp), rv, val)
	}
	pls, paths := o.list("portLevelSettings")
	for i, p := range pls {
		c.readPortPolicy(at.at(paths[i]), p, tp, val)
	}
	return tp
}

// readPortPolicy reads one portLevelSettings entry.
func (c *Config) readPortPolicy(at location, v any, tp *istioTP, val *istioValidation) {
	po, ok := asObj(v, at.path)
	if !ok {
		val.reject(at, "a port traffic policy may not be "+describe(v), "fix it")
		return
	}
	pt := portTP{}
	if p, ok := po.child("port"); ok {
		if n, ok := integer(p.m["number"]); ok && n > 0 && n <= 65535 {
			pt.port = int(n)
		}
	}
	if pt.port == 0 {
		val.reject(at, "a port traffic policy must have a valid port.number", "add port: {number: N}")
	}
	pt.tp = c.readTrafficPolicy(at, v, val, istioPortPolicyFields)
	if pt.tp != nil && pt.port != 0 {
		tp.ports = append(tp.ports, pt)
	}
}

// readConnectionPool reads connectionPool.http.maxRetries, with Istio's
// rules (validateConnectionPool): http or tcp set, maxRetries not negative.
func (c *Config) readConnectionPool(at location, v any, tp *istioTP, val *istioValidation) {
	cp, ok := asObj(v, at.path)
	if !ok {
		val.reject(at, "connectionPool must be an object, not "+describe(v), "fix it")
		return
	}
	tp.pool = true
	h, hasHTTP := cp.child("http")
	if !hasHTTP && !has(cp, "tcp") {
		val.reject(at, "a connection pool must have at least one field (http or tcp)", "set http or tcp, or remove connectionPool")
	}
	mv, mp, ok := h.key("maxRetries")
	if !ok {
		return
	}
	n, isInt := integer(mv)
	if !isInt || n < 0 {
		val.reject(at.at(mp), "maxRetries must be a non-negative integer, not "+describe(mv), "write the number of concurrent retries allowed, such as 3")
		return
	}
	tp.maxRetries, tp.maxPath = n, mp
}

// readRetryBudget reads a retryBudget (Envoy's defaults where it sets
// nothing: 20%, at least 3 at once), with the CRD's ranges.
func (c *Config) readRetryBudget(at location, v any, val *istioValidation) string {
	rb, ok := asObj(v, at.path)
	if !ok {
		val.reject(at, "retryBudget must be an object, not "+describe(v), "write retryBudget: {percent: 10, minRetryConcurrency: 3}")
		return ""
	}
	for _, k := range rb.unknownKeys(istioRetryBudgetFields...) {
		c.add(at.at(joinPath(rb.path, k)).finding(findingUnknownField, layerIstio, fmt.Sprintf("unknown field %q in a retryBudget%s; the API server drops it, so it has no effect", truncate(k), didYouMean(k, istioRetryBudgetFields)),
			"spell it as Istio does: "+strings.Join(istioRetryBudgetFields, ", ")))
	}
	pct, min := 20.0, int64(3)
	if pv, p, ok := rb.key("percent"); ok {
		if x, ok := number(pv); ok && x >= 0 && x <= 100 {
			pct = x
		} else {
			val.reject(at.at(p), "percent must be a number from 0 to 100", "write the share of active requests that may be retries, such as 10")
		}
	}
	if mv, p, ok := rb.key("minRetryConcurrency"); ok {
		if n, ok := integer(mv); ok && n >= 0 && n <= istioUnlimitedRetries {
			if n > 0 { // 0 is Istio's default of 3
				min = n
			}
		} else {
			val.reject(at.at(p), "minRetryConcurrency must be a non-negative integer", "write a small number, such as 3")
		}
	}
	return fmt.Sprintf("%s %s: retries at most %s%% of active requests, at least %d at once", at.object, rb.path, strconv.FormatFloat(pct, 'f', -1, 64), min)
}

// forPort returns the policy for a port: its portLevelSettings entry if it
// has one (and true), else itself.
func (tp *istioTP) forPort(port int) (*istioTP, bool) {
	if tp == nil {
		return nil, false
	}
	for _, p := range tp.ports {
		if p.port == port {
			return p.tp, true
		}
	}
	return tp, false
}

// effective merges the destination's and a subset's policies for a port as
// pilot does (util.MergeSubsetTrafficPolicy, model.MergeTrafficPolicy): a
// port's settings replace the destination-level ones; a subset's
// connectionPool (or any port setting of the subset) replaces the
// destination's, its retryBudget too.
func (dr *destinationRule) effective(subset string, port int) istioTP {
	var m istioTP
	if base, _ := dr.policy.forPort(port); base != nil {
		m = istioTP{pool: base.pool, maxRetries: base.maxRetries, maxPath: base.maxPath, budget: base.budget}
	}
	sp := dr.subsets[subset]
	if subset == "" || sp == nil {
		return m
	}
	s, hasPort := sp.forPort(port)
	if s.pool || hasPort {
		m.pool, m.maxRetries, m.maxPath = s.pool, s.maxRetries, s.maxPath
	}
	if s.budget != "" {
		m.budget = s.budget
	}
	return m
}

// describe says what bounds retries under the merged policy, or why
// nothing does.
func (m istioTP) describe(object string) (string, string) {
	switch {
	case m.budget != "":
		return m.budget, ""
	case m.maxRetries > 0 && m.maxRetries < istioUnlimitedRetries:
		return fmt.Sprintf("%s %s: at most %d concurrent retries to the host", object, m.maxPath, m.maxRetries), ""
	case m.maxPath != "":
		return "", fmt.Sprintf("%s %s is %d: Istio reads it as its default, 4294967295 concurrent retries, which switches off Envoy's limit of 3", object, m.maxPath, m.maxRetries)
	}
	return "", fmt.Sprintf("%s sets neither trafficPolicy.connectionPool.http.maxRetries nor trafficPolicy.retryBudget, so Istio's default of 4294967295 concurrent retries applies (it switches off Envoy's limit of 3)", object)
}

// ports lists the ports that have settings of their own in the rule.
func (dr *destinationRule) ports(subset string) []int {
	set := map[int]bool{}
	for _, tp := range []*istioTP{dr.policy, dr.subsets[subset]} {
		if tp != nil {
			for _, p := range tp.ports {
				set[p.port] = true
			}
		}
	}
	out := make([]int, 0, len(set))
	for p := range set {
		out = append(out, p)
	}
	sort.Ints(out)
	return out
}

// bestDR finds the DestinationRule for a host: the valid rule with the most
// specific matching host (exact before wildcards, longer wildcards first).
func (c *Config) bestDR(host string) *destinationRule {
	var best *destinationRule
	bestScore := -1
	for _, dr := range c.destinationRules {
		score := -1
		switch {
		case dr.invalid:
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
	return best
}

// istioBudgetFor says what bounds the retries to a host's subset on a port
// (0: not known), or why nothing does. With the port unknown, every port
// the rule has settings for counts, and a budget is only one if each has
// it.
func (c *Config) istioBudgetFor(host, subset string, port int) (string, string) {
	dr := c.bestDR(host)
	if dr == nil {
		return "", "no DestinationRule sets connectionPool.http.maxRetries or retryBudget for the host, so Istio's default of 4294967295 concurrent retries applies (it switches off Envoy's limit of 3)"
	}
	if dr.selector {
		return "", fmt.Sprintf("%s has a workloadSelector, so its traffic policy applies only to the client workloads it selects, which the check cannot tell; the others get Istio's default of 4294967295 concurrent retries", dr.loc.object)
	}
	ports := []int{port}
	if port == 0 {
		ports = append(dr.ports(subset), 0)
	}
	var descs []string
	for _, p := range ports {
		d, why := dr.effective(subset, p).describe(dr.loc.object)
		if why != "" {
			if port == 0 && p == 0 && len(ports) > 1 {
				why += fmt.Sprintf("; its portLevelSettings bound ports %s only, and the channel's port is not known (name it: --host HOST:PORT, or the VirtualService destination's port.number)", joinInts(ports[:len(ports)-1]))
			}
			return "", why
		}
		descs = union(descs, []string{d})
	}
	return strings.Join(descs, "; "), ""
}

func joinInts(ns []int) string {
	s := make([]string, len(ns))
	for i, n := range ns {
		s[i] = strconv.Itoa(n)
	}
	return strings.Join(s, ", ")
}
