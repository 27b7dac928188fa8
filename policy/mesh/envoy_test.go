package mesh

import (
	"slices"
	"strings"
	"testing"

	"github.com/opledger/opledger/policy"
)

// hcmListener is a Listener whose HttpConnectionManager is given as hcm
// (the YAML of the filter's fields after its name).
func hcmListener(hcm string) string {
	return `"@type": type.googleapis.com/envoy.config.listener.v3.Listener
name: egress
filter_chains:
- filters:
  - name: envoy.filters.network.http_connection_manager
` + hcm + "\n"
}

const ordersRoutes = `    name: orders-routes
    virtual_hosts:
    - name: orders
      domains: ["*"]
      routes:
      - match: {prefix: /shop.v1.Orders/}
        route:
          cluster: orders
          retry_policy: {retry_on: unavailable, num_retries: 2}`

// TestEnvoyRDS: a Listener whose HttpConnectionManager takes its routes
// from RDS has no routes in itself (Envoy's HttpConnectionManager
// reference: rds, route_config, scoped_routes); unless the
// RouteConfiguration of that name is in the input, that is not understood.
// Before the fix it read as "no retries" and exited 0.
func TestEnvoyRDS(t *testing.T) {
	t.Parallel()
	rds := hcmListener(`    typed_config:
      "@type": type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager
      stat_prefix: egress
      rds:
        route_config_name: orders-routes
        config_source: {ads: {}}`)
	rep := check(t, meshYAML(t, "lds.yaml", rds), Options{Owner: policy.OwnerMesh})
	f := findingsOf(rep, findingNotUnderstood)
	if len(f) != 1 || f[0].File != "lds.yaml" || f[0].Object != "Listener egress" || f[0].Layer != layerEnvoy ||
		f[0].Path != "filter_chains[0].filters[0].typed_config.rds" || !strings.Contains(f[0].Message, `route_config_name "orders-routes"`) {
		t.Fatalf("not-understood %v", f)
	}
	// With the RouteConfiguration in the input (another document), it is read.
	rc := "---\n\"@type\": type.googleapis.com/envoy.config.route.v3.RouteConfiguration\n" + strings.ReplaceAll(ordersRoutes, "\n    ", "\n")[4:] + "\n"
	rep = check(t, meshYAML(t, "lds.yaml", rds+rc), Options{Owner: policy.OwnerMesh})
	if f := findingsOf(rep, findingNotUnderstood); len(f) != 0 {
		t.Errorf("not-understood %v", f)
	}
	wantAttempts(t, rep, get, map[Layer]string{layerEnvoy: "3"})
	// On an xds:/// channel the same.
	var c Config
	c.AddXDS("lds.yaml", []byte(rds))
	if f := findingsOf(check(t, &c, Options{Owner: policy.OwnerMesh}), findingNotUnderstood); len(f) != 1 || f[0].Layer != layerXDS {
		t.Errorf("xds: %v", f)
	}
	// Scoped routes are not read either.
	scoped := hcmListener("    typed_config:\n      \"@type\": type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager\n      scoped_routes: {name: s}")
	if f := findingsOf(check(t, meshYAML(t, "srds.yaml", scoped), Options{Owner: policy.OwnerMesh}), findingNotUnderstood); len(f) != 1 || !strings.Contains(f[0].Message, "scoped_routes") {
		t.Errorf("scoped: %v", f)
	}
	// A bootstrap whose listeners come from a management server.
	boot := "dynamic_resources:\n  lds_config: {ads: {}}\n  cds_config: {ads: {}}\nstatic_resources: {clusters: []}\n"
	if f := findingsOf(check(t, meshYAML(t, "boot.yaml", boot), Options{Owner: policy.OwnerMesh}), findingNotUnderstood); len(f) != 1 || f[0].Path != "dynamic_resources" {
		t.Errorf("bootstrap: %v", f)
	}
}

// TestEnvoyV2Config: a v2-era filter with an untyped config (removed with
// the v2 API in Envoy 1.18) is read as the HttpConnectionManager it names,
// and reported; so is a v2 @type. Before the fix its routes were skipped:
// "no retries".
func TestEnvoyV2Config(t *testing.T) {
	t.Parallel()
	v2 := hcmListener("    config:\n      stat_prefix: egress\n      route_config:\n" + "    " + strings.ReplaceAll(ordersRoutes, "\n", "\n    "))
	v2 = strings.Replace(v2, "name: envoy.filters.network.http_connection_manager", "name: envoy.http_connection_manager", 1)
	v2 = strings.Replace(v2, "type.googleapis.com/envoy.config.listener.v3.Listener", "type.googleapis.com/envoy.api.v2.Listener", 1)
	rep := check(t, meshYAML(t, "v2.yaml", v2), Options{Owner: policy.OwnerMesh})
	wantAttempts(t, rep, get, map[Layer]string{layerEnvoy: "3"})
	var paths []string
	for _, f := range findingsOf(rep, findingInvalidValue) {
		paths = append(paths, f.Path)
	}
	if !slices.Equal(paths, []string{"@type", "filter_chains[0].filters[0].config"}) {
		t.Errorf("invalid-value paths %q", paths)
	}
	// Another network filter with an untyped config is not understood.
	other := strings.Replace(v2, "name: envoy.http_connection_manager", "name: envoy.filters.network.thrift_proxy", 1)
	if f := findingsOf(check(t, meshYAML(t, "v2.yaml", other), Options{Owner: policy.OwnerMesh}), findingNotUnderstood); len(f) != 1 || !strings.Contains(f[0].Message, "thrift_proxy") {
		t.Errorf("thrift: %v", f)
	}
}

const rcYAML = `"@type": type.googleapis.com/envoy.config.route.v3.RouteConfiguration
name: orders-routes
virtual_hosts:
- name: orders
  domains: ["*"]
  routes:
  - match: {prefix: /shop.v1.Orders/}
    route:
      cluster: orders
`

// TestEnvoyNotModelled: the fields of a route configuration that change
// how many requests a call makes and that the check does not count are a
// finding each (Envoy's route_components.proto: HedgePolicy,
// RequestMirrorPolicy, retry_policy_typed_config, retry_options_predicates,
// request_headers_to_add with x-envoy-* retry headers; router filter docs
// for x-envoy-max-retries). Before the fix they were ignored silently.
func TestEnvoyNotModelled(t *testing.T) {
	t.Parallel()
	for name, tc := range map[string]struct {
		yaml, path, want string
		kind             FindingKind
	}{
		"route mirror":        {"      request_mirror_policies: [{cluster: orders}]\n      retry_policy: {retry_on: unavailable}", "virtual_hosts[0].routes[0].route.request_mirror_policies", "mirrored", findingNotUnderstood},
		"vhost mirror":        {"  request_mirror_policies: [{cluster: orders}]", "virtual_hosts[0].request_mirror_policies", "mirrored", findingNotUnderstood},
		"config mirror":       {"request_mirror_policies: [{cluster: orders}]", "request_mirror_policies", "mirrored", findingNotUnderstood},
		"options predicates":  {"      retry_policy: {retry_on: unavailable, retry_options_predicates: [{name: x}]}", "virtual_hosts[0].routes[0].route.retry_policy.retry_options_predicates", "not read", findingNotUnderstood},
		"initial requests":    {"      hedge_policy: {initial_requests: 2}", "virtual_hosts[0].routes[0].route.hedge_policy.initial_requests", "not implemented", findingNotUnderstood},
		"typed retry (other)": {"  retry_policy_typed_config: {\"@type\": type.googleapis.com/acme.Retry, budget: 3}", "virtual_hosts[0].retry_policy_typed_config", "acme.Retry", findingNotUnderstood},
		"retry header":        {"  request_headers_to_add: [{header: {key: x-envoy-max-retries, value: \"5\"}}]", "virtual_hosts[0].request_headers_to_add[0]", "x-envoy-max-retries", findingNotUnderstood},
		"vhds":                {"vhds: {config_source: {ads: {}}}", "vhds", "VHDS", findingNotUnderstood},
		"matcher":             {"  matcher: {matcher_tree: {}}", "virtual_hosts[0].matcher", "matcher tree", findingNotUnderstood},
		"misspelled policy":   {"      retry_polcy: {retry_on: unavailable, num_retries: 3}", "virtual_hosts[0].routes[0].route.retry_polcy", `did you mean "retry_policy"?`, findingUnknownField},
	} {
		doc := rcYAML + tc.yaml + "\n"
		rep := check(t, meshYAML(t, "rc.yaml", doc), Options{Owner: policy.OwnerMesh})
		f := findingsOf(rep, tc.kind)
		if len(f) != 1 || f[0].Path != tc.path || f[0].Object != "RouteConfiguration orders-routes" || !strings.Contains(f[0].Message, tc.want) {
			t.Errorf("%s: %v\n%s", name, f, doc)
		}
	}
}

// TestEnvoyHedgeAndTyped: what is counted of hedging and of a typed retry
// config. With hedge_on_per_try_timeout a per-try timeout sends a retry
// while the first attempt stays in flight (Envoy's HedgePolicy docs): a
// condition under which the call may have run; the count stays
// num_retries+1. A retry_policy_typed_config holding a RetryPolicy is
// counted with retry_policy, the worst of the two.
func TestEnvoyHedgeAndTyped(t *testing.T) {
	t.Parallel()
	hedged := rcYAML + "      retry_policy: {retry_on: connect-failure, num_retries: 2, per_try_timeout: 0.5s}\n  hedge_policy: {hedge_on_per_try_timeout: true}\n"
	rep := check(t, meshYAML(t, "hedge.yaml", hedged), Options{Owner: policy.OwnerMesh})
	wantAttempts(t, rep, create, map[Layer]string{layerEnvoy: "3"})
	if f := finding(t, rep, findingRetryNonIdempotent, create); !slices.Equal(f.Conditions, []string{hedgedCondition}) {
		t.Errorf("conditions %q", f.Conditions)
	}
	// Without a per-try timeout hedging changes nothing.
	rep = check(t, meshYAML(t, "hedge.yaml", strings.Replace(hedged, ", per_try_timeout: 0.5s", "", 1)), Options{Owner: policy.OwnerMesh})
	if slices.Contains(keys(rep.Findings), "retry-non-idempotent "+create+" @envoy") {
		t.Errorf("findings %q", keys(rep.Findings))
	}
	typed := rcYAML + "      retry_policy: {retry_on: unavailable, num_retries: 1}\n      retry_policy_typed_config:\n        \"@type\": type.googleapis.com/envoy.config.route.v3.RetryPolicy\n        retry_on: 5xx\n        num_retries: 4\n"
	rep = check(t, meshYAML(t, "typed.yaml", typed), Options{Owner: policy.OwnerMesh})
	wantAttempts(t, rep, get, map[Layer]string{layerEnvoy: "5"})
	if f := findingsOf(rep, findingNotUnderstood); len(f) != 1 || !strings.Contains(f[0].Message, "not implemented") {
		t.Errorf("typed: %v", f)
	}
	// grpc-go ignores hedging, mirrors and typed retry configs.
	var c Config
	c.AddXDS("x.yaml", []byte(strings.Replace(hedged, "connect-failure", "unavailable", 1)+"  request_mirror_policies: [{cluster: audit}]\n"))
	got := keys(check(t, &c, Options{Owner: policy.OwnerMesh}).Findings)
	if n := strings.Count(strings.Join(got, " "), "ignored-by-grpc @xds"); n != 3 {
		t.Errorf("xds findings %q", got)
	}
}

// TestEnvoyStatusCodes: retriable-status-codes without
// retriable_status_codes retries no status code (Envoy's router filter
// docs: "retriable-status-codes: Envoy will attempt a retry if the upstream
// server responds with any response code matching one defined in either
// the retry policy or in the x-envoy-retriable-status-codes header").
func TestEnvoyStatusCodes(t *testing.T) {
	t.Parallel()
	rep := check(t, meshYAML(t, "codes.yaml", rcYAML+"      retry_policy: {retry_on: retriable-status-codes, num_retries: 3}\n"), Options{Owner: policy.OwnerMesh})
	wantAttempts(t, rep, get, map[Layer]string{layerEnvoy: "1"})
	if f := findingsOf(rep, findingInvalidValue); len(f) != 1 || !strings.Contains(f[0].Message, "retries no status code") {
		t.Errorf("findings %v", f)
	}
	rep = check(t, meshYAML(t, "codes.yaml", rcYAML+"      retry_policy: {retry_on: retriable-status-codes, num_retries: 3, retriable_status_codes: [503]}\n"), Options{Owner: policy.OwnerMesh})
	wantAttempts(t, rep, get, map[Layer]string{layerEnvoy: "4"})
}

// TestEnvoyWeightedBudget: a route to weighted clusters is bounded only if
// each cluster's circuit breaker bounds it.
func TestEnvoyWeightedBudget(t *testing.T) {
	t.Parallel()
	doc := strings.Replace(rcYAML, "      cluster: orders\n", "      weighted_clusters: {clusters: [{name: orders, weight: 90}, {name: canary, weight: 10}]}\n      retry_policy: {retry_on: unavailable, num_retries: 2}\n", 1) +
		"---\n\"@type\": type.googleapis.com/envoy.config.cluster.v3.Cluster\nname: canary\ncircuit_breakers: {thresholds: [{max_retries: 4294967295}]}\n"
	rep := check(t, meshYAML(t, "w.yaml", doc), Options{Owner: policy.OwnerMesh})
	if f := finding(t, rep, findingNoBudget, get); !strings.Contains(f.Message, "Cluster canary") {
		t.Errorf("no-budget %s", f)
	}
}
