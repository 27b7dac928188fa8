package mesh

import (
	"fmt"
	"strings"
)

// Fields of Envoy's route configuration messages (proto names; the JSON
// names are read too), from envoy/config/route/v3/route.proto and
// route_components.proto.
var (
	envoyRouteConfigFields = []string{"name", "virtual_hosts", "vhds", "internal_only_headers", "response_headers_to_add",
		"response_headers_to_remove", "request_headers_to_add", "request_headers_to_remove", "most_specific_header_mutations_wins",
		"validate_clusters", "max_direct_response_body_size_bytes", "cluster_specifier_plugins", "request_mirror_policies",
		"ignore_port_in_host_matching", "vhost_header", "ignore_path_parameters_in_path_matching", "typed_per_filter_config",
		"metadata", "route_specifiers", "@type"}
	envoyVirtualHostFields = []string{"name", "domains", "routes", "matcher", "require_tls", "virtual_clusters", "rate_limits",
		"request_headers_to_add", "request_headers_to_remove", "response_headers_to_add", "response_headers_to_remove", "cors",
		"typed_per_filter_config", "include_request_attempt_count", "include_attempt_count_in_response", "retry_policy",
		"retry_policy_typed_config", "hedge_policy", "include_is_timeout_retry_header", "per_request_buffer_limit_bytes",
		"request_body_buffer_limit", "request_mirror_policies", "metadata", "route_specifiers"}
	envoyRouteFields = []string{"name", "match", "route", "redirect", "direct_response", "filter_action", "non_forwarding_action",
		"metadata", "decorator", "typed_per_filter_config", "request_headers_to_add", "request_headers_to_remove",
		"response_headers_to_add", "response_headers_to_remove", "tracing", "per_request_buffer_limit_bytes", "stat_prefix",
		"request_body_buffer_limit", "route_specifiers"}
	envoyRouteActionFields = []string{"cluster", "cluster_header", "weighted_clusters", "cluster_specifier_plugin",
		"inline_cluster_specifier_plugin", "cluster_not_found_response_code", "metadata_match", "prefix_rewrite", "regex_rewrite",
		"path_rewrite_policy", "path_rewrite", "host_rewrite_literal", "auto_host_rewrite", "host_rewrite_header",
		"host_rewrite_path_regex", "append_x_forwarded_host", "timeout", "idle_timeout", "flush_timeout", "early_data_policy",
		"retry_policy", "retry_policy_typed_config", "request_mirror_policies", "priority", "rate_limits", "include_vh_rate_limits",
		"hash_policy", "cors", "max_grpc_timeout", "grpc_timeout_offset", "upgrade_configs", "internal_redirect_policy",
		"internal_redirect_action", "max_internal_redirects", "hedge_policy", "max_stream_duration"}
	envoyHedgeFields = []string{"initial_requests", "additional_request_chance", "hedge_on_per_try_timeout"}
)

// envoyHarmlessFilters are network filters that route no HTTP request (so
// retry none): parts of their names.
var envoyHarmlessFilters = []string{"tcp_proxy", "rbac", "ext_authz", "ratelimit", "connection_limit", "client_ssl_auth", "echo",
	"direct_response", "sni_cluster", "sni_dynamic_forward_proxy", "mongo_proxy", "mysql_proxy", "postgres_proxy",
	"zookeeper_proxy", "kafka_broker", "set_filter_state", "metadata_exchange", "istio.stats", "network.wasm"}

// readNetworkFilter reads a listener's network filter: an
// HttpConnectionManager, typed or (v2) untyped; a filter that routes no
// HTTP request is skipped; any other is reported.
func (c *Config) readNetworkFilter(loc location, fo obj, xds bool) {
	name, _ := fo.str("name")
	layer := layerOf(xds)
	if tc, ok := fo.child("typed_config"); ok {
		typ, _ := tc.str("@type")
		if strings.HasSuffix(typ, "HttpConnectionManager") {
			if strings.Contains(typ, ".v2.") {
				c.add(loc.at(joinPath(tc.path, "@type")).finding(findingInvalidValue, layer,
					"the HttpConnectionManager is of Envoy's v2 API, which Envoy removed in 1.18 (and grpc-go reads v3 only): a current proxy rejects it; it is read as the v3 HttpConnectionManager of the same shape",
					"use type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager"))
			}
			c.readHCM(loc, tc, xds)
			return
		}
		c.otherNetworkFilter(loc.at(tc.path), name+" "+typ, layer)
		return
	}
	if cfg, ok := fo.child("config"); ok {
		if strings.HasSuffix(name, "http_connection_manager") {
			c.add(loc.at(cfg.path).finding(findingInvalidValue, layer,
				"the filter has an untyped config (Envoy's v2 API), which Envoy removed in 1.18: a current proxy rejects it and wants typed_config; it is read as the HttpConnectionManager it names, as Envoy 1.17 did",
				"write typed_config with \"@type\": type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager"))
			c.readHCM(loc, cfg, xds)
			return
		}
		c.otherNetworkFilter(loc.at(cfg.path), name, layer)
		return
	}
	if _, p, ok := fo.key("config_discovery"); ok {
		c.add(loc.at(p).finding(findingNotUnderstood, layer, fmt.Sprintf("filter %s takes its configuration from extension config discovery (ECDS), which is not in the input; if it is an HttpConnectionManager, its routes and retries are not counted", truncate(name)),
			"pass the configuration inline (typed_config)"))
		return
	}
	c.otherNetworkFilter(loc.at(fo.path), name, layer)
}

// otherNetworkFilter reports a network filter that is not an
// HttpConnectionManager unless it is known to route no HTTP request.
func (c *Config) otherNetworkFilter(at location, what string, layer Layer) {
	lw := strings.ToLower(what)
	for _, h := range envoyHarmlessFilters {
		if strings.Contains(lw, h) {
			return
		}
	}
	c.add(at.finding(findingNotUnderstood, layer, fmt.Sprintf("network filter %s is not an HttpConnectionManager; if it routes requests (thrift_proxy, dubbo_proxy, generic_proxy…) its retries are not counted", truncate(strings.TrimSpace(what))),
		"check its retry settings by hand"))
}

// readHCM reads an HttpConnectionManager's routes: an inline route_config,
// or the name of the RouteConfiguration it takes from RDS (Check reports it
// unless that RouteConfiguration is in the input); scoped routes are
// reported.
func (c *Config) readHCM(loc location, o obj, xds bool) {
	if rc, ok := o.child("route_config"); ok {
		c.readRouteConfiguration(loc, rc, xds)
		return
	}
	if rds, ok := o.child("rds"); ok {
		name, _ := rds.str("route_config_name")
		c.rdsRefs = append(c.rdsRefs, rdsRef{loc: loc.at(rds.path), name: name, layer: layerOf(xds)})
		return
	}
	if _, p, ok := o.key("scoped_routes"); ok {
		c.add(loc.at(p).finding(findingNotUnderstood, layerOf(xds), "the HttpConnectionManager picks its route table per request (scoped_routes, SRDS); those route tables are not read, so their retries are not counted",
			"pass the RouteConfigurations the scopes name, and check them one by one"))
	}
}

// unresolvedRDS reports the HttpConnectionManagers of a layer whose
// RouteConfiguration (taken from RDS) is not in the input.
func (c *Config) unresolvedRDS(layer Layer, rcs []*routeConfig) {
	for _, ref := range c.rdsRefs {
		if ref.layer != layer {
			continue
		}
		found := false
		for _, rc := range rcs {
			found = found || rc.name == ref.name
		}
		if !found {
			c.add(ref.loc.finding(findingNotUnderstood, layer,
				fmt.Sprintf("the HttpConnectionManager takes its routes from RDS (route_config_name %q), and no RouteConfiguration of that name is in the input: its routes and retries are not read", truncate(ref.name)),
				"pass the RouteConfiguration the management server serves under that name too (an admin /config_dump holds it)"))
		}
	}
}

func (c *Config) readRouteConfiguration(loc location, o obj, xds bool) {
	name, _ := o.str("name")
	layer := layerOf(xds)
	rcLoc := loc
	if rcLoc.object == "" {
		rcLoc.object = "RouteConfiguration " + truncate(name)
	} else if name != "" {
		rcLoc.object += " RouteConfiguration " + truncate(name)
	}
	c.unknownEnvoyFields(rcLoc, o, "RouteConfiguration", envoyRouteConfigFields, layer)
	c.notModelled(rcLoc, o, layer, "vhds", "request_mirror_policies", "route_specifiers")
	c.envoyRetryHeaders(rcLoc, o, layer)
	rc := &routeConfig{loc: rcLoc.at(o.path), name: name, layer: layer}
	vhs, paths := o.list("virtual_hosts")
	for i, v := range vhs {
		if vo, ok := asObj(v, paths[i]); ok {
			rc.vhosts = append(rc.vhosts, c.readVirtualHost(rcLoc, vo, layer))
		}
	}
	if layer == layerXDS {
		c.xdsRoutes = append(c.xdsRoutes, rc)
	} else {
		c.envoyRoutes = append(c.envoyRoutes, rc)
	}
}

func (c *Config) readVirtualHost(rcLoc location, vo obj, layer Layer) *vhost {
	vh := &vhost{loc: rcLoc.at(vo.path)}
	vh.name, _ = vo.str("name")
	ds, _ := vo.list("domains")
	for _, d := range ds {
		if s, ok := d.(string); ok {
			vh.domains = append(vh.domains, s)
		}
	}
	c.unknownEnvoyFields(rcLoc, vo, "VirtualHost", envoyVirtualHostFields, layer)
	c.notModelled(rcLoc, vo, layer, "matcher", "request_mirror_policies", "route_specifiers")
	c.envoyRetryHeaders(rcLoc, vo, layer)
	if rp, p, ok := vo.key("retry_policy"); ok {
		vh.retry = c.readEnvoyRetry(rcLoc.at(p), rp, layer)
	}
	vh.typed = c.typedRetry(rcLoc, vo, layer)
	vh.hedge = c.readHedge(rcLoc, vo, layer)
	routes, rpaths := vo.list("routes")
	for j, r := range routes {
		if ro, ok := asObj(r, rpaths[j]); ok {
			vh.routes = append(vh.routes, c.readEnvoyRoute(rcLoc, ro, layer))
		}
	}
	return vh
}

func (c *Config) readEnvoyRoute(rcLoc location, ro obj, layer Layer) envoyRoute {
	er := envoyRoute{loc: rcLoc.at(ro.path)}
	er.name, _ = ro.str("name")
	er.match = c.envoyMatch(rcLoc, ro, layer)
	c.unknownEnvoyFields(rcLoc, ro, "Route", envoyRouteFields, layer)
	c.notModelled(rcLoc, ro, layer, "route_specifiers")
	c.envoyRetryHeaders(rcLoc, ro, layer)
	ra, ok := ro.child("route")
	if !ok {
		return er
	}
	er.forwards = true
	c.unknownEnvoyFields(rcLoc, ra, "RouteAction", envoyRouteActionFields, layer)
	c.notModelled(rcLoc, ra, layer, "request_mirror_policies")
	er.clusters, er.anyCluster = routeClusters(ra)
	if rp, p, ok := ra.key("retry_policy"); ok {
		er.retry = c.readEnvoyRetry(rcLoc.at(p), rp, layer)
	}
	er.typed = c.typedRetry(rcLoc, ra, layer)
	er.hedge = c.readHedge(rcLoc, ra, layer)
	return er
}

// routeClusters returns the clusters a RouteAction sends to, or any when it
// picks one per request.
func routeClusters(ra obj) ([]string, bool) {
	if s, ok := ra.str("cluster"); ok {
		return []string{s}, false
	}
	if wc, ok := ra.child("weighted_clusters"); ok {
		var out []string
		cl, paths := wc.list("clusters")
		for i, x := range cl {
			if xo, ok := asObj(x, paths[i]); ok {
				if n, ok := xo.str("name"); ok {
					out = append(out, n)
				}
			}
		}
		return out, false
	}
	return nil, true
}

// unknownEnvoyFields reports the fields of a message that Envoy's API does
// not have: protojson refuses them, so Envoy rejects (NACKs) the resource.
func (c *Config) unknownEnvoyFields(loc location, o obj, message string, known []string, layer Layer) {
	for _, k := range o.unknownKeys(known...) {
		c.add(loc.at(joinPath(o.path, k)).finding(findingUnknownField, layer,
			fmt.Sprintf("unknown field %q in a %s%s; the proxy rejects (NACKs) the resource", truncate(k), message, didYouMean(k, known)),
			"spell it as the API does (snake_case or lowerCamelCase)"))
	}
}

// notModelled reports the fields set that can change the requests a route
// makes and that the check does not count: for Envoy they are not
// understood, grpc-go ignores them.
func (c *Config) notModelled(loc location, o obj, layer Layer, fields ...string) {
	what := map[string]string{
		"vhds":                    "virtual hosts from VHDS are not in the input, so their routes and retries are not read",
		"request_mirror_policies": "requests are mirrored: a copy of each goes to the mirror's cluster, which is not counted in the attempts (a mirror to the same service is one more request for each call)",
		"route_specifiers":        "route specifier extensions can replace the route a request gets; what they pick is not read",
		"matcher":                 "the virtual host selects routes with a matcher tree, which is not read, so its routes and retries are not counted",
	}
	for _, f := range fields {
		_, p, ok := o.key(f)
		if !ok {
			continue
		}
		if layer == layerXDS {
			c.add(loc.at(p).finding(findingIgnoredByGRPC, layer, fmt.Sprintf("grpc-go ignores %s on an xds:/// channel", f), "remove it"))
			continue
		}
		c.add(loc.at(p).finding(findingNotUnderstood, layer, what[f], "check its effect on retries by hand"))
	}
}

// envoyRetryHeaders reports request_headers_to_add entries that set one of
// Envoy's retry request headers, which change how a request is retried.
func (c *Config) envoyRetryHeaders(loc location, o obj, layer Layer) {
	list, paths := o.list("request_headers_to_add")
	if layer == layerXDS {
		return // grpc-go does not add headers
	}
	for i, e := range list {
		eo, _ := asObj(e, paths[i])
		h, _ := eo.child("header")
		if k, _ := h.str("key"); isEnvoyRetryHeader(k) {
			c.add(loc.at(paths[i]).finding(findingNotUnderstood, layer,
				fmt.Sprintf("the route configuration adds the request header %s, which tells Envoy how to retry; the check does not read header values", truncate(k)),
				"configure retries with retry_policy instead"))
		}
	}
}

// typedRetry reads retry_policy_typed_config, an extension point Envoy
// documents as not implemented ([#not-implemented-hide:]): it is reported,
// and one holding an envoy.config.route.v3.RetryPolicy is counted too, as
// taking precedence like retry_policy.
func (c *Config) typedRetry(loc location, o obj, layer Layer) *envoyRetry {
	tc, ok := o.child("retry_policy_typed_config")
	if !ok {
		return nil
	}
	if layer == layerXDS {
		c.add(loc.at(tc.path).finding(findingIgnoredByGRPC, layer, "grpc-go ignores retry_policy_typed_config on an xds:/// channel", "use retry_policy"))
		return nil
	}
	typ, _ := tc.str("@type")
	if strings.HasSuffix(typ, "envoy.config.route.v3.RetryPolicy") {
		c.add(loc.at(tc.path).finding(findingNotUnderstood, layer, "retry_policy_typed_config is an extension point Envoy documents as not implemented; the RetryPolicy it holds is counted as if it applied (the worst of it and retry_policy)",
			"use retry_policy"))
		inner := obj{m: map[string]any{}, path: tc.path}
		for k, v := range tc.m {
			if k != "@type" {
				inner.m[k] = v
			}
		}
		return c.readEnvoyRetry(loc.at(tc.path), inner.m, layer)
	}
	c.add(loc.at(tc.path).finding(findingNotUnderstood, layer, fmt.Sprintf("retry_policy_typed_config holds %s, a retry extension the check does not read; the retries it configures are not counted", describe(typ)),
		"use retry_policy, or check the extension's retries by hand"))
	return nil
}

// readHedge reads a hedge_policy: hedge_on_per_try_timeout is counted (a
// per-try timeout sends a retry while the first attempt stays in flight);
// initial_requests and additional_request_chance, which Envoy documents as
// not implemented, are reported.
func (c *Config) readHedge(loc location, o obj, layer Layer) *hedgePolicy {
	ho, ok := o.child("hedge_policy")
	if !ok {
		return nil
	}
	if layer == layerXDS {
		c.add(loc.at(ho.path).finding(findingIgnoredByGRPC, layer, "grpc-go ignores hedge_policy on an xds:/// channel (gRPC's own hedging is a service config policy)", "remove it"))
		return nil
	}
	c.unknownEnvoyFields(loc, ho, "HedgePolicy", envoyHedgeFields, layer)
	h := &hedgePolicy{loc: loc.at(ho.path)}
	if v, _, ok := ho.key("hedge_on_per_try_timeout"); ok {
		h.onPerTry, _ = boolean(v)
	}
	if v, p, ok := ho.key("initial_requests"); ok {
		if n, _ := wrappedInteger(v); n != 1 {
			c.add(loc.at(p).finding(findingNotUnderstood, layer, fmt.Sprintf("initial_requests %s: Envoy documents it as not implemented; if a proxy honours it, each call starts that many requests, which is not counted", describe(v)),
				"remove it"))
		}
	}
	if _, p, ok := ho.key("additional_request_chance"); ok {
		c.add(loc.at(p).finding(findingNotUnderstood, layer, "additional_request_chance: Envoy documents it as not implemented; if a proxy honours it, calls may start an extra request, which is not counted",
			"remove it"))
	}
	return h
}
