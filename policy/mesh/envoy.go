package mesh

import (
	"fmt"
	"strings"
)

// grpcMaxAttempts is grpc-go's default cap on the attempts of one call;
// an xDS retry policy's num_retries+1 above it is clamped to it.
const grpcMaxAttempts = 5

// envoyDefaultMaxRetries is the max_retries circuit breaker of an Envoy
// cluster that sets none: at most 3 retries in flight to the cluster.
const envoyDefaultMaxRetries = 3

// envoyRetry is an Envoy RetryPolicy.
type envoyRetry struct {
	loc        location
	retryOn    []string // known conditions as written
	numRetries int64
	codes      []int64
	numSet     bool     // num_retries is set (to a valid number)
	onSet      bool     // retry_on is set (not empty)
	perTry     bool     // per_try_timeout is set
	headers    bool     // retriable_headers lists some
	ignored    []string // fields set that grpc-go ignores
	rejected   bool     // grpc-go NACKs the resource because of this policy
}

type routeConfig struct {
	loc    location
	name   string
	layer  Layer
	vhosts []*vhost
}

type vhost struct {
	loc     location
	name    string
	domains []string
	retry   *envoyRetry
	typed   *envoyRetry // retry_policy_typed_config holding a RetryPolicy
	hedge   *hedgePolicy
	routes  []envoyRoute
}

type envoyRoute struct {
	loc      location
	name     string
	match    matcher
	retry    *envoyRetry
	typed    *envoyRetry
	hedge    *hedgePolicy
	forwards bool     // a route action (not a redirect or direct response)
	clusters []string // the clusters it sends to
	// anyCluster: the cluster is picked per request (cluster_header, a
	// cluster specifier plugin).
	anyCluster bool
}

// hedgePolicy is a HedgePolicy: with hedge_on_per_try_timeout, a per-try
// timeout sends a retry while the first attempt stays in flight.
type hedgePolicy struct {
	loc      location
	onPerTry bool
}

// rdsRef is an HttpConnectionManager that takes its routes from RDS.
type rdsRef struct {
	loc   location
	name  string // rds.route_config_name
	layer Layer
}

type envoyCluster struct {
	name   string
	budget string
	why    string
}

// envoyRetryFields are a RetryPolicy's fields (proto names).
var envoyRetryFields = []string{"retry_on", "num_retries", "per_try_timeout", "per_try_idle_timeout", "retry_priority",
	"retry_host_predicate", "retry_options_predicates", "host_selection_retry_max_attempts", "retriable_status_codes",
	"retry_back_off", "rate_limited_retry_back_off", "retriable_headers", "retriable_request_headers", "refresh_cluster_on_retry"}

// grpcReadsRetryFields are the ones grpc-go reads on an xds:/// channel.
var grpcReadsRetryFields = []string{"retry_on", "num_retries", "retry_back_off"}

// v2Types are the v2 API's names of the resources read; the v2 API was
// removed in Envoy 1.18, and grpc-go reads v3 only.
var v2Types = map[string]string{
	"envoy.api.v2.RouteConfiguration": "envoy.config.route.v3.RouteConfiguration",
	"envoy.api.v2.Listener":           "envoy.config.listener.v3.Listener",
	"envoy.config.filter.network.http_connection_manager.v2.HttpConnectionManager": "envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager",
	"envoy.api.v2.Cluster":                "envoy.config.cluster.v3.Cluster",
	"envoy.api.v2.ClusterLoadAssignment":  "envoy.config.endpoint.v3.ClusterLoadAssignment",
	"envoy.api.v2.DiscoveryResponse":      "envoy.service.discovery.v3.DiscoveryResponse",
	"envoy.config.bootstrap.v2.Bootstrap": "envoy.config.bootstrap.v3.Bootstrap",
}

func layerOf(xds bool) Layer {
	if xds {
		return layerXDS
	}
	return layerEnvoy
}

func (c *Config) envoyTyped(loc location, o obj, typ string, xds bool) {
	name := typ[strings.LastIndex(typ, "/")+1:]
	layer := layerOf(xds)
	if v3, ok := v2Types[name]; ok {
		c.add(loc.at(joinPath(o.path, "@type")).finding(findingInvalidValue, layer,
			fmt.Sprintf("%s is of Envoy's v2 API, which Envoy removed in 1.18 (and grpc-go's xDS client reads v3 only): a current proxy rejects it; it is read as the %s of the same shape", truncate(name), v3),
			"convert it to the v3 API"))
		name = v3
	}
	switch name {
	case "envoy.config.route.v3.RouteConfiguration":
		c.readRouteConfiguration(loc, o, xds)
	case "envoy.config.listener.v3.Listener":
		c.readListener(loc, o, xds)
	case "envoy.config.bootstrap.v3.Bootstrap":
		c.readBootstrap(loc, o, xds)
	case "envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager":
		c.readHCM(loc, o, xds)
	case "envoy.config.cluster.v3.Cluster":
		c.readCluster(loc, o, xds)
	case "envoy.config.endpoint.v3.ClusterLoadAssignment":
		// Endpoints say nothing about retries.
	case "envoy.service.discovery.v3.DiscoveryResponse":
		res, paths := o.list("resources")
		for i, r := range res {
			c.value(loc.at(paths[i]), r, xds, 1)
		}
	default:
		c.add(loc.at(o.path).finding(findingUnknownKind, layer, fmt.Sprintf("@type %q is not read (RouteConfiguration, Listener, HttpConnectionManager, Cluster, Bootstrap and DiscoveryResponse of the v3 API are)", truncate(typ)),
			"remove it from the input, or convert it to the v3 API"))
	}
}

func (c *Config) readBootstrap(loc location, o obj, xds bool) {
	if loc.object == "" {
		loc.object = "Bootstrap"
	}
	if dr, ok := o.child("dynamic_resources"); ok {
		var from []string
		for _, k := range []string{"lds_config", "lds_resources_locator", "cds_config", "cds_resources_locator", "ads_config"} {
			if has(dr, k) {
				from = append(from, k)
			}
		}
		if len(from) > 0 {
			c.add(loc.at(dr.path).finding(findingNotUnderstood, layerOf(xds),
				fmt.Sprintf("the bootstrap takes listeners, routes or clusters from a management server (dynamic_resources %s); what it serves is not in the input, so its retries and circuit breakers are not counted", strings.Join(from, ", ")),
				"pass the Listener, RouteConfiguration and Cluster resources it serves too (an admin /config_dump holds them)"))
		}
	}
	sr, ok := o.child("static_resources")
	if !ok {
		return
	}
	ls, paths := sr.list("listeners")
	for i, l := range ls {
		if lo, ok := asObj(l, paths[i]); ok {
			c.readListener(loc, lo, xds)
		}
	}
	cs, cpaths := sr.list("clusters")
	for i, cl := range cs {
		if co, ok := asObj(cl, cpaths[i]); ok {
			c.readCluster(loc, co, xds)
		}
	}
}

func (c *Config) readListener(loc location, o obj, xds bool) {
	name, _ := o.str("name")
	if loc.object == "" || strings.HasPrefix(loc.object, "Listener") {
		loc.object = "Listener " + truncate(name)
	}
	if al, ok := o.child("api_listener"); ok {
		if hcm, ok := al.child("api_listener"); ok {
			c.readHCM(loc, hcm, xds)
		}
	}
	chains, paths := o.list("filter_chains")
	if dc, ok := o.child("default_filter_chain"); ok {
		chains = append(append([]any(nil), chains...), dc.m)
		paths = append(append([]string(nil), paths...), dc.path)
	}
	for i, ch := range chains {
		co, ok := asObj(ch, paths[i])
		if !ok {
			continue
		}
		filters, fpaths := co.list("filters")
		for j, f := range filters {
			if fo, ok := asObj(f, fpaths[j]); ok {
				c.readNetworkFilter(loc, fo, xds)
			}
		}
	}
}
