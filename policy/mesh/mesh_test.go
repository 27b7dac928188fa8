package mesh

import (
	"encoding/json"
	"slices"
	"strings"
	"testing"

	"github.com/opledger/opledger/policy"
	"github.com/opledger/opledger/policy/serviceconfig"
)

const (
	get    = "/shop.v1.Orders/Get"
	put    = "/shop.v1.Orders/Put"
	create = "/shop.v1.Orders/Create"
	pay    = "/shop.v1.Orders/Pay"
	refund = "/shop.v1.Orders/Refund"
)

var allMethods = []string{create, get, pay, put, refund} // catalog order

// wantFindings compares the findings' keys, in order.
func wantFindings(t *testing.T, rep *Report, want ...string) {
	t.Helper()
	got := keys(rep.Findings)
	if !slices.Equal(got, want) {
		var b strings.Builder
		for _, f := range rep.Findings {
			b.WriteString("\n  " + f.String())
		}
		t.Fatalf("findings:\n  got  %q\n  want %q%s", got, want, b.String())
	}
}

func wantAttempts(t *testing.T, rep *Report, method string, want map[Layer]string) {
	t.Helper()
	got := attempts(rep, method)
	for l, w := range want {
		if got[l] != w {
			t.Errorf("%s: %s attempts %q, want %q (all: %v)", method, l, got[l], w, got)
		}
	}
}

func finding(t *testing.T, rep *Report, kind FindingKind, method string) Finding {
	t.Helper()
	for _, f := range rep.Findings {
		if f.Kind == kind && f.Method == method {
			return f
		}
	}
	t.Fatalf("no %s finding for %q", kind, method)
	return Finding{}
}

// TestIstioDefaults: an Istio mesh where nobody configured retries still
// retries every method twice (3 attempts) on its default conditions, with
// no budget — with only a DestinationRule read, or with nothing read and
// Options.Istio.
func TestIstioDefaults(t *testing.T) {
	t.Parallel()
	for name, tc := range map[string]struct {
		c    *Config
		opts Options
	}{
		"destination rule only": {load(t, "istio-default.yaml"), Options{Owner: policy.OwnerApplication}},
		"nothing but Istio":     {&Config{}, Options{Owner: policy.OwnerApplication, Istio: true}},
	} {
		rep := check(t, tc.c, tc.opts)
		wantFindings(t, rep,
			"second-owner "+create+" @istio", "retry-non-idempotent "+create+" @istio", "no-budget "+create+" @istio",
			"second-owner "+get+" @istio", "no-budget "+get+" @istio",
			"second-owner "+pay+" @istio", "no-budget "+pay+" @istio",
			"second-owner "+put+" @istio", "no-budget "+put+" @istio",
			"second-owner "+refund+" @istio", "retry-keyed-without-ledger "+refund+" @istio", "no-budget "+refund+" @istio")
		wantAttempts(t, rep, get, map[Layer]string{layerApplication: "5", layerIstio: "3", "total": "15"})
		wantAttempts(t, rep, create, map[Layer]string{layerApplication: "1", layerIstio: "3", "total": "3"})
		f := finding(t, rep, findingRetryNonIdempotent, create)
		// Istio 1.24+ lists no status code for retriable-status-codes in its
		// default (pilot's retry.DefaultPolicy), so it retries none.
		if want := []string{"unavailable", "cancelled"}; !slices.Equal(f.Conditions, want) {
			t.Errorf("%s: unsafe conditions %q, want %q", name, f.Conditions, want)
		}
		if f.Object != "Istio defaults" || f.File != "" {
			t.Errorf("%s: the default's finding names %q in %q", name, f.Object, f.File)
		}
		if m := finding(t, rep, findingSecondOwner, get).Message; !strings.Contains(m, "owner is application (5 attempts): the layers multiply to 15 requests per call") {
			t.Errorf("%s: second-owner message %q", name, m)
		}
	}
	// Owner mesh: the default is the mesh's own retries; what stays wrong is
	// the unsafe retries and the missing budget.
	rep := check(t, load(t, "istio-default.yaml"), Options{Owner: policy.OwnerMesh})
	wantFindings(t, rep,
		"retry-non-idempotent "+create+" @istio", "no-budget "+create+" @istio", "no-budget "+get+" @istio",
		"no-budget "+pay+" @istio", "no-budget "+put+" @istio",
		"retry-keyed-without-ledger "+refund+" @istio", "no-budget "+refund+" @istio")
	if m := finding(t, rep, findingNoBudget, get).Message; !strings.Contains(m, "DestinationRule shop/orders sets neither trafficPolicy.connectionPool.http.maxRetries nor trafficPolicy.retryBudget") {
		t.Errorf("no-budget message %q", m)
	}
	// Owner none: any retry is a second owner.
	rep = check(t, load(t, "istio-default.yaml"), Options{Owner: policy.OwnerNone})
	if f := finding(t, rep, findingSecondOwner, put); !strings.Contains(f.Message, "owner is none") {
		t.Errorf("owner none: %s", f)
	}
}

func TestIstioVirtualService(t *testing.T) {
	t.Parallel()
	rep := check(t, load(t, "istio-virtualservice.yaml"), Options{Owner: policy.OwnerMesh})
	wantFindings(t, rep,
		"retry-non-idempotent "+create+" @istio", "retry-keyed-without-ledger "+refund+" @istio",
		"route-matches-nothing @istio")
	wantAttempts(t, rep, get, map[Layer]string{layerIstio: "4", "total": "4"})    // attempts 3: 3 retries
	wantAttempts(t, rep, put, map[Layer]string{layerIstio: "3", "total": "3"})    // route "rest" sets nothing: the mesh default
	wantAttempts(t, rep, create, map[Layer]string{layerIstio: "3", "total": "3"}) // regex route, attempts 2
	f := finding(t, rep, findingRetryNonIdempotent, create)
	if want := []string{"5xx", "reset", "retriable-status-codes (503)"}; !slices.Equal(f.Conditions, want) || f.Path != "spec.http[2].retries" || f.Document != 1 {
		t.Errorf("finding %s: conditions %q", f, f.Conditions)
	}
	rm := rep.Findings[2]
	if rm.Path != "spec.http[1]" || !strings.Contains(rm.Message, `uri exact "/shop.v1.Orders/Gett"`) || !strings.Contains(rm.Message, `did you mean "/shop.v1.Orders/Get"?`) {
		t.Errorf("route-matches-nothing: %s", rm)
	}
	for _, m := range rep.Methods {
		for _, l := range m.Layers {
			if l.Layer == layerIstio && !strings.Contains(l.Budget, "retryBudget: retries at most 10% of active requests, at least 3 at once") {
				t.Errorf("%s: budget %q", m.Method, l.Budget)
			}
		}
	}
	// Owner application: the same retries are a second owner for each method.
	rep = check(t, load(t, "istio-virtualservice.yaml"), Options{Owner: policy.OwnerApplication})
	for _, m := range allMethods {
		finding(t, rep, findingSecondOwner, m)
	}
}

func TestIstioMeshConfig(t *testing.T) {
	t.Parallel()
	// The istio ConfigMap switches the default off: nothing retries.
	rep := check(t, load(t, "istio-mesh-off.yaml"), Options{Owner: policy.OwnerApplication})
	wantFindings(t, rep)
	wantAttempts(t, rep, get, map[Layer]string{layerIstio: "1", layerApplication: "5", "total": "5"})
	// An IstioOperator raises it to 4 retries; maxRetries 2^32-1 is no budget.
	rep = check(t, load(t, "istio-operator.yaml"), Options{Owner: policy.OwnerMesh})
	wantAttempts(t, rep, put, map[Layer]string{layerIstio: "5"})
	f := finding(t, rep, findingNoBudget, put)
	if f.Object != "IstioOperator istio-system/control-plane" || f.Path != "spec.meshConfig.defaultHttpRetryPolicy" ||
		!strings.Contains(f.Message, "maxRetries is 4294967295") {
		t.Errorf("no-budget: %s", f)
	}
	// A Helm values file and a bare MeshConfig are mesh configs too.
	var c Config
	c.AddMesh("values.yaml", []byte("meshConfig:\n  defaultHttpRetryPolicy:\n    attempts: 1\n    retryOn: connect-failure\n"))
	rep = check(t, &c, Options{Owner: policy.OwnerMesh})
	wantAttempts(t, rep, create, map[Layer]string{layerIstio: "2"})
	if slices.Contains(keys(rep.Findings), "retry-non-idempotent "+create+" @istio") {
		t.Error("connect-failure alone is safe for a non-idempotent method")
	}
	c = Config{}
	c.AddMesh("mesh.yaml", []byte("defaultHttpRetryPolicy: {attempts: 0}\n"))
	wantAttempts(t, check(t, &c, Options{Owner: policy.OwnerMesh}), create, map[Layer]string{layerIstio: "1"})
}

func TestIstioMistakes(t *testing.T) {
	t.Parallel()
	// Istio's validation (agent.ValidateHTTPRetry, validateStringRegexp)
	// rejects the VirtualService: retryOn without attempts, an invalid
	// regex, an unknown retryOn value. It is not applied, so the mesh
	// default stays in force (istio-mistakes.yaml was read as "no method
	// retries" before). The misspelled field is dropped by the API server.
	rep := check(t, load(t, "istio-mistakes.yaml"), Options{Owner: policy.OwnerMesh})
	wantFindings(t, rep, "unknown-field @istio", "invalid-resource @istio", "invalid-resource @istio", "invalid-resource @istio",
		"retry-non-idempotent "+create+" @istio", "no-budget "+create+" @istio", "no-budget "+get+" @istio",
		"no-budget "+pay+" @istio", "no-budget "+put+" @istio",
		"retry-keyed-without-ledger "+refund+" @istio", "no-budget "+refund+" @istio")
	if f := rep.Findings[0]; f.Path != "spec.http[0].retries.retryon" || !strings.Contains(f.Message, `did you mean "retryOn"?`) {
		t.Errorf("unknown-field: %s", f)
	}
	if f := rep.Findings[1]; !strings.Contains(f.Message, "http retry policy configured when attempts are set to 0") {
		t.Errorf("no attempts: %s", f)
	}
	wantAttempts(t, rep, get, map[Layer]string{layerIstio: "3"})
	if src := attemptsSources(rep, get, layerIstio); !strings.Contains(src, "VirtualService shop/orders is rejected by Istio's validation, so the mesh default applies") {
		t.Errorf("sources %q", src)
	}
}

func TestEnvoy(t *testing.T) {
	t.Parallel()
	// camelCase JSON with an @type: a route's policy replaces its virtual
	// host's; no Cluster given, so Envoy's default breaker of 3 bounds them.
	rep := check(t, load(t, "envoy-route.json"), Options{Owner: policy.OwnerMesh})
	wantFindings(t, rep, "retry-keyed-without-ledger "+refund+" @envoy")
	wantAttempts(t, rep, get, map[Layer]string{layerEnvoy: "2"})    // its route's numRetries 1
	wantAttempts(t, rep, create, map[Layer]string{layerEnvoy: "3"}) // connect-failure,refused-stream: safe
	wantAttempts(t, rep, put, map[Layer]string{layerEnvoy: "4"})    // the virtual host's numRetries 3
	// snake_case YAML bootstrap: an inline route_config, and a cluster whose
	// max_retries does not limit anything.
	rep = check(t, load(t, "envoy-bootstrap.yaml"), Options{Owner: policy.OwnerMesh})
	wantFindings(t, rep, "no-budget "+get+" @envoy", "no-budget "+put+" @envoy")
	wantAttempts(t, rep, get, map[Layer]string{layerEnvoy: "3"})
	wantAttempts(t, rep, create, map[Layer]string{layerEnvoy: "1"})
	// The host selects the virtual host by its domains.
	rep = check(t, load(t, "envoy-route.json"), Options{Owner: policy.OwnerMesh, Hosts: []string{"billing"}})
	wantAttempts(t, rep, put, map[Layer]string{layerEnvoy: ""})
	rep = check(t, load(t, "envoy-route.json"), Options{Owner: policy.OwnerMesh, Target: "dns:///orders.shop.svc.cluster.local:8080"})
	wantAttempts(t, rep, put, map[Layer]string{layerEnvoy: "4"})
}

func TestLinkerd(t *testing.T) {
	t.Parallel()
	// A ServiceProfile: unbounded retries, but budgeted; it overrides the
	// Service's annotations.
	rep := check(t, load(t, "linkerd-profile.yaml"), Options{Owner: policy.OwnerMesh})
	wantFindings(t, rep, "overridden @linkerd", "retry-non-idempotent "+create+" @linkerd")
	wantAttempts(t, rep, get, map[Layer]string{layerLinkerd: "unbounded", "total": "unbounded"})
	wantAttempts(t, rep, pay, map[Layer]string{layerLinkerd: "1"})
	for _, m := range rep.Methods {
		if m.Method == get && !strings.Contains(m.Layers[2].Budget, "retries at most 0.1 of requests plus 5 per second, over 10s") {
			t.Errorf("budget %q", m.Layers[2].Budget)
		}
	}
	// Annotations: limit+1 attempts, no budget; a GRPCRoute's replace the
	// Service's for its methods.
	rep = check(t, load(t, "linkerd-annotations.yaml"), Options{Owner: policy.OwnerMesh})
	wantFindings(t, rep, "invalid-value @linkerd",
		"retry-non-idempotent "+create+" @linkerd", "no-budget "+create+" @linkerd",
		"no-budget "+get+" @linkerd", "no-budget "+pay+" @linkerd", "no-budget "+put+" @linkerd",
		"retry-keyed-without-ledger "+refund+" @linkerd", "no-budget "+refund+" @linkerd")
	wantAttempts(t, rep, create, map[Layer]string{layerLinkerd: "3"})
	wantAttempts(t, rep, get, map[Layer]string{layerLinkerd: "2"})
	if f := finding(t, rep, findingRetryNonIdempotent, create); !slices.Equal(f.Conditions, []string{"internal", "timeout (300ms)"}) {
		t.Errorf("conditions %q", f.Conditions)
	}
}

func TestGatewayAPI(t *testing.T) {
	t.Parallel()
	rep := check(t, load(t, "gateway-httproute.yaml"), Options{Owner: policy.OwnerMesh})
	wantFindings(t, rep,
		"retry-non-idempotent "+create+" @gateway-api", "no-budget "+create+" @gateway-api",
		"no-budget "+pay+" @gateway-api", "no-budget "+put+" @gateway-api",
		"retry-keyed-without-ledger "+refund+" @gateway-api", "no-budget "+refund+" @gateway-api")
	wantAttempts(t, rep, get, map[Layer]string{layerGatewayAPI: "1"}) // the exact rule is more specific
	wantAttempts(t, rep, put, map[Layer]string{layerGatewayAPI: "3"})
	// Istio and Envoy Gateway retry an HTTPRoute retry's codes, connection
	// errors and the gRPC statuses unavailable and cancelled
	// (istio pilot/pkg/config/kube/gateway/conversion.go; envoyproxy/gateway
	// internal/xds/translator/route.go).
	if f := finding(t, rep, findingRetryNonIdempotent, create); !slices.Equal(f.Conditions, []string{"503", "connection-error", "unavailable", "cancelled"}) {
		t.Errorf("conditions %q", f.Conditions)
	}
	// Two mesh layers retrying the same method are a second owner even
	// when the owner is the mesh.
	rep = check(t, load(t, "istio-virtualservice.yaml", "gateway-httproute.yaml"), Options{Owner: policy.OwnerMesh})
	f := finding(t, rep, findingSecondOwner, put)
	if f.Layer != layerGatewayAPI || !strings.Contains(f.Message, "istio and gateway-api both retry") {
		t.Errorf("second-owner: %s", f)
	}
	wantAttempts(t, rep, put, map[Layer]string{"total": "9"})
}

func TestXDS(t *testing.T) {
	t.Parallel()
	// The route retries UNAVAILABLE 3 times: 4 attempts for every method,
	// with no budget; non-idempotent and keyed-without-ledger unsafe.
	rep := check(t, load(t, "xds:xds-route.json"), Options{Owner: policy.OwnerMesh, Target: "xds:///orders"})
	if !rep.XDS {
		t.Error("not an xds channel")
	}
	wantFindings(t, rep,
		"retry-non-idempotent "+create+" @xds", "no-budget "+create+" @xds", "no-budget "+get+" @xds",
		"no-budget "+pay+" @xds", "no-budget "+put+" @xds",
		"retry-keyed-without-ledger "+refund+" @xds", "no-budget "+refund+" @xds")
	for _, m := range allMethods {
		wantAttempts(t, rep, m, map[Layer]string{layerXDS: "4", "total": "4"})
	}
	// Owner application: a second owner.
	rep = check(t, load(t, "xds:xds-route.json"), Options{Owner: policy.OwnerApplication})
	finding(t, rep, findingSecondOwner, get)
	wantAttempts(t, rep, get, map[Layer]string{layerApplication: "5", layerXDS: "4", "total": "20"})
	// Owner service-config: the generated config is replaced.
	rep = check(t, load(t, "xds:xds-route.json"), Options{Owner: policy.OwnerServiceConfig, Target: "xds:///orders"})
	f := rep.Findings[0]
	if f.Kind != findingServiceConfigReplaced || f.File != "xds-route.json" || f.Object != "channel xds:///orders" {
		t.Errorf("first finding %s", f)
	}
	wantAttempts(t, rep, get, map[Layer]string{layerServiceConfig: "1", layerXDS: "4"})
	if slices.Contains(keys(rep.Findings), "second-owner "+get+" @xds") {
		t.Error("the xDS policy is the channel's own retries for the service-config owner")
	}
	// Mistakes grpc-go ignores, clamps or rejects.
	rep = check(t, load(t, "xds:xds-mistakes.yaml"), Options{Owner: policy.OwnerMesh})
	wantFindings(t, rep, "ignored-by-grpc @xds", "ignored-by-grpc @xds", "max-attempts-clamped @xds",
		"ignored-by-grpc @xds", "ignored-by-grpc @xds", "invalid-value @xds", "no-budget "+get+" @xds")
	wantAttempts(t, rep, get, map[Layer]string{layerXDS: "5"})    // 9 retries clamped to 5 attempts
	wantAttempts(t, rep, put, map[Layer]string{layerXDS: "1"})    // connect-failure only: nothing grpc-go retries
	wantAttempts(t, rep, create, map[Layer]string{layerXDS: "1"}) // num_retries 0: rejected
	// A Kubernetes resource is not an xDS resource.
	var c Config
	c.AddXDS("k8s.yaml", []byte("apiVersion: v1\nkind: Service\nmetadata: {name: orders}\n"))
	wantFindings(t, check(t, &c, Options{Owner: policy.OwnerMesh}), "unknown-kind @xds")
}

func TestUnknownKinds(t *testing.T) {
	t.Parallel()
	c := load(t, "unknown.yaml")
	got := keys(c.parseFindings())
	want := []string{"unknown-kind", "unknown-kind", "syntax", "syntax"}
	if !slices.Equal(got, want) {
		t.Fatalf("findings %q, want %q", got, want)
	}
	if c.documentCount() != 4 {
		t.Errorf("%d documents, want 4", c.documentCount())
	}
	for i, f := range c.parseFindings() {
		if f.Document != i+1 || f.File != "unknown.yaml" {
			t.Errorf("finding %d at %s document %d", i, f.File, f.Document)
		}
	}
	// A List's items, a JSON array and a DiscoveryResponse are read item by item.
	var l Config
	l.AddMesh("list.json", []byte(`{"apiVersion":"v1","kind":"List","items":[{"apiVersion":"apps/v1","kind":"Deployment","metadata":{"name":"x"}}]}`))
	l.AddMesh("array.json", []byte(`[{"apiVersion":"batch/v1","kind":"Job","metadata":{"name":"y"}}]`))
	fs := l.parseFindings()
	if len(fs) != 2 || fs[0].Path != "items[0]" || fs[1].Path != "[0]" || fs[1].Object != "Job y" {
		t.Errorf("nested findings %v", fs)
	}
}

// TestRename: a method renamed in the API but not in the route table is a
// route that matches nothing and a method that no route covers.
func TestRename(t *testing.T) {
	t.Parallel()
	var c Config
	c.AddMesh("grpcroute.yaml", []byte(`
apiVersion: gateway.networking.k8s.io/v1
kind: GRPCRoute
metadata: {name: orders, namespace: shop}
spec:
  parentRefs: [{name: orders, kind: Service}]
  rules:
  - matches:
    - method: {service: shop.v1.Orders, method: Get}
    - method: {service: shop.v1.Orders, method: Put}
    - method: {service: shop.v1.Orders, method: Create}
    - method: {service: shop.v1.Orders, method: Pay}
  - matches:
    - method: {service: shop.v1.Orders, method: Refnd}
`))
	rep := check(t, &c, Options{Owner: policy.OwnerApplication})
	wantFindings(t, rep, "route-matches-nothing @gateway-api", "method-not-covered "+refund+" @gateway-api")
	if f := rep.Findings[0]; f.Path != "spec.rules[1]" || !strings.Contains(f.Message, `method "shop.v1.Orders/Refnd"`) {
		t.Errorf("route-matches-nothing: %s", f)
	}
	if f := rep.Findings[1]; !strings.Contains(f.Message, "UNIMPLEMENTED") {
		t.Errorf("method-not-covered: %s", f)
	}
	// No layer retries: the Gateway API layer is not listed.
	for _, m := range rep.Methods {
		if len(m.Layers) != 2 {
			t.Errorf("%s: layers %v", m.Method, m.Layers)
		}
	}
}

// TestHosts: only the configuration for the channel's hosts applies.
func TestHosts(t *testing.T) {
	t.Parallel()
	var c Config
	c.AddMesh("two.yaml", []byte(`
apiVersion: networking.istio.io/v1
kind: VirtualService
metadata: {name: orders, namespace: shop}
spec:
  hosts: [orders]
  http:
  - retries: {attempts: 0}
    route: [{destination: {host: orders}}]
---
apiVersion: networking.istio.io/v1
kind: VirtualService
metadata: {name: billing, namespace: shop}
spec:
  hosts: [billing.shop.svc.cluster.local]
  http:
  - retries: {attempts: 4, retryOn: unavailable}
    route: [{destination: {host: billing}}]
`))
	for host, want := range map[string]string{"orders": "1", "orders.shop": "1", "orders.shop.svc.cluster.local:8080": "1", "billing": "5", "inventory": "3"} {
		rep := check(t, &c, Options{Owner: policy.OwnerMesh, Hosts: []string{host}})
		wantAttempts(t, rep, get, map[Layer]string{layerIstio: want})
	}
	wantAttempts(t, check(t, &c, Options{Owner: policy.OwnerMesh}), get, map[Layer]string{layerIstio: "5"}) // the worst of both
}

func TestServiceConfigLayer(t *testing.T) {
	t.Parallel()
	// The generated service config retries Get and Put 3 times; under
	// Istio's default that is 9 requests per call.
	rep := check(t, load(t, "istio-default.yaml"), Options{Owner: policy.OwnerServiceConfig})
	wantAttempts(t, rep, get, map[Layer]string{layerServiceConfig: "3", layerIstio: "3", "total": "9"})
	wantAttempts(t, rep, create, map[Layer]string{layerServiceConfig: "1", layerIstio: "3", "total": "3"})
	if m := finding(t, rep, findingSecondOwner, put).Message; !strings.Contains(m, "owner is service-config (3 attempts): the layers multiply to 9") {
		t.Errorf("message %q", m)
	}
	// A given service config is read the way grpc-go looks names up.
	sc, err := serviceconfig.Parse([]byte(`{"methodConfig":[{"name":[{"service":"shop.v1.Orders"}],"retryPolicy":{"maxAttempts":7,"initialBackoff":"0.1s","maxBackoff":"1s","backoffMultiplier":2,"retryableStatusCodes":["UNAVAILABLE"]}}]}`))
	if err != nil {
		t.Fatal(err)
	}
	rep = check(t, &Config{}, Options{Owner: policy.OwnerServiceConfig, ServiceConfig: sc})
	wantAttempts(t, rep, create, map[Layer]string{layerServiceConfig: "5", "total": "5"}) // clamped to 5
}

// TestGenerated: what GenerateIstio and GenerateLinkerd write, Check accepts
// for the owner mesh: no finding, and only the retryable methods retry.
func TestGenerated(t *testing.T) {
	t.Parallel()
	cat := testCatalog(t)
	istio, err := GenerateIstio(cat, GenerateOptions{Host: "orders.shop"})
	if err != nil {
		t.Fatal(err)
	}
	linkerd, err := GenerateLinkerd(cat, GenerateOptions{Host: "orders", Namespace: "shop"})
	if err != nil {
		t.Fatal(err)
	}
	for name, tc := range map[string]struct {
		data           []byte
		retried, total string
	}{"istio": {istio, "3", "3"}, "linkerd": {linkerd, "unbounded", "unbounded"}} {
		var c Config
		c.AddMesh(name+".yaml", tc.data)
		rep, err := Check(&c, cat, Options{Owner: policy.OwnerMesh, Hosts: []string{"orders.shop"}})
		if err != nil {
			t.Fatal(err)
		}
		if len(rep.Findings) != 0 {
			t.Errorf("%s: findings %v\n%s", name, rep.Findings, tc.data)
		}
		for _, m := range []string{get, put, pay} {
			if got := attempts(rep, m)["total"]; got != tc.retried {
				t.Errorf("%s: %s total %s, want %s", name, m, got, tc.retried)
			}
		}
		for _, m := range []string{create, refund} {
			if got := attempts(rep, m)["total"]; got != "1" {
				t.Errorf("%s: %s total %s, want 1", name, m, got)
			}
		}
	}
	if !strings.Contains(string(istio), "host: orders.shop.svc.cluster.local") || !strings.Contains(string(istio), "percent: 10") {
		t.Errorf("istio:\n%s", istio)
	}
	if !strings.Contains(string(linkerd), `pathRegex: /shop\.v1\.Orders/Get`) || !strings.Contains(string(linkerd), "retryRatio: 0.1") {
		t.Errorf("linkerd:\n%s", linkerd)
	}
	for _, bad := range []GenerateOptions{{}, {Host: "Orders_1"}, {Host: "orders", Retries: 5}, {Host: "orders", BudgetPercent: 150}} {
		if _, err := GenerateIstio(cat, bad); err == nil {
			t.Errorf("GenerateIstio(%+v) accepted", bad)
		}
	}
}

func TestCheckErrors(t *testing.T) {
	t.Parallel()
	if _, err := Check(nil, nil, Options{}); err == nil {
		t.Error("no owner accepted")
	}
	if _, err := Check(nil, nil, Options{Owner: policy.OwnerMesh, ApplicationAttempts: -1}); err == nil {
		t.Error("negative attempts accepted")
	}
	rep, err := Check(nil, nil, Options{Owner: policy.OwnerMesh})
	if err != nil || len(rep.Findings) != 0 || len(rep.Methods) != 0 {
		t.Errorf("empty check: %v %v", rep, err)
	}
	// Check does not change the Config: the same findings twice.
	c := load(t, "linkerd-profile.yaml")
	a := check(t, c, Options{Owner: policy.OwnerMesh})
	b := check(t, c, Options{Owner: policy.OwnerMesh})
	if !slices.Equal(keys(a.Findings), keys(b.Findings)) || len(c.parseFindings()) != 0 {
		t.Errorf("findings changed between checks: %q, %q (config: %q)", keys(a.Findings), keys(b.Findings), keys(c.parseFindings()))
	}
}

func TestReportJSON(t *testing.T) {
	t.Parallel()
	rep := check(t, load(t, "linkerd-profile.yaml"), Options{Owner: policy.OwnerMesh})
	b, err := json.Marshal(rep)
	if err != nil {
		t.Fatal(err)
	}
	s := string(b)
	for _, want := range []string{`"owner":"mesh"`, `"kind":"overridden"`, `"amplification":"unbounded"`, `"attempts":1`, `"layer":"linkerd"`} {
		if !strings.Contains(s, want) {
			t.Errorf("JSON lacks %s: %s", want, s)
		}
	}
	var back struct {
		Methods []MethodReport `json:"methods"`
	}
	if err := json.Unmarshal(b, &back); err != nil || back.Methods[1].Amplification != (Attempts{Unbounded: true}) {
		t.Errorf("round trip: %v %+v", err, back.Methods)
	}
	if s := (Finding{Kind: findingSyntax, Message: "m"}).String(); s != "syntax: (configuration): m" {
		t.Errorf("String() = %q", s)
	}
}

func TestAttempts(t *testing.T) {
	t.Parallel()
	three, inf := Attempts{N: 3}, Attempts{Unbounded: true}
	if three.times(three) != (Attempts{N: 9}) || three.times(inf) != inf || !inf.retries() || one.retries() {
		t.Error("arithmetic")
	}
	if big := (Attempts{N: 1 << 20}).times(Attempts{N: 1 << 20}); big.N != 1<<30 {
		t.Errorf("overflow guard: %v", big)
	}
}

func TestSplitYAML(t *testing.T) {
	t.Parallel()
	docs := splitYAML([]byte("# head\n---\na: 1\n--- # two\nb: |\n  ---\n  x\n...\n---\n\n# only a comment\n--- {c: 3}\n"))
	if len(docs) != 3 || !strings.Contains(string(docs[1]), "  ---") || string(docs[2]) != "{c: 3}\n" {
		t.Errorf("documents %q", docs)
	}
}
