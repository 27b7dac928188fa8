package mesh

import (
	"slices"
	"strings"
	"testing"

	"github.com/opledger/opledger/policy"
)

// Gateway API routes at a Gateway, the policies that give them retries, and
// what the API server refuses:
//   - "When no rules matching a request have been successfully attached to
//     the parent a request is coming from, a HTTP 404 status code MUST be
//     returned" (HTTPRouteRule.Matches,
//     https://github.com/kubernetes-sigs/gateway-api/blob/main/apis/v1/httproute_types.go);
//   - Envoy Gateway's BackendTrafficPolicy retry
//     (https://gateway.envoyproxy.io/docs/tasks/traffic/retry/,
//     api/v1alpha1/retry_types.go: numRetries 2 and
//     connect-failure,refused-stream,unavailable,cancelled,retriable-status-codes
//     on 503 by default; internal/ir/xds.go GetRetry: the HTTPRoute retry
//     field comes first);
//   - XBackendTrafficPolicy's retryConstraint (GEP-3388,
//     https://gateway-api.sigs.k8s.io/geps/gep-3388/);
//   - the CRD validation of HTTPRoute and GRPCRoute (the kubebuilder markers
//     of httproute_types.go and grpcroute_types.go).

const gatewayRoute = `
apiVersion: gateway.networking.k8s.io/v1
kind: GRPCRoute
metadata: {name: orders, namespace: shop}
spec:
  parentRefs: [{name: edge, namespace: shop}]
  rules:
  - matches:
    - method: {service: shop.v1.Orders, method: Get}
    - method: {service: shop.v1.Orders, method: Put}
    backendRefs: [{name: orders, port: 8080}]
`

// TestGatewayNotCovered: a method the routes of a Gateway do not route gets
// a 404 (UNIMPLEMENTED) from the gateway: reported, and no retries of the
// gateway's are counted for it.
func TestGatewayNotCovered(t *testing.T) {
	t.Parallel()
	rep := check(t, mesh(t, gatewayRoute+`---
apiVersion: gateway.envoyproxy.io/v1alpha1
kind: BackendTrafficPolicy
metadata: {name: retries, namespace: shop}
spec:
  targetRefs: [{group: gateway.networking.k8s.io, kind: Gateway, name: edge}]
  retry: {numRetries: 3}
`), Options{Owner: policy.OwnerMesh})
	for _, m := range []string{create, pay, refund} {
		f := finding(t, rep, findingMethodNotCovered, m)
		if f.Layer != layerGatewayAPI || !strings.Contains(f.Message, "404") || !strings.Contains(f.Message, "UNIMPLEMENTED") {
			t.Errorf("method-not-covered: %s", f)
		}
		wantAttempts(t, rep, m, map[Layer]string{layerGatewayAPI: "1"})
	}
	wantAttempts(t, rep, get, map[Layer]string{layerGatewayAPI: "4"})
	wantAttempts(t, rep, put, map[Layer]string{layerGatewayAPI: "4"})
	// A channel to another service's methods: all of them get the 404.
	cat, err := policy.NewCatalog(policy.MethodPolicy{FullMethod: "/billing.v1.Billing/Charge", Kind: policy.KindNonIdempotent},
		policy.MethodPolicy{FullMethod: get, Kind: policy.KindNoSideEffects})
	if err != nil {
		t.Fatal(err)
	}
	rep, err = Check(mesh(t, gatewayRoute), cat, Options{Owner: policy.OwnerApplication})
	if err != nil {
		t.Fatal(err)
	}
	wantFindings(t, rep, "method-not-covered /billing.v1.Billing/Charge @gateway-api")
}

// TestEnvoyGatewayPolicy: Envoy Gateway's BackendTrafficPolicy retry, for
// the routes it targets; a route's policy replaces its Gateway's (unless
// mergeType), and the HTTPRoute retry field comes before either.
func TestEnvoyGatewayPolicy(t *testing.T) {
	t.Parallel()
	const routes = `
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {name: reads, namespace: shop}
spec:
  parentRefs: [{name: edge}]
  rules:
  - matches: [{path: {type: Exact, value: /shop.v1.Orders/Get}}]
  - matches: [{path: {type: Exact, value: /shop.v1.Orders/Put}}]
    retry: {attempts: 1, codes: [503]}
---
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {name: writes, namespace: shop, labels: {tier: writes}}
spec:
  parentRefs: [{name: edge}]
  rules:
  - matches: [{path: {type: PathPrefix, value: /shop.v1.Orders}}]
---
apiVersion: gateway.envoyproxy.io/v1alpha1
kind: BackendTrafficPolicy
metadata: {name: gateway, namespace: shop}
spec:
  targetRef: {group: gateway.networking.k8s.io, kind: Gateway, name: edge}
  retry:
    numRetries: 4
    retryOn: {triggers: [connect-failure, refused-stream]}
  circuitBreaker:
    retryBudget: {percent: {numerator: 10}, minRetryConcurrency: 2}
`
	rep := check(t, mesh(t, routes), Options{Owner: policy.OwnerMesh})
	wantAttempts(t, rep, get, map[Layer]string{layerGatewayAPI: "5"})    // the Gateway's policy
	wantAttempts(t, rep, put, map[Layer]string{layerGatewayAPI: "2"})    // the route's retry field first
	wantAttempts(t, rep, create, map[Layer]string{layerGatewayAPI: "5"}) // never sent: safe
	if slices.Contains(keys(rep.Findings), "retry-non-idempotent "+create+" @gateway-api") {
		t.Errorf("connect-failure,refused-stream is safe for any method: %q", keys(rep.Findings))
	}
	for _, m := range rep.Methods {
		if m.Method == get && !strings.Contains(m.Layers[2].Budget, "retries at most 10% of active requests, at least 2 at once") {
			t.Errorf("budget %q", m.Layers[2].Budget)
		}
	}

	// A policy selecting the writes route by its labels replaces the
	// Gateway's: no retry field, so no retries; with mergeType, the Gateway's
	// retry stays.
	for merge, want := range map[string]string{"": "1", "mergeType: StrategicMerge": "5"} {
		rep = check(t, mesh(t, routes+`---
apiVersion: gateway.envoyproxy.io/v1alpha1
kind: BackendTrafficPolicy
metadata: {name: writes, namespace: shop}
spec:
  targetSelectors: [{group: gateway.networking.k8s.io, kind: HTTPRoute, matchLabels: {tier: writes}}]
  timeout: {http: {requestTimeout: 5s}}
  `+merge+`
`), Options{Owner: policy.OwnerMesh})
		wantAttempts(t, rep, create, map[Layer]string{layerGatewayAPI: want})
	}

	// Its defaults: 2 retries on connect-failure, refused-stream,
	// unavailable, cancelled and 503, with Envoy Gateway's circuit breaker
	// of 1024 concurrent retries, which is no budget.
	rep = check(t, mesh(t, gatewayRoute+`---
apiVersion: gateway.envoyproxy.io/v1alpha1
kind: BackendTrafficPolicy
metadata: {name: orders, namespace: shop}
spec:
  targetRefs: [{group: gateway.networking.k8s.io, kind: GRPCRoute, name: orders}]
  retry: {}
`), Options{Owner: policy.OwnerMesh})
	wantAttempts(t, rep, get, map[Layer]string{layerGatewayAPI: "3"})
	f := finding(t, rep, findingNoBudget, get)
	if !strings.Contains(f.Message, "1024 concurrent retries") {
		t.Errorf("no-budget: %s", f)
	}
	for _, m := range rep.Methods {
		if m.Method == get && !slices.Equal(m.Layers[2].Conditions, []string{"connect-failure", "refused-stream", "unavailable", "cancelled", "retriable-status-codes (503)"}) {
			t.Errorf("conditions %q", m.Layers[2].Conditions)
		}
	}
}

// TestBackendBudget: an XBackendTrafficPolicy's retryConstraint is the
// budget of the HTTPRoute retries to its Service.
func TestBackendBudget(t *testing.T) {
	t.Parallel()
	rep := check(t, load(t, "gateway-httproute.yaml"), Options{Owner: policy.OwnerMesh})
	finding(t, rep, findingNoBudget, put)
	c := load(t, "gateway-httproute.yaml")
	c.AddMesh("budget.yaml", []byte(`
apiVersion: gateway.networking.x-k8s.io/v1alpha1
kind: XBackendTrafficPolicy
metadata: {name: orders, namespace: shop}
spec:
  targetRefs: [{group: "", kind: Service, name: orders}]
  retryConstraint:
    budget: {percent: 10, interval: 10s}
    minRetryRate: {count: 3, interval: 1s}
`))
	rep = check(t, c, Options{Owner: policy.OwnerMesh})
	if slices.Contains(keys(rep.Findings), "no-budget "+put+" @gateway-api") {
		t.Errorf("the budget is not read: %q", keys(rep.Findings))
	}
	for _, m := range rep.Methods {
		if m.Method == put && !strings.Contains(m.Layers[2].Budget, "at most 10% of the backend's requests over 10s, at least 3 per 1s") {
			t.Errorf("budget %q", m.Layers[2].Budget)
		}
	}
}

// TestGatewayNotUnderstood: what may change a gateway's retries and is not
// modelled is a finding naming the file, the resource and the field.
func TestGatewayNotUnderstood(t *testing.T) {
	t.Parallel()
	rep := check(t, mesh(t, `
apiVersion: v1
kind: Service
metadata:
  name: orders
  namespace: shop
  annotations: {konghq.com/retries: "10"}
---
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata:
  name: orders
  namespace: shop
  annotations: {konghq.com/override: orders-proxy}
spec:
  parentRefs: [{name: kong}]
  rules:
  - matches: [{path: {type: PathPrefix, value: /shop.v1.Orders}}]
    filters:
    - type: ExtensionRef
      extensionRef: {group: configuration.konghq.com, kind: KongPlugin, name: proxy-retries}
    - type: RequestMirror
      requestMirror: {backendRef: {name: orders-shadow, port: 8080}}
---
apiVersion: gateway.envoyproxy.io/v1alpha1
kind: EnvoyPatchPolicy
metadata: {name: patch, namespace: shop}
spec:
  type: JSONPatch
---
apiVersion: gateway.envoyproxy.io/v1alpha1
kind: BackendTrafficPolicy
metadata: {name: selected, namespace: shop}
spec:
  targetSelectors: [{kind: HTTPRoute, matchExpressions: [{key: tier, operator: Exists}]}]
  retry: {numRetries: 1}
`), Options{Owner: policy.OwnerMesh})
	var paths []string
	for _, f := range rep.Findings {
		if f.Kind == findingNotUnderstood {
			if f.File != "routes.yaml" || f.Object == "" {
				t.Errorf("not-understood without its file or object: %s", f)
			}
			paths = append(paths, f.Object+" "+f.Path)
		}
	}
	want := []string{
		"Service shop/orders metadata.annotations.konghq.com/retries",
		"HTTPRoute shop/orders metadata.annotations.konghq.com/override",
		"HTTPRoute shop/orders spec.rules[0].filters[0]",
		"HTTPRoute shop/orders spec.rules[0].filters[1]",
		"EnvoyPatchPolicy shop/patch spec",
		"BackendTrafficPolicy shop/selected spec.targetSelectors[0]",
	}
	if !slices.Equal(paths, want) {
		t.Errorf("not-understood at\n  %q\nwant\n  %q", paths, want)
	}
	// The selector is taken to select the route: its retry is counted.
	wantAttempts(t, rep, create, map[Layer]string{layerGatewayAPI: "2"})
}

// TestGatewayRefused: a route the API server refuses is no route at all
// (invalid-resource): its retries are not counted, and at a Gateway the
// methods it would have routed get a 404.
func TestGatewayRefused(t *testing.T) {
	t.Parallel()
	for name, rule := range map[string]string{
		"method in lower case":  "matches: [{path: {value: /shop.v1.Orders}, method: post}]\n    retry: {attempts: 2}",
		"path type":             "matches: [{path: {type: Prefix, value: /shop.v1.Orders}}]\n    retry: {attempts: 2}",
		"relative path":         "matches: [{path: {type: PathPrefix, value: shop.v1.Orders}}]\n    retry: {attempts: 2}",
		"negative attempts":     "matches: [{path: {value: /shop.v1.Orders}}]\n    retry: {attempts: -1}",
		"code out of range":     "matches: [{path: {value: /shop.v1.Orders}}]\n    retry: {attempts: 2, codes: [200]}",
		"protojson backoff":     "matches: [{path: {value: /shop.v1.Orders}}]\n    retry: {attempts: 2, backoff: 0.1s}",
		"unknown filter":        "matches: [{path: {value: /shop.v1.Orders}}]\n    filters: [{type: Retry}]\n    retry: {attempts: 2}",
		"grpc method match, {}": "",
	} {
		yaml := `
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {name: orders, namespace: shop}
spec:
  parentRefs: [{name: edge}]
  rules:
  - ` + rule + "\n"
		if rule == "" {
			yaml = `
apiVersion: gateway.networking.k8s.io/v1
kind: GRPCRoute
metadata: {name: orders, namespace: shop}
spec:
  parentRefs: [{name: edge}]
  rules:
  - matches: [{method: {}}]
`
		}
		rep := check(t, mesh(t, yaml), Options{Owner: policy.OwnerMesh})
		if !slices.Contains(keys(rep.Findings), "invalid-resource @gateway-api") {
			t.Errorf("%s: not refused: %q", name, keys(rep.Findings))
		}
		wantAttempts(t, rep, create, map[Layer]string{layerGatewayAPI: ""})
	}
	// attempts 0: refused by the CRDs since v1.6.0, accepted as no retries
	// before: no retries either way.
	rep := check(t, mesh(t, `
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {name: orders, namespace: shop}
spec:
  parentRefs: [{name: edge}]
  rules:
  - retry: {attempts: 0}
`), Options{Owner: policy.OwnerMesh})
	wantFindings(t, rep, "invalid-value @gateway-api")
	wantAttempts(t, rep, create, map[Layer]string{layerGatewayAPI: ""})
}
