package mesh

import (
	"net"
	"strings"
)

// clusterSuffix is the Kubernetes cluster domain of service names.
const clusterSuffix = ".svc.cluster.local"

// qualify expands a Kubernetes short service name the way Istio does: a
// name without a dot lives in the resource's namespace ("orders" in shop
// is orders.shop.svc.cluster.local); "orders.shop" gets the cluster
// suffix. Wildcards and full names are kept; everything is lower case.
func qualify(host, namespace string) string {
	h := strings.ToLower(strings.TrimSuffix(strings.TrimSpace(host), "."))
	if h == "" || strings.HasPrefix(h, "*") {
		return h
	}
	switch strings.Count(h, ".") {
	case 0:
		if namespace == "" {
			namespace = "default"
		}
		return h + "." + strings.ToLower(namespace) + clusterSuffix
	case 1:
		return h + clusterSuffix
	}
	if strings.HasSuffix(h, ".svc") {
		return h + ".cluster.local"
	}
	return h
}

// shortName drops the cluster suffix: orders.shop.svc.cluster.local →
// orders.shop.
func shortName(h string) string {
	h = strings.ToLower(strings.TrimSuffix(h, "."))
	for _, s := range []string{clusterSuffix, ".svc"} {
		if t, ok := strings.CutSuffix(h, s); ok {
			return t
		}
	}
	return h
}

// stripPort removes a :port from a host name.
func stripPort(h string) string {
	if host, _, err := net.SplitHostPort(h); err == nil {
		return host
	}
	return h
}

// hostMatches reports whether a host the user named (a short name, a
// name.namespace, a full name, with or without a port) is the host a
// resource names (full, or a wildcard "*" or "*.suffix").
func hostMatches(user, resource string) bool {
	u := strings.ToLower(stripPort(strings.TrimSpace(user)))
	r := strings.ToLower(strings.TrimSpace(resource))
	if u == "" || r == "" {
		return false
	}
	if r == "*" {
		return true
	}
	if suffix, ok := strings.CutPrefix(r, "*"); ok {
		return strings.HasSuffix(qualify(u, "default"), suffix) || strings.HasSuffix(u, suffix)
	}
	us, rs := shortName(u), shortName(r)
	if us == rs {
		return true
	}
	// "orders" names orders.shop in any namespace.
	if !strings.Contains(us, ".") {
		first, _, _ := strings.Cut(rs, ".")
		return first == us
	}
	return false
}

// anyHostMatches reports whether one of the user's hosts matches one of the
// resource's.
func anyHostMatches(users, resources []string) bool {
	for _, u := range users {
		for _, r := range resources {
			if hostMatches(u, r) {
				return true
			}
		}
	}
	return false
}

// domainMatch scores how an Envoy virtual host domain matches an authority,
// as Envoy and grpc-go pick the virtual host: an exact domain beats a
// suffix wildcard ("*.example.com"), which beats a prefix wildcard
// ("example.*"), which beats "*"; a longer wildcard beats a shorter one. 0
// is no match.
func domainMatch(domain, authority string) int {
	d, a := strings.ToLower(domain), strings.ToLower(authority)
	switch {
	case d == a:
		return 4 << 20
	case d == "*":
		return 1
	case strings.HasPrefix(d, "*") && strings.HasSuffix(a, d[1:]) && len(a) > len(d)-1:
		return 3<<20 + len(d)
	case strings.HasSuffix(d, "*") && strings.HasPrefix(a, d[:len(d)-1]) && len(a) > len(d)-1:
		return 2<<20 + len(d)
	}
	return 0
}

// gatewayHostScore is how a route's hostnames match the host of a request
// to a Gateway (Gateway API's HTTPRouteSpec.Hostnames): a route without
// hostnames matches every host with no characters; an exact hostname
// matches its host, and a wildcard "*.suffix" any host in the suffix, with
// the characters of the hostname (counted as non-wildcard for an exact
// one). The most characters win; ok is false when no hostname matches.
func gatewayHostScore(hostnames []string, host string) (hostScore, bool) {
	if len(hostnames) == 0 {
		return hostScore{}, true
	}
	best, found := hostScore{}, false
	for _, h := range hostnames {
		if !hostMatches(host, h) {
			continue
		}
		s := hostScore{chars: len(h)}
		if !strings.HasPrefix(h, "*") {
			s.exact = len(h)
		}
		if !found || s.exact > best.exact || s.exact == best.exact && s.chars > best.chars {
			best, found = s, true
		}
	}
	return best, found
}
