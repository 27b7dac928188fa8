package mesh

import (
	"slices"
	"strings"
	"testing"

	"github.com/opledger/opledger/policy"
)

// The route precedence of Gateway API, from the specification's own text and
// examples:
//
//   - HTTPRouteRule.Matches and HTTPRouteSpec.Hostnames in
//     https://github.com/kubernetes-sigs/gateway-api/blob/main/apis/v1/httproute_types.go
//     (https://gateway-api.sigs.k8s.io/reference/api-spec/main/spec/#httprouterule);
//   - GRPCRouteRule.Matches in
//     https://github.com/kubernetes-sigs/gateway-api/blob/main/apis/v1/grpcroute_types.go;
//   - the conformance tests HTTPRoutePathMatchOrder, HTTPRouteMethodMatching and
//     HTTPRouteQueryParamMatching
//     (https://github.com/kubernetes-sigs/gateway-api/tree/main/conformance/tests),
//     whose routes the tests below restate with the checker's paths;
//   - the conflict rules of
//     https://gateway-api.sigs.k8s.io/guides/api-design/ ("foo/bar would be
//     given precedence over foo/baz").

// applicable returns the rules of the Gateway API tables that can apply to a
// request for path, in precedence order, as "route rules[i]".
func applicable(t *testing.T, c *Config, hosts []string, path string) []string {
	t.Helper()
	var out []string
	for _, tb := range c.gatewayTables(hosts) {
		for _, r := range tb.resolve(path) {
			out = append(out, r.ref.name+" "+strings.TrimPrefix(r.loc.path, "spec."))
		}
	}
	return out
}

func wantApplicable(t *testing.T, c *Config, hosts []string, path string, want ...string) {
	t.Helper()
	if got := applicable(t, c, hosts, path); !slices.Equal(got, want) {
		t.Errorf("%s (hosts %q): rules %q, want %q", path, hosts, got, want)
	}
}

func mesh(t *testing.T, yaml string) *Config {
	t.Helper()
	var c Config
	c.AddMesh("routes.yaml", []byte(yaml))
	return &c
}

// TestPrecedencePathOrder: an Exact path before any PathPrefix, and the
// longest PathPrefix first (the conformance test HTTPRoutePathMatchOrder:
// /match/exact/one, /match/exact and /match go to their Exact rules,
// /match/prefix/one/any, /match/prefix/any and /match/any to the longest
// prefix that matches).
func TestPrecedencePathOrder(t *testing.T) {
	t.Parallel()
	c := mesh(t, `
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {name: order, namespace: infra}
spec:
  parentRefs: [{name: gw}]
  rules:
  - matches: [{path: {type: Exact, value: /match}}]
  - matches: [{path: {type: Exact, value: /match/exact}}]
  - matches: [{path: {type: Exact, value: /match/exact/one}}]
  - matches: [{path: {type: PathPrefix, value: /match/}}]
  - matches: [{path: {type: PathPrefix, value: /match/prefix/}}]
  - matches: [{path: {type: PathPrefix, value: /match/prefix/one}}]
`)
	for path, rule := range map[string]string{
		"/match/exact/one":      "rules[2]",
		"/match/exact":          "rules[1]",
		"/match":                "rules[0]",
		"/match/prefix/one/any": "rules[5]",
		"/match/prefix/any":     "rules[4]",
		"/match/any":            "rules[3]",
	} {
		wantApplicable(t, c, nil, path, "order "+rule)
	}
}

// TestPrecedenceMethodMatch: a method match ranks above a match on the same
// path without one, and below a longer path (HTTPRouteMethodMatching: a
// PATCH to /path5 takes the /path5 rule over the rule matching PATCH alone;
// a PATCH with the header version: four takes the PATCH rule over the rule
// matching the header alone). For gRPC, always a POST.
func TestPrecedenceMethodMatch(t *testing.T) {
	t.Parallel()
	c := mesh(t, `
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {name: methods, namespace: infra}
spec:
  parentRefs: [{name: gw}]
  rules:
  - matches: [{path: {type: PathPrefix, value: /path5}}]
  - matches: [{method: POST}]
  - matches: [{headers: [{name: version, value: four}]}]
  - matches: [{method: GET}]
`)
	wantApplicable(t, c, nil, "/path5", "methods rules[0]")
	wantApplicable(t, c, nil, "/", "methods rules[1]") // the header rule never applies: the POST rule precedes it

	// The class of issue 37: a rule that matches the path alone came first
	// and won, so the retries of the rule that also matches POST were
	// missed for a non-idempotent method. Within one route and across two
	// (where the older route, first in the file, matches the path alone).
	for name, yaml := range map[string]string{
		"one route": `
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {name: orders, namespace: shop}
spec:
  parentRefs: [{name: gw}]
  rules:
  - matches: [{path: {type: PathPrefix, value: /shop.v1.Orders}}]
  - matches: [{path: {type: PathPrefix, value: /shop.v1.Orders}, method: POST}]
    retry: {codes: [503], attempts: 2}
`,
		"two routes": `
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {name: a-paths, namespace: shop, creationTimestamp: "2026-01-01T00:00:00Z"}
spec:
  parentRefs: [{name: gw}]
  rules:
  - matches: [{path: {type: PathPrefix, value: /shop.v1.Orders}}]
---
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {name: b-posts, namespace: shop, creationTimestamp: "2026-06-01T00:00:00Z"}
spec:
  parentRefs: [{name: gw}]
  rules:
  - matches: [{path: {type: PathPrefix, value: /shop.v1.Orders}, method: POST}]
    retry: {codes: [503], attempts: 2}
`,
	} {
		rep := check(t, mesh(t, yaml), Options{Owner: policy.OwnerMesh})
		wantAttempts(t, rep, create, map[Layer]string{layerGatewayAPI: "3"})
		if !slices.Contains(keys(rep.Findings), "retry-non-idempotent "+create+" @gateway-api") {
			t.Errorf("%s: the POST rule's retries of a non-idempotent method are not reported: %q", name, keys(rep.Findings))
		}
	}
}

// TestPrecedenceHeadersAndQuery: more header matches first, then more query
// parameter matches; both only for the requests that carry them
// (HTTPRouteQueryParamMatching: /path5 takes the /path5 rule over the
// query parameter's; a request with the header version: four and the query
// parameter animal=hydra takes the header's rule).
func TestPrecedenceHeadersAndQuery(t *testing.T) {
	t.Parallel()
	c := mesh(t, `
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {name: params, namespace: infra}
spec:
  parentRefs: [{name: gw}]
  rules:
  - matches: [{path: {type: PathPrefix, value: /path5}}]
  - matches: [{queryParams: [{name: animal, value: hydra}]}]
  - matches: [{headers: [{name: version, value: four}]}]
  - matches: [{headers: [{name: version, value: four}, {name: env, value: canary}]}]
  - matches: [{headers: [{name: version, value: four}, {name: Version, value: five}]}]
`)
	wantApplicable(t, c, nil, "/path5", "params rules[0]")
	// At "/", every rule has conditions, so each can apply: two headers
	// first, then one (the two names of rules[4] are one header), then the
	// query parameter.
	wantApplicable(t, c, nil, "/", "params rules[3]", "params rules[2]", "params rules[4]", "params rules[1]")
}

// TestPrecedenceHostnames: a route whose hostname matches the request's host
// with more characters takes precedence over every rule of a route with a
// shorter or wildcard hostname, whatever their matches (HTTPRouteSpec.Hostnames:
// "precedence must be given to rules from the HTTPRoute with the largest
// number of: Characters in a matching non-wildcard hostname. Characters in a
// matching hostname.").
func TestPrecedenceHostnames(t *testing.T) {
	t.Parallel()
	c := mesh(t, `
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {name: wildcard, namespace: shop}
spec:
  parentRefs: [{name: gw}]
  hostnames: ["*.example.com"]
  rules:
  - matches: [{path: {type: Exact, value: /shop.v1.Orders/Create}}]
    retry: {codes: [503], attempts: 3}
---
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {name: exact, namespace: shop}
spec:
  parentRefs: [{name: gw}]
  hostnames: [api.example.com]
  rules:
  - matches: [{path: {type: PathPrefix, value: /}}]
`)
	wantApplicable(t, c, []string{"api.example.com"}, create, "exact rules[0]")
	wantApplicable(t, c, []string{"web.example.com"}, create, "wildcard rules[0]")
	wantApplicable(t, c, []string{"example.com"}, create) // a wildcard does not match its own suffix
	// Without the channel's host, either route can apply: the worst is counted.
	wantApplicable(t, c, nil, create, "wildcard rules[0]", "exact rules[0]")
	rep := check(t, c, Options{Owner: policy.OwnerMesh, Hosts: []string{"api.example.com"}})
	wantAttempts(t, rep, create, map[Layer]string{layerGatewayAPI: "1"})
	rep = check(t, c, Options{Owner: policy.OwnerMesh})
	wantAttempts(t, rep, create, map[Layer]string{layerGatewayAPI: "4"})
}

// TestPrecedenceTieBreaks: rules that tie on their matches are ordered by
// the oldest route, then by "{namespace}/{name}", then by the first rule in
// the route. Without creationTimestamps in the files, the order of two
// routes is not known, and either can apply.
func TestPrecedenceTieBreaks(t *testing.T) {
	t.Parallel()
	const route = `
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {name: %s, namespace: shop%s}
spec:
  parentRefs: [{name: gw, namespace: shop}]
  rules:
  - matches: [{path: {type: PathPrefix, value: /shop.v1.Orders}}]
`
	doc := func(name, ts string) string {
		if ts != "" {
			ts = `, creationTimestamp: "` + ts + `"`
		}
		return strings.Replace(strings.Replace(route, "%s", name, 1), "%s", ts, 1)
	}
	for _, tc := range []struct {
		name    string
		yaml    string
		winners []string
	}{
		{"the oldest route", doc("zeta", "2026-01-01T00:00:00Z") + "---" + doc("alpha", "2026-02-01T00:00:00Z"), []string{"zeta rules[0]"}},
		{"then namespace/name", doc("foo-baz", "2026-01-01T00:00:00Z") + "---" + doc("foo-bar", "2026-01-01T00:00:00Z"), []string{"foo-bar rules[0]"}},
		{"no timestamps: either", doc("beta", "") + "---" + doc("alpha", ""), []string{"beta rules[0]", "alpha rules[0]"}},
		{"one timestamp: either", doc("beta", "2026-01-01T00:00:00Z") + "---" + doc("alpha", ""), []string{"beta rules[0]", "alpha rules[0]"}},
	} {
		if got := applicable(t, mesh(t, tc.yaml), nil, create); !slices.Equal(got, tc.winners) {
			t.Errorf("%s: rules %q, want %q", tc.name, got, tc.winners)
		}
	}
	// Within one route, the first of two rules that tie.
	c := mesh(t, `
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {name: orders, namespace: shop}
spec:
  parentRefs: [{name: gw}]
  rules:
  - matches: [{path: {type: PathPrefix, value: /shop.v1.Orders}}]
  - matches: [{path: {type: Exact, value: /other}}, {path: {type: PathPrefix, value: /shop.v1.Orders}}]
    retry: {attempts: 4}
`)
	wantApplicable(t, c, nil, create, "orders rules[0]")
}

// TestPrecedenceRegex: "The precedence of RegularExpression path matches are
// implementation-specific": Istio ranks them below PathPrefix
// (pilot/pkg/config/kube/gateway/conversion.go sortHTTPRoutes), Envoy Gateway
// above (internal/gatewayapi/sort.go). Against a prefix either can apply;
// an Exact match precedes them in both.
func TestPrecedenceRegex(t *testing.T) {
	t.Parallel()
	c := mesh(t, `
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {name: re, namespace: shop}
spec:
  parentRefs: [{name: gw}]
  rules:
  - matches: [{path: {type: PathPrefix, value: /shop.v1.Orders}}]
  - matches: [{path: {type: RegularExpression, value: "/shop\\.v1\\.Orders/(Create|Pay)"}}]
    retry: {attempts: 2}
  - matches: [{path: {type: Exact, value: /shop.v1.Orders/Pay}}]
`)
	wantApplicable(t, c, nil, create, "re rules[0]", "re rules[1]")
	wantApplicable(t, c, nil, pay, "re rules[2]")
	rep := check(t, c, Options{Owner: policy.OwnerMesh})
	wantAttempts(t, rep, create, map[Layer]string{layerGatewayAPI: "3"}) // the worst of the two implementations
	wantAttempts(t, rep, pay, map[Layer]string{layerGatewayAPI: "1"})
}

// TestGRPCRoutePrecedence: GRPCRoute ranks by the characters of a matching
// service, then of a matching method, then the number of header matches
// (GRPCRouteRule.Matches). The gRPC routing guide's bar-route
// (https://gateway-api.sigs.k8s.io/guides/grpc-routing/): a rule matching
// the header env: canary takes the requests that carry it, the rule without
// matches the others.
func TestGRPCRoutePrecedence(t *testing.T) {
	t.Parallel()
	c := mesh(t, `
apiVersion: gateway.networking.k8s.io/v1
kind: GRPCRoute
metadata: {name: rpc, namespace: shop}
spec:
  parentRefs: [{name: gw}]
  rules:
  - matches: [{method: {method: Create}}]
  - matches: [{method: {service: shop.v1.Orders}}]
  - matches: [{method: {service: shop.v1.Orders, method: Create}}]
  - matches: [{method: {service: shop.v1.Orders}, headers: [{name: env, value: canary}]}]
  - {}
`)
	wantApplicable(t, c, nil, create, "rpc rules[2]")
	wantApplicable(t, c, nil, get, "rpc rules[3]", "rpc rules[1]")
	wantApplicable(t, c, nil, "/other.v1.Svc/Create", "rpc rules[0]")
	wantApplicable(t, c, nil, "/other.v1.Svc/Get", "rpc rules[4]")

	bar := mesh(t, `
apiVersion: gateway.networking.k8s.io/v1
kind: GRPCRoute
metadata: {name: bar-route}
spec:
  parentRefs: [{name: example-gateway}]
  hostnames: [bar.example.com]
  rules:
  - matches: [{headers: [{type: Exact, name: env, value: canary}]}]
    backendRefs: [{name: bar-svc-canary, port: 50051}]
  - backendRefs: [{name: bar-svc, port: 50051}]
`)
	wantApplicable(t, bar, []string{"bar.example.com"}, get, "bar-route rules[0]", "bar-route rules[1]")
	wantApplicable(t, bar, []string{"foo.example.com"}, get)
}

// TestLinkerdPrecedence: Linkerd's proxy ranks an HTTPRoute's path match by
// the characters it covers whatever its type, then a method match, headers
// and query parameters (linkerd2-proxy linkerd/http/route/src/http/match.rs
// and match/path.rs), so an Exact path ties with a PathPrefix of the same
// path and the method decides; GRPCRoute by service, method and headers
// (grpc/match.rs), as Gateway API.
func TestLinkerdPrecedence(t *testing.T) {
	t.Parallel()
	rep := check(t, mesh(t, `
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {name: exact, namespace: shop}
spec:
  parentRefs: [{name: orders, kind: Service, group: core, port: 8080}]
  rules:
  - matches: [{path: {type: Exact, value: /shop.v1.Orders/Create}}]
---
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata:
  name: post
  namespace: shop
  annotations: {retry.linkerd.io/http: 5xx, retry.linkerd.io/limit: "2"}
spec:
  parentRefs: [{name: orders, kind: Service, group: core, port: 8080}]
  rules:
  - matches: [{path: {type: PathPrefix, value: /shop.v1.Orders/Create}, method: POST}]
`), Options{Owner: policy.OwnerMesh})
	wantAttempts(t, rep, create, map[Layer]string{layerLinkerd: "3"})

	rep = check(t, mesh(t, `
apiVersion: gateway.networking.k8s.io/v1
kind: GRPCRoute
metadata:
  name: service
  namespace: shop
  annotations: {retry.linkerd.io/grpc: unavailable, retry.linkerd.io/limit: "3"}
spec:
  parentRefs: [{name: orders, kind: Service, group: core, port: 8080}]
  rules:
  - matches: [{method: {service: shop.v1.Orders}}]
---
apiVersion: gateway.networking.k8s.io/v1
kind: GRPCRoute
metadata: {name: create, namespace: shop}
spec:
  parentRefs: [{name: orders, kind: Service, group: core, port: 8080}]
  rules:
  - matches: [{method: {service: shop.v1.Orders, method: Create}}]
`), Options{Owner: policy.OwnerMesh})
	wantAttempts(t, rep, create, map[Layer]string{layerLinkerd: "1"})
	wantAttempts(t, rep, get, map[Layer]string{layerLinkerd: "4"})
}
