package mesh

import (
	"fmt"
	"strings"
)

// hedgedCondition is the retry condition hedging adds: on a per-try
// timeout Envoy sends a retry without resetting the first attempt, which
// may still run.
const hedgedCondition = "per-try-timeout (hedged: the first attempt stays in flight)"

// envoyRule turns a RetryPolicy into a rule for a route; nil when it
// retries nothing.
func (c *Config) envoyRule(r *envoyRetry, layer Layer, er envoyRoute) *rule {
	if r == nil || r.rejected || r.numRetries == 0 {
		return nil
	}
	codes := make([]int, len(r.codes))
	for i, n := range r.codes {
		codes[i] = int(n)
	}
	conds := effectiveConditions(r.retryOn, codes, r.headers)
	if len(conds) == 0 {
		return nil
	}
	n := r.numRetries + 1
	if layer == layerXDS && n > grpcMaxAttempts {
		n = grpcMaxAttempts
	}
	if n > 1<<20 {
		n = 1 << 20
	}
	ru := &rule{layer: layer, loc: r.loc, attempts: Attempts{N: int(n)}, conds: conds}
	if layer == layerXDS {
		if n <= xdsNumRetries+1 {
			ru.budget = "one retry per call (num_retries 1): a proxyless channel has no retry budget, and one retry is the bound Check accepts instead"
			return ru
		}
		ru.noBudget = "a proxyless xDS channel has no retry budget: grpc-go applies no retry throttling to the control plane's retry policies, so only num_retries 1 bounds them"
		return ru
	}
	ru.budget, ru.noBudget = c.envoyBudget(er)
	return ru
}

// envoyBudget is what bounds the retries of a route: the circuit breakers
// of every cluster it may send to, each must have one. A cluster not in
// the input has Envoy's default breaker of 3.
func (c *Config) envoyBudget(er envoyRoute) (string, string) {
	clusters := er.clusters
	if er.anyCluster {
		if len(c.envoyClusters) == 0 {
			return fmt.Sprintf("Envoy's default circuit breaker: at most %d concurrent retries to whichever cluster the route picks (no Cluster given)", envoyDefaultMaxRetries), ""
		}
		clusters = nil
		for _, cl := range c.envoyClusters {
			clusters = append(clusters, cl.name)
		}
	}
	var descs []string
	for _, name := range clusters {
		desc := fmt.Sprintf("Envoy's default circuit breaker of cluster %q: at most %d concurrent retries (no Cluster given)", name, envoyDefaultMaxRetries)
		for _, cl := range c.envoyClusters {
			if cl.name == name {
				if cl.why != "" {
					return "", cl.why
				}
				desc = cl.budget
			}
		}
		descs = union(descs, []string{desc})
	}
	if len(descs) == 0 {
		return fmt.Sprintf("Envoy's default circuit breaker: at most %d concurrent retries (no Cluster given)", envoyDefaultMaxRetries), ""
	}
	return strings.Join(descs, "; "), ""
}

// envoyRouteRule is what a route does: its own retry policies, else its
// virtual host's (a route's replaces its host's entirely), the worst of
// retry_policy and a retry_policy_typed_config; with hedging on per-try
// timeouts, a per-try timeout is a condition too.
func (c *Config) envoyRouteRule(vh *vhost, r envoyRoute, layer Layer) *rule {
	if !r.forwards {
		return nil
	}
	pol, typed := r.retry, r.typed
	inherited := pol == nil && typed == nil
	if inherited {
		pol, typed = vh.retry, vh.typed
	}
	rules := []*rule{c.envoyRule(pol, layer, r)}
	if typed != nil {
		rules = append(rules, c.envoyRule(typed, layer, r))
	}
	ru := rules[0]
	if len(rules) > 1 {
		ru = worstRule(rules)
	}
	if ru == nil {
		return nil
	}
	hedge := r.hedge
	if hedge == nil {
		hedge = vh.hedge
	}
	perTry := pol != nil && pol.perTry || typed != nil && typed.perTry
	if hedge != nil && hedge.onPerTry && perTry {
		ru.conds = union(append([]string(nil), ru.conds...), []string{hedgedCondition})
	}
	if inherited {
		ru.via = strings.TrimSpace(r.loc.where() + " has no retry_policy, so its virtual host's applies " + ru.via)
	}
	return ru
}

// envoyTables returns one table per virtual host of the route
// configurations of a layer that apply to the hosts: for each host the
// virtual host whose domains match it best, as Envoy and grpc-go pick it;
// every virtual host when hosts is empty. HttpConnectionManagers whose
// routes come from RDS and are not in the input are reported.
func (c *Config) envoyTables(layer Layer, hosts []string) []*table {
	rcs := c.envoyRoutes
	if layer == layerXDS {
		rcs = c.xdsRoutes
	}
	c.unresolvedRDS(layer, rcs)
	var out []*table
	for _, rc := range rcs {
		chosen := chooseVhosts(rc, hosts)
		for _, vh := range rc.vhosts {
			if !chosen[vh] {
				continue
			}
			t := &table{layer: layer, loc: vh.loc, coverage: true}
			for _, r := range vh.routes {
				rt := route{loc: r.loc, name: r.name, matches: []matcher{r.match}}
				rt.rule = c.envoyRouteRule(vh, r, layer)
				t.routes = append(t.routes, rt)
			}
			out = append(out, t)
		}
	}
	return out
}

// chooseVhosts picks the virtual hosts of a route configuration for the
// hosts: for each the one whose domains match it best; all when hosts is
// empty.
func chooseVhosts(rc *routeConfig, hosts []string) map[*vhost]bool {
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
	return chosen
}
