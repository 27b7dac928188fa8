package mesh

import (
	"slices"
	"strings"
	"testing"

	"github.com/opledger/opledger/policy"
)

// attemptsSources returns the sources of a method's layer, joined.
func attemptsSources(rep *Report, method string, l Layer) string {
	for _, m := range rep.Methods {
		if m.Method != method {
			continue
		}
		for _, la := range m.Layers {
			if la.Layer == l {
				return strings.Join(la.Sources, " | ")
			}
		}
	}
	return ""
}

// mesh reads YAML given inline.
func meshYAML(t testing.TB, name, data string) *Config {
	t.Helper()
	var c Config
	c.AddMesh(name, []byte(data))
	return &c
}

// findingsOf returns the findings of a kind.
func findingsOf(rep *Report, kind FindingKind) []Finding {
	var out []Finding
	for _, f := range rep.Findings {
		if f.Kind == kind {
			out = append(out, f)
		}
	}
	return out
}

// vsWith is a VirtualService for orders whose routes switch retries off
// (attempts 0), with extra YAML in the first route and in spec.
func vsWith(route, spec string) string {
	retries := "    retries: {attempts: 0}\n"
	if first, _, _ := strings.Cut(route, "\n  -"); strings.Contains(first, "retries:") {
		retries = ""
	}
	return `apiVersion: networking.istio.io/v1
kind: VirtualService
metadata: {name: orders, namespace: shop}
spec:
  hosts: [orders]
` + spec + `
  http:
  - name: all
    match: [{uri: {prefix: /shop.v1.Orders/}}]
` + retries + route + `
`
}

const okRoute = "    route: [{destination: {host: orders}}]"

// TestIstioValidation: a resource Istio's validation rejects is not
// applied, so Istio's default retries (2 retries, 3 attempts) stay in
// force instead of the resource's "attempts: 0"; each broken rule is an
// invalid-resource finding. The rules are istio/istio
// pkg/config/validation (virtualservice.go validateHTTPRoute,
// validateHTTPRouteConflict; validation.go ValidateVirtualService,
// validateExportTo, validateStringRegexp, validateHTTPRouteDestinations;
// agent/validation.go ValidateHTTPRetry, ValidateDuration). Before the fix
// every case read as "retries off" (1 attempt).
func TestIstioValidation(t *testing.T) {
	t.Parallel()
	for name, tc := range map[string]struct{ route, spec, path string }{
		// The class of issue 37: no route, redirect or directResponse.
		"no route":                 {route: "", path: "spec.http[0]"},
		"route and redirect":       {route: okRoute + "\n    redirect: {uri: /x}", path: "spec.http[0]"},
		"route and directResponse": {route: okRoute + "\n    directResponse: {status: 503}", path: "spec.http[0]"},
		"mirror and mirrors": {route: okRoute + "\n    mirror: {host: audit}\n    mirrors: [{destination: {host: audit}}]",
			path: "spec.http[0]"},
		"negative attempts":         {route: okRoute + "\n    retries: {attempts: -1}", path: "spec.http[0].retries.attempts"},
		"retryOn with attempts 0":   {route: okRoute + "\n    retries: {attempts: 0, retryOn: 5xx}", path: "spec.http[0].retries"},
		"perTryTimeout, attempts 0": {route: okRoute + "\n    retries: {perTryTimeout: 2s}", path: "spec.http[0].retries"},
		"perTryTimeout under 1ms":   {route: okRoute + "\n    retries: {attempts: 2, perTryTimeout: 500us}", path: "spec.http[0].retries.perTryTimeout"},
		"perTryTimeout not in ms":   {route: okRoute + "\n    retries: {attempts: 2, perTryTimeout: 1500us}", path: "spec.http[0].retries.perTryTimeout"},
		"backoff malformed":         {route: okRoute + "\n    retries: {attempts: 2, backoff: soon}", path: "spec.http[0].retries.backoff"},
		"retryOn unknown":           {route: okRoute + "\n    retries: {attempts: 2, retryOn: '5xx,retry-please'}", path: "spec.http[0].retries.retryOn"},
		// Istio splits retryOn at commas without trimming.
		"retryOn with a blank":   {route: okRoute + "\n    retries: {attempts: 2, retryOn: '5xx, unavailable'}", path: "spec.http[0].retries.retryOn"},
		"retryOn unnamed code":   {route: okRoute + "\n    retries: {attempts: 2, retryOn: '599'}", path: "spec.http[0].retries.retryOn"},
		"timeout malformed":      {route: okRoute + "\n    timeout: 10", path: "spec.http[0].timeout"},
		"invalid regex":          {route: okRoute + "\n  - match: [{uri: {regex: '(Get'}}]\n" + okRoute, path: "spec.http[1].match[0].uri.regex"},
		"empty method prefix":    {route: okRoute + "\n  - match: [{method: {prefix: ''}}]\n" + okRoute, path: "spec.http[1].match[0].method.prefix"},
		"weights add up to 0":    {route: "    route: [{destination: {host: orders}, weight: 0}, {destination: {host: orders2}, weight: 0}]", path: "spec.http[0].route"},
		"destination w/o host":   {route: "    route: [{weight: 100}]", path: "spec.http[0].route[0]"},
		"wildcard host for mesh": {route: okRoute, spec: "  gateways: [mesh]", path: "spec.hosts"},
		"exportTo none":          {route: okRoute, spec: "  exportTo: ['~']", path: "spec.exportTo"},
		"exportTo * and others":  {route: okRoute, spec: "  exportTo: ['*', shop]", path: "spec.exportTo"},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			doc := vsWith(tc.route, tc.spec)
			if name == "wildcard host for mesh" {
				doc = strings.Replace(doc, "hosts: [orders]", "hosts: ['*']", 1)
			}
			rep := check(t, meshYAML(t, "vs.yaml", doc), Options{Owner: policy.OwnerMesh, Hosts: []string{"orders.shop"}})
			invalid := findingsOf(rep, findingInvalidResource)
			if len(invalid) == 0 || invalid[0].Path != tc.path || invalid[0].Object != "VirtualService shop/orders" ||
				!strings.Contains(invalid[0].Message, "Istio's validation rejects the whole VirtualService, so none of it is applied: the mesh default retries stay in force") {
				t.Fatalf("invalid-resource findings %v\n%s", invalid, doc)
			}
			wantAttempts(t, rep, get, map[Layer]string{layerIstio: "3"})
			wantAttempts(t, rep, create, map[Layer]string{layerIstio: "3"})
			if src := attemptsSources(rep, get, layerIstio); !strings.Contains(src, "Istio defaults") ||
				!strings.Contains(src, "is rejected by Istio's validation, so the mesh default applies") {
				t.Errorf("sources %q", src)
			}
		})
	}
}

// TestIstioValidationAccepts: what Istio's validation accepts stays
// applied — attempts 0 alone, or with backoff or retryIgnorePreviousHosts
// (ValidateHTTPRetry refuses only retryOn, perTryTimeout and
// retryRemoteLocalities with it), a redirect or a direct response alone,
// a status code in retryOn.
func TestIstioValidationAccepts(t *testing.T) {
	t.Parallel()
	for name, route := range map[string]string{
		"attempts 0 alone":        okRoute,
		"attempts 0 with backoff": okRoute + "\n  - retries: {attempts: 0, backoff: 25ms, retryIgnorePreviousHosts: false}\n" + okRoute,
		"redirect":                "    redirect: {uri: /v2}",
		"direct response":         "    directResponse: {status: 503}",
		"weights":                 "    route: [{destination: {host: orders}, weight: 90}, {destination: {host: orders-canary}, weight: 10}]",
	} {
		rep := check(t, meshYAML(t, "vs.yaml", vsWith(route, "")), Options{Owner: policy.OwnerMesh, Hosts: []string{"orders.shop"}})
		if f := findingsOf(rep, findingInvalidResource); len(f) > 0 {
			t.Errorf("%s: %v", name, f)
		}
		wantAttempts(t, rep, get, map[Layer]string{layerIstio: "1"})
	}
	// A status code in retryOn adds retriable-status-codes (ConvertPolicy).
	rep := check(t, meshYAML(t, "vs.yaml", vsWith(okRoute+"\n    retries: {attempts: 2, retryOn: 'connect-failure,503'}", "")),
		Options{Owner: policy.OwnerMesh})
	if f := finding(t, rep, findingRetryNonIdempotent, create); !slices.Equal(f.Conditions, []string{"retriable-status-codes (503)"}) {
		t.Errorf("conditions %q", f.Conditions)
	}
}

// TestIstioInvalidDestinationRule: a DestinationRule Istio rejects does not
// bound retries (istio/istio validation.go validateConnectionPool,
// validateTrafficPolicy).
func TestIstioInvalidDestinationRule(t *testing.T) {
	t.Parallel()
	for name, tp := range map[string]string{
		"negative maxRetries": "trafficPolicy: {retryBudget: {percent: 10}, connectionPool: {http: {maxRetries: -1}}}",
		"percent over 100":    "trafficPolicy: {retryBudget: {percent: 120}}",
		"empty pool":          "trafficPolicy: {retryBudget: {percent: 10}, connectionPool: {}}",
		"empty policy":        "subsets: [{name: v1, trafficPolicy: {}}]\n  trafficPolicy: {retryBudget: {percent: 10}}",
		"port without number": "trafficPolicy: {retryBudget: {percent: 10}, portLevelSettings: [{connectionPool: {http: {maxRetries: 3}}}]}",
	} {
		c := meshYAML(t, "dr.yaml", "apiVersion: networking.istio.io/v1\nkind: DestinationRule\nmetadata: {name: orders, namespace: shop}\nspec:\n  host: orders\n  "+tp+"\n")
		rep := check(t, c, Options{Owner: policy.OwnerMesh, Hosts: []string{"orders.shop"}})
		inv := findingsOf(rep, findingInvalidResource)
		if len(inv) == 0 || !strings.Contains(inv[0].Message, "rejects the whole DestinationRule") {
			t.Errorf("%s: %v", name, inv)
		}
		if f := finding(t, rep, findingNoBudget, get); !strings.Contains(f.Message, "no DestinationRule sets") {
			t.Errorf("%s: %s", name, f)
		}
	}
}

// TestIstioScope: a VirtualService the sidecars do not apply is not the
// mesh channel's configuration. spec.gateways without the reserved
// gateway "mesh" binds it to gateways only (Istio's reference: "the
// reserved word mesh is used to imply all the sidecars in the mesh. When
// this field is omitted, the default gateway (mesh) will be used"); the
// sidecars keep Istio's default. exportTo shows it to some namespaces
// only; the client's namespace is unknown, so both count. Each is a
// finding naming the field. Before the fix both read as "retries off".
func TestIstioScope(t *testing.T) {
	t.Parallel()
	opts := Options{Owner: policy.OwnerMesh, Hosts: []string{"orders.shop"}}
	rep := check(t, meshYAML(t, "gw.yaml", vsWith(okRoute, "  gateways: [shop/edge]")), opts)
	f := findingsOf(rep, findingNotUnderstood)
	if len(f) != 1 || f[0].Path != "spec.gateways" || !strings.Contains(f[0].Message, "does not name mesh") || f[0].File != "gw.yaml" {
		t.Fatalf("not-understood %v", f)
	}
	wantAttempts(t, rep, get, map[Layer]string{layerIstio: "3"})
	if src := attemptsSources(rep, get, layerIstio); !strings.Contains(src, "applies to gateways only, so the mesh default applies") {
		t.Errorf("sources %q", src)
	}
	// With mesh among the gateways, the sidecars apply it.
	rep = check(t, meshYAML(t, "gw.yaml", vsWith(okRoute, "  gateways: [shop/edge, mesh]")), opts)
	wantFindings(t, rep)
	wantAttempts(t, rep, get, map[Layer]string{layerIstio: "1"})
	// A match for gateways only does not select the sidecars' requests:
	// the next route applies.
	doc := vsWith(okRoute, "  gateways: [shop/edge, mesh]")
	doc = strings.Replace(doc, "match: [{uri: {prefix: /shop.v1.Orders/}}]", "match: [{uri: {prefix: /shop.v1.Orders/}, gateways: [shop/edge]}]", 1) +
		"  - retries: {attempts: 4, retryOn: unavailable}\n" + okRoute + "\n"
	wantAttempts(t, check(t, meshYAML(t, "gw.yaml", doc), opts), get, map[Layer]string{layerIstio: "5"})

	// exportTo ".": the worst of the VirtualService and the default.
	rep = check(t, meshYAML(t, "exp.yaml", vsWith(okRoute, "  exportTo: [.]")), opts)
	f = findingsOf(rep, findingNotUnderstood)
	if len(f) != 1 || f[0].Path != "spec.exportTo" || !strings.Contains(f[0].Message, "counts both its retries and the mesh default") {
		t.Fatalf("not-understood %v", f)
	}
	wantAttempts(t, rep, get, map[Layer]string{layerIstio: "3"})
	rep = check(t, meshYAML(t, "exp.yaml", vsWith(okRoute, "  exportTo: ['*']")), opts)
	wantFindings(t, rep)
	wantAttempts(t, rep, get, map[Layer]string{layerIstio: "1"})
	// The mesh config's defaultVirtualServiceExportTo does the same for a
	// VirtualService without exportTo.
	c := meshYAML(t, "exp.yaml", vsWith(okRoute, "")+"---\nmeshConfig:\n  defaultVirtualServiceExportTo: [.]\n  defaultHttpRetryPolicy: {attempts: 1, retryOn: unavailable}\n")
	rep = check(t, c, opts)
	if f := findingsOf(rep, findingNotUnderstood); len(f) != 1 || f[0].Path != "meshConfig.defaultVirtualServiceExportTo" {
		t.Fatalf("not-understood %v", f)
	}
	wantAttempts(t, rep, get, map[Layer]string{layerIstio: "2"})
}

// TestIstioStatusCodes: retriable-status-codes retries the codes listed in
// retryOn, and none without a code: pilot's retry.ConvertPolicy takes
// RetriableStatusCodes from retryOn alone (parseRetryOn), and since Istio
// 1.24 its default policy lists none either. Before the fix 503 was
// assumed.
func TestIstioStatusCodes(t *testing.T) {
	t.Parallel()
	opts := Options{Owner: policy.OwnerMesh, Hosts: []string{"orders.shop"}}
	vs := func(retryOn string) *Config {
		return meshYAML(t, "codes.yaml", vsWith(okRoute+"\n    retries: {attempts: 3, retryOn: '"+retryOn+"'}", ""))
	}
	// Only retriable-status-codes, no code: nothing is retried.
	rep := check(t, vs("retriable-status-codes"), opts)
	wantAttempts(t, rep, create, map[Layer]string{layerIstio: "1"})
	f := findingsOf(rep, findingInvalidValue)
	if len(f) != 1 || f[0].Path != "spec.http[0].retries.retryOn" || !strings.Contains(f[0].Message, "retries no status code") {
		t.Fatalf("invalid-value %v", f)
	}
	// With other conditions, those remain.
	rep = check(t, vs("reset,retriable-status-codes"), opts)
	if f := finding(t, rep, findingRetryNonIdempotent, create); !slices.Equal(f.Conditions, []string{"reset"}) {
		t.Errorf("conditions %q", f.Conditions)
	}
	// With codes, they are the list.
	rep = check(t, vs("retriable-status-codes,503,429"), opts)
	wantAttempts(t, rep, create, map[Layer]string{layerIstio: "4"})
	if f := finding(t, rep, findingRetryNonIdempotent, create); !slices.Equal(f.Conditions, []string{"retriable-status-codes (503,429)"}) {
		t.Errorf("conditions %q", f.Conditions)
	}
	// The mesh config's default reads the same way.
	rep = check(t, meshYAML(t, "mesh.yaml", "defaultHttpRetryPolicy: {attempts: 2, retryOn: retriable-status-codes}\n"), opts)
	wantAttempts(t, rep, get, map[Layer]string{layerIstio: "1"})
}

// TestIstioPortBudget: a DestinationRule's budget may be set per port
// (trafficPolicy.portLevelSettings[].connectionPool.http.maxRetries) or
// per subset; pilot merges them (util.MergeSubsetTrafficPolicy,
// model.MergeTrafficPolicy): a port's settings replace the destination's
// entirely, a subset's connectionPool replaces the destination's. Before
// the fix the port's budget was not read and reported missing.
func TestIstioPortBudget(t *testing.T) {
	t.Parallel()
	dr := `apiVersion: networking.istio.io/v1
kind: DestinationRule
metadata: {name: orders, namespace: shop}
spec:
  host: orders.shop.svc.cluster.local
  trafficPolicy:
    portLevelSettings:
    - port: {number: 8080}
      connectionPool: {http: {maxRetries: 5}}
  subsets:
  - name: canary
    labels: {version: canary}
    trafficPolicy:
      connectionPool: {http: {maxRetries: 2}}
---
`
	vs := func(dest string) *Config {
		return meshYAML(t, "budget.yaml", dr+vsWith("    route: [{destination: "+dest+"}]\n    retries: {attempts: 2, retryOn: unavailable}", ""))
	}
	opts := Options{Owner: policy.OwnerMesh, Hosts: []string{"orders.shop"}}
	rep := check(t, load(t, "istio-port-budget.yaml"), opts)
	wantFindings(t, rep, "retry-non-idempotent "+create+" @istio", "retry-keyed-without-ledger "+refund+" @istio")
	rep = check(t, vs("{host: orders, port: {number: 8080}}"), opts)
	wantFindings(t, rep, "retry-non-idempotent "+create+" @istio", "retry-keyed-without-ledger "+refund+" @istio")
	if b := layerBudget(rep, get, layerIstio); !strings.Contains(b, "spec.trafficPolicy.portLevelSettings[0].connectionPool.http.maxRetries: at most 5 concurrent retries") {
		t.Errorf("budget %q", b)
	}
	// The port named by the channel's host works the same.
	rep = check(t, vs("{host: orders}"), Options{Owner: policy.OwnerMesh, Hosts: []string{"orders.shop:8080"}})
	if b := layerBudget(rep, get, layerIstio); !strings.Contains(b, "at most 5 concurrent retries") {
		t.Errorf("budget by host port %q", b)
	}
	// A subset's own connectionPool.
	rep = check(t, vs("{host: orders, subset: canary, port: {number: 9090}}"), opts)
	if b := layerBudget(rep, get, layerIstio); !strings.Contains(b, "spec.subsets[0].trafficPolicy.connectionPool.http.maxRetries: at most 2") {
		t.Errorf("subset budget %q", b)
	}
	// Another port has Istio's default; an unknown port says how to name it.
	rep = check(t, vs("{host: orders, port: {number: 9090}}"), opts)
	if f := finding(t, rep, findingNoBudget, get); !strings.Contains(f.Message, "sets neither") {
		t.Errorf("other port: %s", f)
	}
	rep = check(t, vs("{host: orders}"), opts)
	if f := finding(t, rep, findingNoBudget, get); !strings.Contains(f.Message, "its portLevelSettings bound ports 8080 only, and the channel's port is not known") {
		t.Errorf("unknown port: %s", f)
	}
	// A port's settings replace the destination's retryBudget entirely.
	c := meshYAML(t, "budget.yaml", strings.Replace(dr, "  trafficPolicy:\n    portLevelSettings:", "  trafficPolicy:\n    retryBudget: {percent: 10}\n    portLevelSettings:", 1)+
		vsWith("    route: [{destination: {host: orders, port: {number: 8080}}}]\n    retries: {attempts: 2, retryOn: unavailable}", ""))
	if b := layerBudget(check(t, c, opts), get, layerIstio); !strings.Contains(b, "at most 5 concurrent retries") || strings.Contains(b, "10%") {
		t.Errorf("port replaces budget: %q", b)
	}
}

// layerBudget returns a method's budget at a layer.
func layerBudget(rep *Report, method string, l Layer) string {
	for _, m := range rep.Methods {
		if m.Method == method {
			for _, la := range m.Layers {
				if la.Layer == l {
					return la.Budget
				}
			}
		}
	}
	return ""
}

// efYAML is an EnvoyFilter in namespace ns with the patches, for the
// outbound routes of orders:8080.
func efYAML(ns, patches string) string {
	return `apiVersion: networking.istio.io/v1alpha3
kind: EnvoyFilter
metadata: {name: retries, namespace: ` + ns + `}
spec:
  configPatches:
` + patches + `
---
`
}

const routePatch = `  - applyTo: HTTP_ROUTE
    match:
      context: SIDECAR_OUTBOUND
      routeConfiguration:
        vhost:
          name: orders.shop.svc.cluster.local:8080
    patch:
      operation: MERGE
      value:
        route:
          retry_policy: {retry_on: 'unavailable,5xx', num_retries: 5}`

// TestEnvoyFilter: an EnvoyFilter can patch the retry_policy of the routes
// istiod generates (Istio's EnvoyFilter reference: applyTo HTTP_ROUTE or
// VIRTUAL_HOST, operation MERGE). Such a patch is merged as protobuf
// merges (a num_retries of 0 changes nothing, istio/istio#22574 via
// envoyproxy/envoy#22574); every other patch is not understood. Before the
// fix an EnvoyFilter was "unknown-kind" with the claim that it "does not
// configure retries", and its retries were not counted.
func TestEnvoyFilter(t *testing.T) {
	t.Parallel()
	opts := Options{Owner: policy.OwnerMesh, Hosts: []string{"orders.shop:8080"}}
	rep := check(t, meshYAML(t, "ef.yaml", efYAML("istio-system", routePatch)+vsWith(okRoute+"\n    retries: {attempts: 1, retryOn: connect-failure}", "")), opts)
	wantAttempts(t, rep, create, map[Layer]string{layerIstio: "6"})
	f := finding(t, rep, findingRetryNonIdempotent, create)
	if f.Object != "EnvoyFilter istio-system/retries" || f.Path != "spec.configPatches[0].patch.value.route.retry_policy" ||
		!slices.Equal(f.Conditions, []string{"unavailable", "5xx"}) {
		t.Errorf("finding %s %q", f, f.Conditions)
	}
	for _, f := range rep.Findings {
		if f.Kind == findingUnknownKind || strings.Contains(f.Message, "does not configure retries") {
			t.Errorf("finding %s", f)
		}
	}
	// The default route, for a host with no VirtualService, is patched too.
	rep = check(t, meshYAML(t, "ef.yaml", efYAML("istio-system", routePatch)), opts)
	wantAttempts(t, rep, get, map[Layer]string{layerIstio: "6"})
	// Another host's virtual host is not.
	rep = check(t, meshYAML(t, "ef.yaml", efYAML("istio-system", routePatch)), Options{Owner: policy.OwnerMesh, Hosts: []string{"billing.shop:8080"}})
	wantAttempts(t, rep, get, map[Layer]string{layerIstio: "3"})
	// num_retries 0 in a MERGE keeps the route's count (2, Istio's default).
	zero := strings.Replace(routePatch, "num_retries: 5", "num_retries: 0", 1)
	rep = check(t, meshYAML(t, "ef.yaml", efYAML("istio-system", zero)), opts)
	wantAttempts(t, rep, get, map[Layer]string{layerIstio: "3"})
	// In a namespace of its own the filter applies to that namespace's
	// workloads only: the worst of both.
	rep = check(t, meshYAML(t, "ef.yaml", efYAML("payments", routePatch)+vsWith(okRoute, "")), opts)
	wantAttempts(t, rep, get, map[Layer]string{layerIstio: "6"})
	if src := attemptsSources(rep, get, layerIstio); !strings.Contains(src, "the worst of the policies that may apply") {
		t.Errorf("sources %q", src)
	}
	// A VIRTUAL_HOST patch reaches only the routes without a policy of
	// their own (attempts 0 leaves none).
	vhPatch := strings.Replace(strings.Replace(routePatch, "HTTP_ROUTE", "VIRTUAL_HOST", 1), "        route:\n          retry_policy", "        retry_policy", 1)
	rep = check(t, meshYAML(t, "ef.yaml", efYAML("istio-system", vhPatch)+vsWith(okRoute, "")+"  - retries: {attempts: 1, retryOn: unavailable}\n"+okRoute+"\n"), opts)
	wantAttempts(t, rep, get, map[Layer]string{layerIstio: "6"})
	rep = check(t, meshYAML(t, "ef.yaml", efYAML("istio-system", vhPatch)+vsWith(okRoute+"\n    retries: {attempts: 1, retryOn: unavailable}", "")), opts)
	wantAttempts(t, rep, get, map[Layer]string{layerIstio: "2"})
}

// TestEnvoyFilterNotUnderstood: a patch the check does not model is a
// not-understood finding naming file, resource and patch, saying whether
// it visibly touches retries.
func TestEnvoyFilterNotUnderstood(t *testing.T) {
	t.Parallel()
	for name, tc := range map[string]struct{ patch, want string }{
		"lua filter": {`  - applyTo: HTTP_FILTER
    match: {context: SIDECAR_OUTBOUND}
    patch: {operation: INSERT_BEFORE, value: {name: envoy.lua, typed_config: {inline_code: "function envoy_on_request(h) end"}}}`,
			"no retry setting is visible in it"},
		"cluster breaker": {`  - applyTo: CLUSTER
    patch: {operation: MERGE, value: {circuit_breakers: {thresholds: [{max_retries: 100}]}}}`,
			"it sets spec.configPatches[0].patch.value.circuit_breakers"},
		"replace route": {strings.Replace(routePatch, "MERGE", "REPLACE", 1), "it sets spec.configPatches[0].patch.value.route.retry_policy"},
		"inbound":       {strings.Replace(routePatch, "SIDECAR_OUTBOUND", "SIDECAR_INBOUND", 1), "server-side sidecar's inbound configuration"},
		"gateway":       {strings.Replace(routePatch, "SIDECAR_OUTBOUND", "GATEWAY", 1), "gateways' configuration"},
		"hedge":         {strings.Replace(routePatch, "retry_policy: {retry_on: 'unavailable,5xx', num_retries: 5}", "hedge_policy: {hedge_on_per_try_timeout: true}", 1), "route.hedge_policy"},
		"retry headers": {`  - applyTo: VIRTUAL_HOST
    patch: {operation: MERGE, value: {request_headers_to_add: [{header: {key: x-envoy-max-retries, value: "9"}}]}}`, "request_headers_to_add"},
	} {
		rep := check(t, meshYAML(t, "ef.yaml", efYAML("istio-system", tc.patch)), Options{Owner: policy.OwnerMesh, Hosts: []string{"orders.shop:8080"}})
		f := findingsOf(rep, findingNotUnderstood)
		if len(f) != 1 || f[0].File != "ef.yaml" || f[0].Object != "EnvoyFilter istio-system/retries" || f[0].Path != "spec.configPatches[0]" ||
			!strings.Contains(f[0].Message, tc.want) {
			t.Errorf("%s: %v", name, f)
		}
		wantAttempts(t, rep, get, map[Layer]string{layerIstio: "3"})
	}
}

// TestIstioDelegate: a root route delegating to another VirtualService
// (Istio's VirtualService reference, "delegate"; pilot's mergeHTTPRoute
// takes the root's retries where the delegate's route sets none) counts
// the worst of the delegate's routes, and says so; a delegate no root
// names is reported.
func TestIstioDelegate(t *testing.T) {
	t.Parallel()
	root := `apiVersion: networking.istio.io/v1
kind: VirtualService
metadata: {name: orders, namespace: shop}
spec:
  hosts: [orders]
  http:
  - match: [{uri: {prefix: /shop.v1.Orders/}}]
    delegate: {name: orders-routes}
    retries: {attempts: 1, retryOn: unavailable}
---
`
	delegate := `apiVersion: networking.istio.io/v1
kind: VirtualService
metadata: {name: orders-routes, namespace: shop}
spec:
  http:
  - match: [{uri: {exact: /shop.v1.Orders/Get}}]
    retries: {attempts: 4, retryOn: unavailable}
    route: [{destination: {host: orders}}]
  - route: [{destination: {host: orders}}]
`
	opts := Options{Owner: policy.OwnerMesh, Hosts: []string{"orders.shop"}}
	rep := check(t, meshYAML(t, "delegate.yaml", root+delegate), opts)
	wantAttempts(t, rep, get, map[Layer]string{layerIstio: "5"})
	f := findingsOf(rep, findingNotUnderstood)
	if len(f) != 1 || f[0].Path != "spec.http[0].delegate" {
		t.Errorf("not-understood %v", f)
	}
	rep = check(t, meshYAML(t, "delegate.yaml", delegate), opts)
	if f := findingsOf(rep, findingNotUnderstood); len(f) != 1 || !strings.Contains(f[0].Message, "no root in the input names it") {
		t.Errorf("unreferenced delegate %v", f)
	}
	wantAttempts(t, rep, get, map[Layer]string{layerIstio: "3"})
}
