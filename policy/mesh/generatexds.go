package mesh

import (
	"encoding/json"
	"fmt"
	"strings"
	"unicode"

	"github.com/opledger/opledger/policy"
)

// XDSOptions shape the RouteConfiguration GenerateXDS writes for a
// proxyless channel (xds:///Name) whose retry owner is the mesh, that is,
// the control plane.
type XDSOptions struct {
	// Name is the target's name: the channel dials xds:///Name, and the
	// virtual host's domain is Name. Required.
	Name string
	// Cluster is the cluster every route sends to. Required.
	Cluster string
	// RouteConfiguration is the RouteConfiguration's name, the one the
	// listener's RDS asks for; default: Name.
	RouteConfiguration string
}

// xdsNumRetries is the retries GenerateXDS writes: one. grpc-go applies no
// retry budget to a control plane's policy, so the count is the only
// bound, and Check accepts one retry (at most two requests per call) as
// that bound.
const xdsNumRetries = 1

// xdsBackOff is grpc-go's default backoff, written out: 25 ms doubling to
// 250 ms.
var xdsBackOff = map[string]any{"baseInterval": "0.025s", "maxInterval": "0.250s"}

func (o XDSOptions) check() error {
	for _, f := range []struct{ name, v string }{{"Name", o.Name}, {"Cluster", o.Cluster}, {"RouteConfiguration", o.RouteConfiguration}} {
		if f.v == "" && f.name != "RouteConfiguration" {
			return fmt.Errorf("%w: XDSOptions.%s is required", policy.ErrInvalidConfig, f.name)
		}
		if len(f.v) > 253 || strings.IndexFunc(f.v, func(r rune) bool { return unicode.IsSpace(r) || !unicode.IsPrint(r) || r == '/' }) >= 0 {
			return fmt.Errorf("%w: XDSOptions.%s %q is not a name", policy.ErrInvalidConfig, f.name, truncate(f.v))
		}
	}
	return nil
}

// GenerateXDS writes, as protojson (camelCase, no "@type"; what a control
// plane built with go-control-plane reads with protojson.Unmarshal), the
// RouteConfiguration a control plane serves to a proxyless channel whose
// retry owner is the mesh: one virtual host for Name; one route per
// catalog method, matched by its exact path, to Cluster; the retryable
// methods (no side effects, idempotent, keyed with a durable ledger)
// retry once on unavailable (num_retries 1, grpc-go's default backoff
// written out), every other method has no retry_policy, and a final
// catch-all route (prefix "/", for a method added later) none either. The
// virtual host has no retry_policy, so nothing else retries.
//
// One retry, because a proxyless channel has no retry budget (grpc-go
// applies no retry throttling to the control plane's policies): the count
// is the only bound, and Check accepts one retry as that bound for the
// owner mesh. Dial the channel with grpcint's WithTarget so that its
// DialOptions leave these retries on. Errors wrap policy.ErrInvalidConfig.
func GenerateXDS(cat *policy.Catalog, opts XDSOptions) ([]byte, error) {
	if err := opts.check(); err != nil {
		return nil, err
	}
	if opts.RouteConfiguration == "" {
		opts.RouteConfiguration = opts.Name
	}
	var routes []any
	for _, p := range cat.Methods() {
		action := map[string]any{"cluster": opts.Cluster}
		if retryable(p) {
			action["retryPolicy"] = map[string]any{"retryOn": "unavailable", "numRetries": xdsNumRetries, "retryBackOff": xdsBackOff}
		}
		routes = append(routes, map[string]any{"name": routeName(p.FullMethod), "match": map[string]any{"path": p.FullMethod}, "route": action})
	}
	routes = append(routes, map[string]any{"name": "not-in-the-catalog", "match": map[string]any{"prefix": "/"},
		"route": map[string]any{"cluster": opts.Cluster}})
	rc := map[string]any{
		"name": opts.RouteConfiguration,
		"virtualHosts": []any{map[string]any{
			"name":    opts.Name,
			"domains": []any{opts.Name},
			"routes":  routes,
		}},
	}
	b, err := json.MarshalIndent(rc, "", "  ")
	if err != nil {
		return nil, fmt.Errorf("mesh: marshalling JSON: %w", err)
	}
	return append(b, '\n'), nil
}
