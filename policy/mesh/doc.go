// Package mesh reads the retry configuration of the third layer — a service
// mesh or proxyless gRPC with xDS — and checks it against a channel's retry
// owner (policy.RetryOwner) and method catalog (policy.Catalog), before
// deploy. Read the configuration into a [Config] ([Config.AddMesh],
// [Config.AddXDS]) and check it with [Check]; write the mesh side with
// [GenerateIstio], [GenerateLinkerd] or [GenerateXDS].
//
// Three layers can retry one gRPC call: the application, the channel's
// service config and the mesh. Their attempts multiply, and the mesh retries
// by default: Istio retries every route twice (meshConfig.defaultHttpRetryPolicy:
// attempts 2 on connect-failure,refused-stream,unavailable,cancelled,
// retriable-status-codes, with no status code listed since Istio 1.24)
// unless told otherwise.
//
// [Config] reads the formats below from YAML (one or several documents) or
// JSON; a document of a kind it does not read is reported, never ignored:
//
//   - Istio: VirtualService (networking.istio.io/v1, v1beta1, v1alpha3)
//     spec.http[].match and spec.http[].retries; DestinationRule
//     trafficPolicy.connectionPool.http.maxRetries and
//     trafficPolicy.retryBudget (and a subset's); the mesh config's
//     defaultHttpRetryPolicy (an IstioOperator's spec.meshConfig, the istio
//     ConfigMap's data.mesh, a Helm values file's meshConfig, or a bare
//     MeshConfig), with Istio's defaults where nothing is set. A resource
//     Istio's validation rejects is not applied: it is an invalid-resource
//     finding and the defaults count. spec.gateways and exportTo scope a
//     VirtualService; DestinationRule portLevelSettings and subsets merge
//     as pilot merges them; an EnvoyFilter that MERGEs a retry_policy into
//     outbound routes is read, any other patch is not-understood.
//   - Envoy: RouteConfiguration, a Listener or a bootstrap's static
//     listeners with an inline route_config (or the RouteConfiguration its
//     RDS names, when the input holds it), VirtualHost.retry_policy and
//     RouteAction.retry_policy (a route's replaces its host's),
//     hedge_on_per_try_timeout, and a Cluster's circuit_breakers
//     (max_retries, retry_budget), in protojson form (camelCase or
//     snake_case field names, "@type" Any wrappers, a DiscoveryResponse's
//     resources). What may change retries and is not modelled (routes from a
//     management server, mirrors, retry extensions) is not-understood.
//   - Linkerd: ServiceProfile (linkerd.io/v1alpha2) spec.routes[] with
//     condition and isRetryable, and spec.retryBudget; the 2.16+ annotations
//     retry.linkerd.io/http, retry.linkerd.io/grpc, retry.linkerd.io/limit
//     and retry.linkerd.io/timeout on a Service, HTTPRoute or GRPCRoute, as
//     Linkerd's policy controller parses and applies them (a ServiceProfile
//     for the Service overrides them).
//   - Gateway API: HTTPRoute and GRPCRoute (and Linkerd's policy.linkerd.io
//     HTTPRoute) with the API server's validation, their matches ranked by
//     the specification's precedence, HTTPRoute spec.rules[].retry {codes,
//     attempts, backoff}; Envoy Gateway's BackendTrafficPolicy retry and
//     circuitBreaker; XBackendTrafficPolicy retryConstraint (GEP-3388).
//   - Proxyless gRPC with xDS (gRFC A44), read with [Config.AddXDS]: the
//     RouteConfiguration a control plane serves to an xds:/// channel, with
//     grpc-go's reading of it: num_retries+1 attempts capped at 5, only the
//     five gRPC retry_on conditions, retry_back_off, and no retry budget.
//     The service config the kit generates is replaced on such a channel.
//
// [Check] matches every route to the catalog's methods (gRPC paths
// /pkg.Service/Method, prefixes, regular expressions, GRPCRoute method
// matches) and reports, per method and owner, a [Finding] of a stable
// [FindingKind]: a second retry owner, mesh retries of a method that is not
// safe to repeat, retries without a budget, routes that match no method and
// methods that no route covers (a rename), what the platform would reject
// (invalid-resource) or the checker does not model (not-understood: never a
// silent "no retries"), and the replaced service config
// of an xds:/// channel. Its [Report] also gives the amplification of every
// method: the product of the attempts of each layer. [GenerateIstio] and
// [GenerateLinkerd] write the mesh side for a channel whose owner is the
// mesh, in a form Check accepts.
//
// The package parses YAML with sigs.k8s.io/yaml and everything else with
// its own code: it does not import Envoy's or Istio's generated types. It
// keeps no global mutable state, logs nothing, never panics on bad input,
// and returns errors wrapping policy.ErrInvalidOwner or
// policy.ErrInvalidConfig.
package mesh
