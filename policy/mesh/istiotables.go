package mesh

import (
	"net"
	"strconv"
	"strings"
)

// istioTables returns the route tables of the VirtualServices the
// sidecars apply for the hosts (every one when hosts is empty), and a
// default table when Istio is the mesh and none surely applies: Istio
// retries every route that sets nothing. A VirtualService that Istio
// rejects, that is bound to gateways only or that has no http routes
// leaves the default in force; one exported to some namespaces only may or
// may not apply, so the default counts too.
func (c *Config) istioTables(hosts []string) []*table {
	if !c.istioSeen {
		return nil
	}
	c.unreferencedDelegates()
	port := hostsPort(hosts)
	var out []*table
	var notApplied []string
	maybe := false
	for _, vs := range c.virtualServices {
		if len(vs.hosts) == 0 || len(hosts) > 0 && !anyHostMatches(hosts, vs.hosts) {
			continue // a delegate applies through its root only
		}
		switch {
		case vs.invalid:
			notApplied = append(notApplied, vs.loc.object+" is rejected by Istio's validation")
			continue
		case vs.gatewayOnly:
			notApplied = append(notApplied, vs.loc.object+" applies to gateways only")
			continue
		case len(vs.http) == 0:
			notApplied = append(notApplied, vs.loc.object+" has no http routes")
			continue
		}
		out = append(out, c.vsTable(vs, port))
		if !c.exportedEverywhere(vs) {
			maybe = true
			notApplied = append(notApplied, vs.loc.object+" is not exported to every namespace")
		}
	}
	if len(out) > 0 && !maybe {
		return out
	}
	via := "no VirtualService routes the host, so the mesh default applies"
	if len(notApplied) > 0 {
		via = strings.Join(notApplied, "; ") + ", so the mesh default applies"
	}
	return append(out, c.istioDefaultTable(hosts, port, via))
}

// exportedEverywhere reports whether every namespace's sidecars see the
// VirtualService: its exportTo, or else the mesh config's
// defaultVirtualServiceExportTo, has "*" (or is not set).
func (c *Config) exportedEverywhere(vs *virtualService) bool {
	exp := vs.exportTo
	if exp == nil {
		exp = c.vsExportTo
	}
	return exp == nil || contains(exp, "*")
}

// hostsPort returns the port the channel's first host names
// ("orders.shop:8080"); 0 when none does.
func hostsPort(hosts []string) int {
	for _, h := range hosts {
		if _, p, err := net.SplitHostPort(h); err == nil {
			if n, err := strconv.Atoi(p); err == nil && n > 0 && n <= 65535 {
				return n
			}
		}
	}
	return 0
}

// vsTable is the route table of a VirtualService the sidecars apply.
func (c *Config) vsTable(vs *virtualService, port int) *table {
	t := &table{layer: layerIstio, loc: vs.loc, coverage: true}
	for _, r := range vs.http {
		rt := route{loc: r.loc, name: r.name, matches: r.matches}
		if r.delegate != nil {
			rt.matches = conditionalMatches(r.matches)
			rt.rule = c.delegateRule(vs, r, port)
		} else {
			rt.rule = c.istioRouteRule(vs, r, r.retries, port)
		}
		if rt.rule != nil && r.retries == nil && rt.rule.via == "" {
			rt.rule.via = r.loc.where() + " sets no retries, so the mesh default applies"
		}
		t.routes = append(t.routes, rt)
	}
	return t
}

// istioRouteRule is what the sidecar does to requests a VirtualService route
// matches: its retries converted (EnvoyFilter patches merged), with the
// budget of its destinations.
func (c *Config) istioRouteRule(vs *virtualService, r istioRoute, retries *istioRetry, port int) *rule {
	host := ""
	if len(vs.hosts) > 0 {
		host = vs.hosts[0]
	}
	dests := r.dests
	if len(dests) == 0 {
		dests = []istioDest{{host: host}}
	}
	if p := dests[0].port; p != 0 {
		port = p
	}
	ru := c.patchedRule(c.istioPolicy(retries), patchTarget{host: host, port: port, route: r.name})
	if ru == nil {
		return nil
	}
	ru.budget, ru.noBudget = c.destsBudget(dests, port)
	return ru
}

// destsBudget is the budget of a route's destinations: one only if each
// has one.
func (c *Config) destsBudget(dests []istioDest, port int) (string, string) {
	var descs []string
	for _, d := range dests {
		p := d.port
		if p == 0 {
			p = port
		}
		desc, why := c.istioBudgetFor(d.host, d.subset, p)
		if why != "" {
			return "", why
		}
		descs = union(descs, []string{desc})
	}
	return strings.Join(descs, "; "), ""
}

// delegateRule is the worst of what a root route's delegate may do: each
// route of the delegate VirtualService (when given) with its own retries or
// the root route's, and the root route's own.
func (c *Config) delegateRule(vs *virtualService, r istioRoute, port int) *rule {
	rules := []*rule{c.istioRouteRule(vs, r, r.retries, port)}
	for _, d := range c.virtualServices {
		if len(d.hosts) > 0 || d.invalid || d.name != r.delegate.name || d.ns != r.delegate.ns {
			continue
		}
		for _, dr := range d.http {
			retries := dr.retries
			if retries == nil {
				retries = r.retries
			}
			merged := istioRoute{loc: dr.loc, name: dr.name, dests: dr.dests}
			rules = append(rules, c.istioRouteRule(vs, merged, retries, port))
		}
	}
	return worstRule(rules)
}

// conditionalMatches returns copies of the matches that may not apply (a
// delegate narrows them); no match becomes a conditional catch-all.
func conditionalMatches(ms []matcher) []matcher {
	if len(ms) == 0 {
		m := allMatcher("any uri")
		m.conditional = true
		return []matcher{m}
	}
	out := make([]matcher, len(ms))
	for i, m := range ms {
		m.conditional = true
		out[i] = m
	}
	return out
}

// istioDefaultTable is Istio's default route for the hosts: the mesh
// default retry policy (EnvoyFilter patches merged).
func (c *Config) istioDefaultTable(hosts []string, port int, via string) *table {
	t := &table{layer: layerIstio, loc: location{object: "Istio default route"}}
	rt := route{loc: t.loc, name: "default"}
	host := ""
	if len(hosts) > 0 {
		host = stripPort(hosts[0])
	}
	if ru := c.patchedRule(c.istioPolicy(nil), patchTarget{host: host, port: port, route: "default"}); ru != nil {
		ru.budget, ru.noBudget = c.istioBudgetFor(host, "", port)
		if ru.via == "" {
			ru.via = via
		}
		rt.rule = ru
	}
	t.routes = append(t.routes, rt)
	return t
}

// unreferencedDelegates reports the VirtualServices without hosts that no
// root VirtualService of the input delegates to: a delegate applies only
// through a root, so whether and where its retries apply is not known.
func (c *Config) unreferencedDelegates() {
	for _, d := range c.virtualServices {
		if len(d.hosts) > 0 || d.invalid {
			continue
		}
		referenced := false
		for _, vs := range c.virtualServices {
			for _, r := range vs.http {
				referenced = referenced || r.delegate != nil && r.delegate.name == d.name && r.delegate.ns == d.ns
			}
		}
		if !referenced {
			c.add(d.loc.at("spec.hosts").finding(findingNotUnderstood, layerIstio,
				"a VirtualService without hosts is a delegate: it applies only through a root VirtualService's delegate, and no root in the input names it, so its routes and retries are not counted",
				"pass the root VirtualService too, or give this one spec.hosts"))
		}
	}
}
