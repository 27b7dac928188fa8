package mesh

import (
	"slices"
	"strings"
	"testing"

	"github.com/opledger/opledger/policy"
)

// Linkerd, as its documentation and its policy controller read the
// resources:
//   - https://linkerd.io/2-edge/reference/retries/ and
//     https://linkerd.io/2-edge/features/retries-and-timeouts/ (annotations);
//   - https://linkerd.io/2-edge/reference/service-profiles/ (ServiceProfile);
//   - linkerd2 policy-controller/k8s/index/src/outbound/index/http.rs and
//     grpc.rs (parse_http_retry, parse_grpc_retry: a limit of 0 reads as not
//     set, the lists are split at commas without trimming, an invalid value
//     fails the whole parse), policy-controller/grpc/src/outbound.rs (a
//     Service with GRPCRoutes is routed by them alone; without routes, by a
//     default HTTP route with the Service's HTTP retry annotations), and
//     linkerd2-proxy linkerd/app/outbound/src/http/logical/policy/route/retry.rs
//     (every retry policy also retries a refused stream and a request that
//     found no endpoint).

func findingWith(t *testing.T, rep *Report, kind FindingKind, text string) Finding {
	t.Helper()
	for _, f := range rep.Findings {
		if f.Kind == kind && strings.Contains(f.Message, text) {
			return f
		}
	}
	t.Fatalf("no %s finding with %q in %q", kind, text, keys(rep.Findings))
	return Finding{}
}

// TestLinkerdProfileDefaultRoute: a method no route of a ServiceProfile
// matches takes the profile's default route, which Linkerd serves without
// the profile's retries: no method-not-covered (it was reported before).
// A route matching nothing is still reported.
func TestLinkerdProfileDefaultRoute(t *testing.T) {
	t.Parallel()
	rep := check(t, mesh(t, `
apiVersion: linkerd.io/v1alpha2
kind: ServiceProfile
metadata: {name: orders.shop.svc.cluster.local, namespace: shop}
spec:
  routes:
  - name: Get
    condition: {method: POST, pathRegex: /shop\.v1\.Orders/Get}
    isRetryable: true
  - name: Gett
    condition: {method: POST, pathRegex: /shop\.v1\.Orders/Gett}
    isRetryable: true
`), Options{Owner: policy.OwnerMesh})
	wantFindings(t, rep, "route-matches-nothing @linkerd")
	wantAttempts(t, rep, get, map[Layer]string{layerLinkerd: "unbounded"})
	wantAttempts(t, rep, create, map[Layer]string{layerLinkerd: "1"})
}

// TestLinkerdAnnotationReading: the annotations as the controller reads them.
func TestLinkerdAnnotationReading(t *testing.T) {
	t.Parallel()
	svc := func(annotations string) string {
		return "apiVersion: v1\nkind: Service\nmetadata:\n  name: orders\n  namespace: shop\n  annotations:\n" + annotations
	}
	for _, tc := range []struct {
		name     string
		yaml     string
		attempts string
		findings []string
	}{
		// A limit alone configures retries: on a refused stream or no endpoint (never sent).
		{"limit alone", svc("    retry.linkerd.io/limit: \"2\"\n"), "3", []string{"no-budget " + create + " @linkerd"}},
		// "0" is not set: one retry.
		{"limit 0", svc("    retry.linkerd.io/http: 5xx\n    retry.linkerd.io/limit: \"0\"\n"), "2", []string{"invalid-value @linkerd", "retry-non-idempotent " + create + " @linkerd", "no-budget " + create + " @linkerd"}},
		// The gRPC list is used only with GRPCRoutes: the Service's calls take
		// the default HTTP route.
		{"grpc without GRPCRoutes", svc("    retry.linkerd.io/grpc: unavailable\n"), "1", []string{"invalid-value @linkerd"}},
		// A blank after a comma is not trimmed: the controller refuses the list, and
		// with it the Service's HTTP retries.
		{"blank in the list", svc("    retry.linkerd.io/http: \"502, 503\"\n    retry.linkerd.io/limit: \"3\"\n"), "1", []string{"unknown-condition @linkerd"}},
		// Compound or fractional durations are not read; nor is the limit then.
		{"bad timeout", svc("    retry.linkerd.io/http: 5xx\n    retry.linkerd.io/timeout: 1m30s\n"), "1", []string{"invalid-value @linkerd"}},
		{"good timeout", svc("    retry.linkerd.io/http: 5xx\n    retry.linkerd.io/timeout: 300ms\n"), "2", []string{"retry-non-idempotent " + create + " @linkerd", "no-budget " + create + " @linkerd"}},
	} {
		rep, err := Check(mesh(t, tc.yaml), oneMethod(t), Options{Owner: policy.OwnerMesh})
		if err != nil {
			t.Fatal(err)
		}
		if got := attempts(rep, create)[layerLinkerd]; got != tc.attempts && !(tc.attempts == "1" && got == "") {
			t.Errorf("%s: %s attempts, want %s", tc.name, got, tc.attempts)
		}
		if got := keys(rep.Findings); !slices.Equal(got, tc.findings) {
			t.Errorf("%s: findings %q, want %q", tc.name, got, tc.findings)
		}
	}
}

// oneMethod is a catalog of Create alone.
func oneMethod(t *testing.T) *policy.Catalog {
	t.Helper()
	cat, err := policy.NewCatalog(policy.MethodPolicy{FullMethod: create, Kind: policy.KindNonIdempotent})
	if err != nil {
		t.Fatal(err)
	}
	return cat
}

// TestLinkerdRoutes: a Service with GRPCRoutes is routed by them alone (its
// HTTPRoutes do not apply); a route the controller cannot convert is not
// used; a route's annotations replace the Service's.
func TestLinkerdRoutes(t *testing.T) {
	t.Parallel()
	c := mesh(t, `
apiVersion: v1
kind: Service
metadata:
  name: orders
  namespace: shop
  annotations: {retry.linkerd.io/grpc: "unavailable,cancelled", retry.linkerd.io/limit: "2"}
---
apiVersion: gateway.networking.k8s.io/v1
kind: GRPCRoute
metadata: {name: reads, namespace: shop}
spec:
  parentRefs: [{name: orders, kind: Service, group: core, port: 8080}]
  rules:
  - matches: [{method: {service: shop.v1.Orders, method: Get}}, {method: {service: shop.v1.Orders, method: Put}}]
---
apiVersion: gateway.networking.k8s.io/v1
kind: GRPCRoute
metadata:
  name: writes
  namespace: shop
  annotations: {retry.linkerd.io/grpc: internal}
spec:
  parentRefs: [{name: orders, kind: Service, group: core, port: 8080}]
  rules:
  - matches: [{method: {type: RegularExpression, service: shop\.v1\.Orders, method: "Create|Pay|Refund"}}]
---
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata:
  name: everything
  namespace: shop
  annotations: {retry.linkerd.io/http: 5xx, retry.linkerd.io/limit: "5"}
spec:
  parentRefs: [{name: orders, kind: Service, group: core, port: 8080}]
  rules:
  - matches: [{path: {type: PathPrefix, value: /}}]
`)
	rep := check(t, c, Options{Owner: policy.OwnerMesh})
	f := findingWith(t, rep, findingInvalidResource, "RegularExpression method match")
	if f.Layer != layerLinkerd || f.Object != "GRPCRoute shop/writes" {
		t.Errorf("invalid-resource: %s", f)
	}
	if f := findingWith(t, rep, findingOverridden, "GRPCRoutes alone"); f.Object != "HTTPRoute shop/everything" {
		t.Errorf("overridden: %s", f)
	}
	wantAttempts(t, rep, get, map[Layer]string{layerLinkerd: "3"})    // the Service's gRPC retries
	wantAttempts(t, rep, create, map[Layer]string{layerLinkerd: "1"}) // no route: refused, nothing retried
	findingWith(t, rep, findingMethodNotCovered, "the mesh refuses its calls")

	// The same GRPCRoute with an invalid annotation is not used either.
	c = mesh(t, `
apiVersion: gateway.networking.k8s.io/v1
kind: GRPCRoute
metadata:
  name: writes
  namespace: shop
  annotations: {retry.linkerd.io/grpc: "internal, unavailable"}
spec:
  parentRefs: [{name: orders, kind: Service, group: core, port: 8080}]
  rules:
  - matches: [{method: {service: shop.v1.Orders, method: Create}}]
---
apiVersion: gateway.networking.k8s.io/v1
kind: GRPCRoute
metadata:
  name: reads
  namespace: shop
  annotations: {retry.linkerd.io/grpc: unavailable}
spec:
  parentRefs: [{name: orders, kind: Service, group: core, port: 8080}]
  rules:
  - matches: [{method: {service: shop.v1.Orders, method: Get}}]
`)
	rep = check(t, c, Options{Owner: policy.OwnerMesh})
	findingWith(t, rep, findingInvalidResource, `retry.linkerd.io/grpc has " unavailable"`)
	wantAttempts(t, rep, create, map[Layer]string{layerLinkerd: "1"})
	wantAttempts(t, rep, get, map[Layer]string{layerLinkerd: "2"})
}

// TestLinkerdServiceProfileFields: a field a ServiceProfile does not have is
// dropped by the API server, so a misspelt isRetryable retries nothing.
func TestLinkerdServiceProfileFields(t *testing.T) {
	t.Parallel()
	rep := check(t, mesh(t, `
apiVersion: linkerd.io/v1alpha2
kind: ServiceProfile
metadata: {name: orders.shop.svc.cluster.local, namespace: shop}
spec:
  retrybudget: {retryRatio: 0.2}
  routes:
  - name: all
    condition: {pathRegex: /shop\.v1\.Orders/.*}
    isRetriable: true
`), Options{Owner: policy.OwnerMesh})
	wantFindings(t, rep, "unknown-field @linkerd", "unknown-field @linkerd")
	if f := rep.Findings[1]; f.Path != "spec.routes[0].isRetriable" || !strings.Contains(f.Message, `did you mean "isRetryable"?`) {
		t.Errorf("unknown-field: %s", f)
	}
	wantAttempts(t, rep, get, map[Layer]string{layerLinkerd: "1"})
}
