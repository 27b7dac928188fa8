package mesh

import (
	"bytes"
	"fmt"
	"regexp"
	"strings"

	"sigs.k8s.io/yaml"

	"github.com/opledger/opledger/policy"
)

// GenerateOptions shape the mesh configuration GenerateIstio and
// GenerateLinkerd write for a channel whose retry owner is the mesh.
type GenerateOptions struct {
	// Host is the destination service: a Kubernetes service name, short
	// ("orders"), with its namespace ("orders.shop") or full
	// ("orders.shop.svc.cluster.local"). Required.
	Host string
	// Namespace is the namespace of the resources and of a short Host;
	// default: the namespace in Host, else "default".
	Namespace string
	// Retries is the number of retries of a retryable method (Istio's
	// attempts): 1 to 4; default 2, so 3 attempts, as the service config
	// the kit generates. Linkerd's ServiceProfile has no count; its budget
	// bounds the retries.
	Retries int
	// BudgetPercent is the retry budget: Istio's retryBudget.percent (of
	// active requests) and Linkerd's retryRatio (×100, of requests);
	// default 10, the kit's own budget.
	BudgetPercent float64
}

func (o GenerateOptions) withDefaults() (GenerateOptions, string, error) {
	if strings.TrimSpace(o.Host) == "" {
		return o, "", fmt.Errorf("%w: GenerateOptions.Host is required", policy.ErrInvalidConfig)
	}
	if o.Namespace == "" {
		o.Namespace = "default"
		if parts := strings.Split(shortName(o.Host), "."); len(parts) == 2 {
			o.Namespace = parts[1]
		}
	}
	if !dnsLabel.MatchString(o.Namespace) {
		return o, "", fmt.Errorf("%w: namespace %q is not a DNS label", policy.ErrInvalidConfig, truncate(o.Namespace))
	}
	host := qualify(o.Host, o.Namespace)
	for _, l := range strings.Split(host, ".") {
		if !dnsLabel.MatchString(l) {
			return o, "", fmt.Errorf("%w: host %q is not a DNS name", policy.ErrInvalidConfig, truncate(o.Host))
		}
	}
	if o.Retries == 0 {
		o.Retries = 2
	}
	if o.Retries < 1 || o.Retries > grpcMaxAttempts-1 {
		return o, "", fmt.Errorf("%w: Retries %d outside [1, %d]", policy.ErrInvalidConfig, o.Retries, grpcMaxAttempts-1)
	}
	if o.BudgetPercent == 0 {
		o.BudgetPercent = 10
	}
	if !(o.BudgetPercent > 0 && o.BudgetPercent <= 100) {
		return o, "", fmt.Errorf("%w: BudgetPercent %v outside (0, 100]", policy.ErrInvalidConfig, o.BudgetPercent)
	}
	return o, host, nil
}

var dnsLabel = regexp.MustCompile(`^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$`)

// generatedRetryOn are the conditions GenerateIstio retries on: the two
// under which the request was never sent, and UNAVAILABLE.
const generatedRetryOn = "connect-failure,refused-stream,unavailable"

// GenerateIstio writes, as YAML, a VirtualService and a DestinationRule
// for the host: one route per catalog method, matched by its exact path;
// the retryable methods (no side effects, idempotent, keyed with a durable
// ledger) retry Retries times on connect-failure,refused-stream,unavailable,
// every other method and a final catch-all route (for a method added
// later) set attempts 0, which switches off Istio's default; the
// DestinationRule sets trafficPolicy.retryBudget. Check accepts it for the
// owner mesh. Errors wrap policy.ErrInvalidConfig.
func GenerateIstio(cat *policy.Catalog, opts GenerateOptions) ([]byte, error) {
	o, host, err := opts.withDefaults()
	if err != nil {
		return nil, err
	}
	name := strings.Split(host, ".")[0]
	dest := []any{map[string]any{"destination": map[string]any{"host": host}}}
	var routes []any
	for _, p := range cat.Methods() {
		retries := map[string]any{"attempts": 0}
		if retryable(p) {
			retries = map[string]any{"attempts": o.Retries, "retryOn": generatedRetryOn}
		}
		routes = append(routes, map[string]any{
			"name":    routeName(p.FullMethod),
			"match":   []any{map[string]any{"uri": map[string]any{"exact": p.FullMethod}}},
			"retries": retries,
			"route":   dest,
		})
	}
	routes = append(routes, map[string]any{
		"name":    "not-in-the-catalog",
		"retries": map[string]any{"attempts": 0},
		"route":   dest,
	})
	vs := map[string]any{
		"apiVersion": "networking.istio.io/v1",
		"kind":       "VirtualService",
		"metadata":   map[string]any{"name": name, "namespace": o.Namespace},
		"spec":       map[string]any{"hosts": []any{host}, "http": routes},
	}
	dr := map[string]any{
		"apiVersion": "networking.istio.io/v1",
		"kind":       "DestinationRule",
		"metadata":   map[string]any{"name": name + "-retry-budget", "namespace": o.Namespace},
		"spec": map[string]any{"host": host, "trafficPolicy": map[string]any{
			"retryBudget": map[string]any{"percent": o.BudgetPercent, "minRetryConcurrency": 3},
		}},
	}
	return documents(fmt.Sprintf("# Istio retries for %s, whose channels' retry owner is the mesh (opledger policy generate --mesh istio).\n"+
		"# Only the retryable methods retry; every other route sets attempts: 0, which switches off Istio's default.\n", host), vs, dr)
}

// GenerateLinkerd writes, as YAML, a ServiceProfile for the host: one
// route per catalog method (POST and its exact path), isRetryable for the
// retryable methods (no side effects, idempotent, keyed with a durable
// ledger), and a retryBudget (BudgetPercent of requests plus 5 per second,
// over 10 s). A ServiceProfile rather than the retry.linkerd.io
// annotations: only a profile has a retry budget, and a profile overrides
// the annotations. Check accepts it for the owner mesh. Errors wrap
// policy.ErrInvalidConfig.
func GenerateLinkerd(cat *policy.Catalog, opts GenerateOptions) ([]byte, error) {
	o, host, err := opts.withDefaults()
	if err != nil {
		return nil, err
	}
	var routes []any
	for _, p := range cat.Methods() {
		routes = append(routes, map[string]any{
			"name":        p.FullMethod,
			"condition":   map[string]any{"method": "POST", "pathRegex": regexp.QuoteMeta(p.FullMethod)},
			"isRetryable": retryable(p),
		})
	}
	sp := map[string]any{
		"apiVersion": "linkerd.io/v1alpha2",
		"kind":       "ServiceProfile",
		"metadata":   map[string]any{"name": host, "namespace": o.Namespace},
		"spec": map[string]any{"routes": routes, "retryBudget": map[string]any{
			"retryRatio": o.BudgetPercent / 100, "minRetriesPerSecond": 5, "ttl": "10s"}},
	}
	return documents(fmt.Sprintf("# Linkerd retries for %s, whose channels' retry owner is the mesh (opledger policy generate --mesh linkerd).\n"+
		"# A ServiceProfile: only it has a retry budget, and it overrides retry.linkerd.io annotations (remove them).\n", host), sp)
}

// routeName turns /pkg.Service/Method into a route name: pkg-service-method.
func routeName(full string) string {
	s := strings.ToLower(strings.Trim(full, "/"))
	return strings.NewReplacer("/", "-", ".", "-", "_", "-").Replace(s)
}

func documents(header string, docs ...any) ([]byte, error) {
	var b bytes.Buffer
	b.WriteString(header)
	for i, d := range docs {
		y, err := yaml.Marshal(d)
		if err != nil {
			return nil, fmt.Errorf("mesh: marshalling YAML: %w", err)
		}
		if i > 0 {
			b.WriteString("---\n")
		}
		b.Write(y)
	}
	return b.Bytes(), nil
}
