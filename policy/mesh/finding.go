package mesh

import (
	"encoding/json"
	"strconv"
	"strings"
)

// FindingKind is a stable, machine-readable name for a kind of problem Check
// reports. The string values do not change between releases (the
// repository's docs/retry-ownership.md lists them); where a
// problem is the one policy/serviceconfig reports for a service config, the
// name is the same.
type FindingKind string

// Finding kinds.
const (
	// findingSyntax: a document that is not valid YAML or JSON, or not an
	// object.
	findingSyntax FindingKind = "syntax"
	// findingUnknownKind: a document of a kind the checker does not read. It
	// is reported so that nothing is ignored silently.
	findingUnknownKind FindingKind = "unknown-kind"
	// findingInvalidResource: a resource the platform's own validation
	// rejects (an Istio VirtualService HTTP route with no route, redirect or
	// directResponse, say). The platform does not apply it, so its defaults
	// stay in force; Check counts the defaults, not what the resource says.
	findingInvalidResource FindingKind = "invalid-resource"
	// findingNotUnderstood: a kind, field or value that may change how a
	// layer retries and that the checker does not model (an EnvoyFilter, an
	// Envoy hedge_policy, routes a Listener takes from RDS). The attempts
	// reported for the layer may be too low; the finding names the file,
	// the resource and the field path so that a person can judge it.
	findingNotUnderstood FindingKind = "not-understood"
	// findingUnknownField: a key in a retry policy or budget that the
	// product does not know (a misspelling, such as "retryon"); the product
	// ignores it or rejects the resource.
	findingUnknownField FindingKind = "unknown-field"
	// findingInvalidValue: a value the product rejects or reads differently
	// than written (a negative count, a malformed duration or regular
	// expression, an annotation on a resource where it is not valid).
	findingInvalidValue FindingKind = "invalid-value"
	// findingUnknownCondition: a retry condition the product does not know;
	// it is ignored.
	findingUnknownCondition FindingKind = "unknown-condition"
	// findingIgnoredByGRPC: a retry setting an xds:/// channel's grpc-go
	// ignores (retry_on conditions other than the five gRPC codes,
	// per_try_timeout, retriable_status_codes…).
	findingIgnoredByGRPC FindingKind = "ignored-by-grpc"
	// findingMaxAttemptsClamped: more than 5 attempts on an xds:/// channel;
	// grpc-go clamps them to 5 silently.
	findingMaxAttemptsClamped FindingKind = "max-attempts-clamped"
	// findingOverridden: retry configuration that another resource
	// replaces entirely (Linkerd retry annotations on a Service that has a
	// ServiceProfile).
	findingOverridden FindingKind = "overridden"
	// findingSecondOwner: a layer that is not the channel's retry owner
	// retries the method (the mesh while the owner is the application or
	// the service config; anyone when the owner is none; two mesh layers at
	// once). Their attempts multiply.
	findingSecondOwner FindingKind = "second-owner"
	// findingRetryNonIdempotent: the mesh retries a non-idempotent method
	// on a condition under which the call may have run.
	findingRetryNonIdempotent FindingKind = "retry-non-idempotent"
	// findingRetryKeyedWithoutLedger: the mesh retries a keyed method that
	// has no durable ledger behind it, on a condition under which the call
	// may have run.
	findingRetryKeyedWithoutLedger FindingKind = "retry-keyed-without-ledger"
	// findingNoBudget: a layer retries the method without a retry budget,
	// including Istio's default maxRetries of 4294967295 and every
	// proxyless xDS retry policy.
	findingNoBudget FindingKind = "no-budget"
	// findingRouteMatchesNothing: a route that matches no method of the
	// catalog (a renamed or misspelled method, a wrong prefix or
	// regular expression).
	findingRouteMatchesNothing FindingKind = "route-matches-nothing"
	// findingMethodNotCovered: a catalog method that no route of a route
	// table matches (typically renamed): the proxy answers it with an error,
	// or a catch-all it was not meant for applies.
	findingMethodNotCovered FindingKind = "method-not-covered"
	// findingServiceConfigReplaced: the channel dials xds:///, so the
	// service config the kit generates is replaced by the xDS resolver's.
	findingServiceConfigReplaced FindingKind = "service-config-replaced"
)

// Finding is one problem Check found.
type Finding struct {
	// Kind is the stable kind of problem.
	Kind FindingKind `json:"kind"`
	// File is the name the configuration was read under; "" for a finding
	// that no file caused (a product's default).
	File string `json:"file,omitempty"`
	// Document is the 1-based number of the document in File (YAML
	// documents, List items and DiscoveryResponse resources count); 0 when
	// no document is involved.
	Document int `json:"document,omitempty"`
	// Object names the resource: "VirtualService shop/orders",
	// "RouteConfiguration payments-routes", "Istio defaults".
	Object string `json:"object,omitempty"`
	// Path locates the problem inside the object, such as
	// "spec.http[1].retries.retryOn".
	Path string `json:"path,omitempty"`
	// Layer is the retrying layer concerned, when there is one.
	Layer Layer `json:"layer,omitempty"`
	// Method is the catalog method (/pkg.Service/Method) the finding is
	// about; "" for a finding about a route or a document.
	Method string `json:"method,omitempty"`
	// Conditions lists the retry conditions involved, exactly as the
	// product names them.
	Conditions []string `json:"conditions,omitempty"`
	// Message explains the problem.
	Message string `json:"message"`
	// Fix says how to fix it.
	Fix string `json:"fix,omitempty"`
}

// String formats the finding on one line, without the file name:
// `kind: object (document N) path method "…": message; fix: …`.
func (f Finding) String() string {
	var b strings.Builder
	b.WriteString(string(f.Kind))
	b.WriteString(": ")
	where := make([]string, 0, 4)
	if f.Object != "" {
		where = append(where, f.Object)
	}
	if f.Document > 0 {
		where = append(where, "(document "+strconv.Itoa(f.Document)+")")
	}
	if f.Path != "" {
		where = append(where, f.Path)
	}
	if f.Method != "" {
		where = append(where, "method "+strconv.Quote(f.Method))
	}
	if len(where) == 0 {
		where = append(where, "(configuration)")
	}
	b.WriteString(strings.Join(where, " "))
	b.WriteString(": ")
	b.WriteString(f.Message)
	if f.Fix != "" {
		b.WriteString("; fix: ")
		b.WriteString(f.Fix)
	}
	return b.String()
}

// Layer names a layer that retries calls: "application",
// "service-config", "istio", "envoy", "linkerd", "gateway-api" or "xds".
type Layer string

// The layers. Application and service config are the channel's own; the
// others are the third layer.
const (
	// layerApplication: the kit's client interceptor.
	layerApplication Layer = "application"
	// layerServiceConfig: grpc-go, from the channel's service config.
	layerServiceConfig Layer = "service-config"
	// layerIstio: Istio's sidecars and gateways (Envoy configured from
	// VirtualService, DestinationRule and the mesh config).
	layerIstio Layer = "istio"
	// layerEnvoy: an Envoy proxy configured directly (RouteConfiguration).
	layerEnvoy Layer = "envoy"
	// layerLinkerd: Linkerd's proxies (ServiceProfile or retry.linkerd.io
	// annotations).
	layerLinkerd Layer = "linkerd"
	// layerGatewayAPI: the implementation of a Gateway API HTTPRoute's
	// retry field.
	layerGatewayAPI Layer = "gateway-api"
	// layerXDS: grpc-go itself on an xds:/// channel, as the control
	// plane's RouteConfiguration says (proxyless gRPC).
	layerXDS Layer = "xds"
)

// meshLayers lists the third-layer layers in report order.
var meshLayers = []Layer{layerIstio, layerEnvoy, layerLinkerd, layerGatewayAPI, layerXDS}

// Attempts counts the requests one call can make at a layer, the first
// included: 1 means no retries. Unbounded means the layer retries until a
// timeout or its budget stops it (a Linkerd ServiceProfile).
type Attempts struct {
	// N is the number of attempts when Unbounded is false.
	N int
	// Unbounded reports that no count limits the attempts.
	Unbounded bool
}

// One is a layer that does not retry.
var one = Attempts{N: 1}

// String returns the count, or "unbounded".
func (a Attempts) String() string {
	if a.Unbounded {
		return "unbounded"
	}
	return strconv.Itoa(a.N)
}

// text writes "1 attempt", "3 attempts" or "unbounded attempts".
func (a Attempts) text() string {
	if a.N == 1 && !a.Unbounded {
		return "1 attempt"
	}
	return a.String() + " attempts"
}

// retries reports whether the layer makes more than one attempt.
func (a Attempts) retries() bool { return a.Unbounded || a.N > 1 }

// times multiplies two layers' attempts.
func (a Attempts) times(b Attempts) Attempts {
	if a.Unbounded || b.Unbounded {
		return Attempts{Unbounded: true}
	}
	const limit = 1 << 30 // no realistic product comes near; keeps it from overflowing
	n := a.N * b.N
	if a.N != 0 && (n/a.N != b.N || n > limit) {
		n = limit
	}
	return Attempts{N: n}
}

// more reports whether a allows more attempts than b.
func (a Attempts) more(b Attempts) bool {
	if a.Unbounded || b.Unbounded {
		return a.Unbounded && !b.Unbounded
	}
	return a.N > b.N
}

// MarshalJSON writes the count as a number, or the string "unbounded".
func (a Attempts) MarshalJSON() ([]byte, error) {
	if a.Unbounded {
		return []byte(`"unbounded"`), nil
	}
	return []byte(strconv.Itoa(a.N)), nil
}

// UnmarshalJSON reads what MarshalJSON writes.
func (a *Attempts) UnmarshalJSON(b []byte) error {
	var s string
	if json.Unmarshal(b, &s) == nil && s == "unbounded" {
		*a = Attempts{Unbounded: true}
		return nil
	}
	var n int
	if err := json.Unmarshal(b, &n); err != nil {
		return err
	}
	*a = Attempts{N: n}
	return nil
}
