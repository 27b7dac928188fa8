package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
	"text/tabwriter"

	"github.com/opledger/opledger/internal/keyedconf"
	"github.com/opledger/opledger/internal/methodname"
	"github.com/opledger/opledger/policy"
	"github.com/opledger/opledger/policy/mesh"
	"github.com/opledger/opledger/policy/serviceconfig"
)

func init() {
	extraCommands["policy"] = command{"check retry ownership of a service config and mesh or xDS configs against proto descriptors (check), or write the mesh side (generate)", runPolicy}
}

const policyUsage = `usage: opledger policy check --descriptors FILE [--owner OWNER] [--service-config FILE]
                             [--mesh FILE]... [--xds FILE]... [--istio] [--target TARGET] [--host HOST]...
                             [--keyed METHOD]... [--keyed-no-ledger METHOD]... [--json]
                             [--retention D] [--clock-skew D] [--method-retention METHOD=D]...
                             [--resolve-window D]
       opledger policy generate --mesh istio|linkerd|xds --descriptors FILE --host HOST [--namespace NS]
                             [--retries N] [--cluster CLUSTER] [--keyed METHOD]... [--keyed-no-ledger METHOD]...

check judges the retries of one channel against the methods of a binary
FileDescriptorSet (protoc --descriptor_set_out, buf build -o) and the
channel's retry owner: application, service-config (default), mesh or none.
It prints one finding per line, each with how to fix it, then (with --mesh,
--xds or --istio) the amplification per method: the product of the attempts
of every layer that retries it. It also reports, as window-outlasts-retention,
a keyed method (with a ledger) whose clients may go on sending one key for
longer than the ledger honours it: the method's retention (--method-retention,
else --retention) minus the clock skew. The clients' windows judged are the
service config's retry policy of the method when the service config owns the
retries (the waits its attempts and backoff allow; the attempts' own time is
bounded by the call's deadline, not counted), and the kit client's resolve
window (--resolve-window; with owner application and no flag, the kit's
default of 30s). Exit status 1 if there is any finding, 2 on usage or I/O
errors.

What it reads:
  --service-config  a gRPC service config (JSON)
  --mesh            YAML (several documents) or JSON with:
                      Istio VirtualService (networking.istio.io/v1, v1beta1, v1alpha3:
                        spec.http[].match, spec.http[].retries), DestinationRule
                        (trafficPolicy.connectionPool.http.maxRetries, trafficPolicy.retryBudget),
                        the mesh config's defaultHttpRetryPolicy (IstioOperator spec.meshConfig,
                        the istio ConfigMap's data.mesh, Helm values meshConfig, a bare MeshConfig);
                        Istio's defaults apply where nothing is set (attempts 2 on
                        connect-failure,refused-stream,unavailable,cancelled,retriable-status-codes)
                      Envoy RouteConfiguration (VirtualHost and RouteAction retry_policy; a
                        route's replaces its host's), Listener or bootstrap with an inline
                        route_config, Cluster circuit_breakers; protojson, camelCase or snake_case
                      Linkerd ServiceProfile (linkerd.io/v1alpha2: spec.routes[] condition and
                        isRetryable, spec.retryBudget) and the retry.linkerd.io/http, /grpc, /limit
                        and /timeout annotations on a Service, HTTPRoute or GRPCRoute
                      Gateway API HTTPRoute (spec.rules[].retry: codes, attempts, backoff) and
                        GRPCRoute matches
                    a Kubernetes List's items and a DiscoveryResponse's resources are read too;
                    any other kind is reported
  --xds             the RouteConfiguration (or Listener with an inline route_config) a
                    control plane serves to an xds:/// channel, read as grpc-go does (gRFC A44):
                    num_retries+1 attempts capped at 5, only cancelled, deadline-exceeded,
                    internal, resource-exhausted and unavailable, retry_back_off, no budget
                    (one retry, num_retries 1, is accepted as the bound); the channel's own
                    service config is replaced

flags:
  --descriptors FILE        the FileDescriptorSet with the services called on the channel
  --owner OWNER             the channel's retry owner (default service-config)
  --service-config FILE     the service config JSON
  --mesh FILE               a mesh configuration file (repeatable)
  --xds FILE                an xDS configuration file for a proxyless channel (repeatable)
  --istio                   Istio is the mesh, even if no Istio resource is given
  --target TARGET           the channel's target (xds:///NAME, dns:///HOST:PORT); its host selects
                            the configuration that applies when --host is not given
  --host HOST               a destination host of the channel (Kubernetes service name or xDS
                            domain); only its configuration applies (repeatable; default: all)
  --keyed METHOD            /pkg.Service/Method is a keyed mutation backed by a durable ledger (repeatable)
  --keyed-no-ledger METHOD  /pkg.Service/Method is a keyed mutation without a ledger (repeatable)
  --json                    print one JSON object instead of lines
  --retention D             the ledger's retention, ledger.WithRetention (default 24h)
  --clock-skew D            the ledger's clock skew, ledger.WithClockSkew (default 1m, or a tenth
                            of --retention when that is shorter, as the ledger)
  --method-retention METHOD=D
                            a keyed method's own retention, policy.MethodPolicy.Retention (as
                            /shop.v1.Orders/Create=6h; repeatable): at most --retention, longer
                            than the clock skew; the method must be keyed (--keyed, AIP-155)
  --resolve-window D        how long the clients resolve and retry one key: the kit client's
                            keyed.WithResolveWindow or its deadline, or a queue's retries (Go
                            code, so given here)

generate writes, for a channel whose owner is the mesh, the mesh side as
YAML on stdout: for istio a VirtualService (one route per method, retries
only for the retryable methods, attempts 0 elsewhere, which switches off
Istio's default) and a DestinationRule with a retryBudget; for linkerd a
ServiceProfile (isRetryable for the retryable methods, with a retryBudget;
a profile, since the retry.linkerd.io annotations have no budget); for xds
the RouteConfiguration (protojson) a control plane serves to xds:///HOST
(one route per method; the retryable methods retry once on unavailable,
the only bound a proxyless channel has). "policy check --owner mesh --mesh"
(--xds for xds) accepts what it writes.

  --mesh istio|linkerd|xds  the mesh
  --host HOST               the destination service (name, name.namespace or full name);
                            for xds the target's name (xds:///HOST)
  --namespace NS            the resources' namespace (default: from --host, else default)
  --retries N               retries of a retryable method with istio, 1 to 4 (default 2)
  --cluster CLUSTER         for xds: the cluster the routes send to (required)
`

// maxPolicyConfigBytes bounds each file read.
const maxPolicyConfigBytes = 4 << 20

// runPolicy implements "opledger policy": exit 0 when the checks have no
// findings, 1 when they have some (one per line on stdout), 2 on usage or
// I/O errors (one line on stderr).
func runPolicy(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprintln(stderr, "opledger policy: missing subcommand (usage: opledger policy check --descriptors FILE [--service-config FILE] [--mesh FILE]... [--owner OWNER])")
		return 2
	}
	switch args[0] {
	case "check":
		return runPolicyCheck(ctx, args[1:], stdout, stderr)
	case "generate":
		return runPolicyGenerate(ctx, args[1:], stdout, stderr)
	case "-h", "-help", "--help", "help":
		io.WriteString(stdout, policyUsage)
		return 0
	default:
		fmt.Fprintf(stderr, "opledger policy: unknown subcommand %q (want check or generate)\n", maskCredentials(args[0]))
		return 2
	}
}

// methodList is a repeatable flag of full method names.
type methodList []string

func (m *methodList) String() string { return strings.Join(*m, ",") }
func (m *methodList) Set(s string) error {
	if methodname.Check(s) != nil {
		return fmt.Errorf("%q is not a full method name like /pkg.Service/Method", s)
	}
	*m = append(*m, s)
	return nil
}

// stringList is a repeatable flag.
type stringList []string

func (l *stringList) String() string { return strings.Join(*l, ",") }
func (l *stringList) Set(s string) error {
	if s == "" {
		return errors.New("empty value")
	}
	*l = append(*l, s)
	return nil
}

// policyFlags are the flags check and generate share.
type policyFlags struct {
	fs                   *flag.FlagSet
	descPath             *string
	keyed, keyedNoLedger methodList
}

func newPolicyFlags(name string) *policyFlags {
	pf := &policyFlags{fs: flag.NewFlagSet(name, flag.ContinueOnError)}
	pf.fs.SetOutput(io.Discard) // errors are reported on one line
	pf.descPath = pf.fs.String("descriptors", "", "")
	pf.fs.Var(&pf.keyed, "keyed", "")
	pf.fs.Var(&pf.keyedNoLedger, "keyed-no-ledger", "")
	return pf
}

// catalog loads the descriptors and applies --keyed and --keyed-no-ledger.
func (pf *policyFlags) catalog() (*policy.Catalog, error) {
	cat, err := policy.LoadDescriptorSetFile(*pf.descPath)
	if err != nil {
		return nil, err
	}
	for _, m := range pf.keyed {
		if cat, err = cat.WithKeyed(m, true); err != nil {
			return nil, fmt.Errorf("--keyed: %w", err)
		}
	}
	for _, m := range pf.keyedNoLedger {
		if cat, err = cat.WithKeyed(m, false); err != nil {
			return nil, fmt.Errorf("--keyed-no-ledger: %w", err)
		}
	}
	return cat, nil
}

func usageFailer(name string, stderr io.Writer) func(format string, a ...any) int {
	return func(format string, a ...any) int {
		msg := strings.ReplaceAll(fmt.Sprintf(format, a...), "\n", " ")
		fmt.Fprintf(stderr, "opledger policy %s: %s\n", name, msg)
		return 2
	}
}

// parse parses the flags; done is true when the caller must return code.
func (pf *policyFlags) parse(args []string, stdout io.Writer, fail func(string, ...any) int) (code int, done bool) {
	if err := pf.fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			io.WriteString(stdout, policyUsage)
			return 0, true
		}
		return fail("%s (run opledger policy --help)", newArgMasker(args).mask(err.Error())), true
	}
	if pf.fs.NArg() > 0 {
		return fail("%v", unexpectedArg(pf.fs)), true
	}
	if *pf.descPath == "" {
		return fail("--descriptors is required"), true
	}
	return 0, false
}

// jsonFinding is a service config finding in --json output.
type jsonFinding struct {
	File    string  `json:"file"`
	Kind    string  `json:"kind"`
	Path    string  `json:"path,omitempty"`
	Name    *string `json:"name,omitempty"`
	Method  string  `json:"method,omitempty"`
	Message string  `json:"message"`
}

func runPolicyCheck(_ context.Context, args []string, stdout, stderr io.Writer) int {
	pf := newPolicyFlags("opledger policy check")
	fs := pf.fs
	scPath := fs.String("service-config", "", "")
	ownerName := fs.String("owner", policy.OwnerServiceConfig.String(), "")
	target := fs.String("target", "", "")
	istio := fs.Bool("istio", false, "")
	asJSON := fs.Bool("json", false, "")
	var meshFiles, xdsFiles, hosts stringList
	fs.Var(&meshFiles, "mesh", "")
	fs.Var(&xdsFiles, "xds", "")
	fs.Var(&hosts, "host", "")
	wf := addWindowFlags(pf)
	fail := usageFailer("check", stderr)
	if code, done := pf.parse(args, stdout, fail); done {
		return code
	}
	meshMode := len(meshFiles) > 0 || len(xdsFiles) > 0 || *istio
	if *scPath == "" && !meshMode && *wf.resolve == 0 {
		return fail("--service-config, --mesh, --xds, --istio or --resolve-window is required")
	}
	lw, err := wf.window()
	if err != nil {
		return fail("%v", err)
	}
	var owner policy.RetryOwner
	if err := owner.UnmarshalText([]byte(*ownerName)); err != nil {
		return fail("--owner: %v", err)
	}
	cat, err := pf.catalog()
	if err != nil {
		return fail("%v", err)
	}
	if cat, err = wf.applyRetentions(cat, lw); err != nil {
		return fail("%v", err)
	}
	var scFindings []serviceconfig.Finding
	var sc *serviceconfig.Config
	if *scPath != "" {
		data, err := readPolicyFile(*scPath)
		if err != nil {
			return fail("%v", err)
		}
		if scFindings, err = serviceconfig.Validate(data, cat, owner); err != nil {
			return fail("%v", err)
		}
		sc, _ = serviceconfig.Parse(data) // an invalid one has findings; the amplification then counts the generated one
	}
	var rep *mesh.Report
	if meshMode {
		var cfg mesh.Config
		for _, p := range meshFiles {
			data, err := readPolicyFile(p)
			if err != nil {
				return fail("%v", err)
			}
			cfg.AddMesh(p, data)
		}
		for _, p := range xdsFiles {
			data, err := readPolicyFile(p)
			if err != nil {
				return fail("%v", err)
			}
			cfg.AddXDS(p, data)
		}
		rep, err = mesh.Check(&cfg, cat, mesh.Options{Owner: owner, Target: *target, Hosts: hosts, Istio: *istio,
			ApplicationAttempts: keyedconf.DefaultMaxAttempts, ServiceConfig: sc})
		if err != nil {
			return fail("%v", err)
		}
	}
	windows, err := checkWindows(windowCheck{cat: cat, owner: owner, sc: sc, scPath: *scPath, resolve: *wf.resolve, ledger: lw})
	if err != nil {
		return fail("%v", err)
	}
	n := len(scFindings) + len(windows)
	if rep != nil {
		n += len(rep.Findings)
	}
	if *asJSON {
		out := struct {
			ServiceConfigFindings []jsonFinding   `json:"serviceConfigFindings"`
			WindowFindings        []windowFinding `json:"windowFindings"`
			*mesh.Report
		}{ServiceConfigFindings: []jsonFinding{}, WindowFindings: append([]windowFinding{}, windows...), Report: rep}
		if rep == nil {
			out.Report = &mesh.Report{Owner: owner, Target: *target, Findings: []mesh.Finding{}, Methods: []mesh.MethodReport{}}
		}
		for _, f := range scFindings {
			jf := jsonFinding{File: *scPath, Kind: string(f.Kind), Path: f.Path, Method: f.Method, Message: f.Message}
			if f.HasName {
				name := f.Name
				jf.Name = &name
			}
			out.ServiceConfigFindings = append(out.ServiceConfigFindings, jf)
		}
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		if err := enc.Encode(out); err != nil {
			return fail("%v", err)
		}
	} else {
		for _, f := range scFindings {
			fmt.Fprintf(stdout, "%s: %s\n", *scPath, f)
		}
		for _, f := range windows {
			fmt.Fprintf(stdout, "%s: %s\n", f.File, f)
		}
		if rep != nil {
			for _, f := range rep.Findings {
				file := f.File
				if file == "" {
					file = "(defaults)"
				}
				fmt.Fprintf(stdout, "%s: %s\n", file, f)
			}
			printAmplification(stdout, rep)
			if u := unread(rep); u > 0 {
				fmt.Fprintf(stdout, "\n%d finding(s) not-understood or invalid-resource: where they apply the mesh may retry more than the table shows; judge them by hand\n", u)
			}
		}
	}
	// Every finding is a problem, not-understood and invalid-resource
	// included: configuration the checker could not read (or that the
	// platform rejects, so its defaults apply) must never pass as "no
	// retries".
	if n > 0 {
		fmt.Fprintf(stderr, "opledger policy check: %d finding(s) (owner %s)%s\n", n, owner, unreadNote(rep))
		return 1
	}
	return 0
}

// unread counts the mesh findings of configuration the checker did not
// model or the platform rejects.
func unread(rep *mesh.Report) int {
	n := 0
	if rep != nil {
		for _, f := range rep.Findings {
			if f.Kind == "not-understood" || f.Kind == "invalid-resource" { // mesh's kinds of what it could not read
				n++
			}
		}
	}
	return n
}

// unreadNote is the summary's mention of unread configuration.
func unreadNote(rep *mesh.Report) string {
	if u := unread(rep); u > 0 {
		return fmt.Sprintf(", %d of them not understood or invalid: the attempts shown may be too low", u)
	}
	return ""
}

// printAmplification writes the attempts per layer and their product for
// every method, as a table.
func printAmplification(w io.Writer, rep *mesh.Report) {
	if len(rep.Methods) == 0 {
		return
	}
	fmt.Fprintf(w, "\namplification per method (owner %s; attempts of one call at each layer and their product, worst case before budgets):\n", rep.Owner)
	tw := tabwriter.NewWriter(w, 2, 8, 2, ' ', 0)
	head := []string{"METHOD", "KIND"}
	for _, l := range rep.Methods[0].Layers {
		head = append(head, strings.ToUpper(string(l.Layer)))
	}
	fmt.Fprintln(tw, strings.Join(append(head, "TOTAL"), "\t"))
	for _, m := range rep.Methods {
		row := []string{m.Method, m.Kind}
		for _, l := range m.Layers {
			row = append(row, l.Attempts.String())
		}
		fmt.Fprintln(tw, strings.Join(append(row, m.Amplification.String()), "\t"))
	}
	tw.Flush()
}

func runPolicyGenerate(_ context.Context, args []string, stdout, stderr io.Writer) int {
	pf := newPolicyFlags("opledger policy generate")
	fs := pf.fs
	meshName := fs.String("mesh", "", "")
	host := fs.String("host", "", "")
	namespace := fs.String("namespace", "", "")
	retries := fs.Int("retries", 0, "")
	cluster := fs.String("cluster", "", "")
	fail := usageFailer("generate", stderr)
	if code, done := pf.parse(args, stdout, fail); done {
		return code
	}
	if *host == "" {
		return fail("--host is required")
	}
	if *cluster != "" && *meshName != "xds" {
		return fail("--cluster is for --mesh xds only")
	}
	var gen func(*policy.Catalog, mesh.GenerateOptions) ([]byte, error)
	switch *meshName {
	case "istio":
		gen = mesh.GenerateIstio
	case "linkerd":
		gen = mesh.GenerateLinkerd
	case "xds":
		if *retries != 0 || *namespace != "" {
			return fail("--retries and --namespace are not for xds: the generated routes retry once (a proxyless channel has no retry budget)")
		}
		gen = func(cat *policy.Catalog, o mesh.GenerateOptions) ([]byte, error) {
			return mesh.GenerateXDS(cat, mesh.XDSOptions{Name: o.Host, Cluster: *cluster})
		}
	case "":
		return fail("--mesh is required (istio, linkerd or xds)")
	default:
		return fail("--mesh %q: want istio, linkerd or xds", *meshName)
	}
	cat, err := pf.catalog()
	if err != nil {
		return fail("%v", err)
	}
	out, err := gen(cat, mesh.GenerateOptions{Host: *host, Namespace: *namespace, Retries: *retries})
	if err != nil {
		return fail("%v", err)
	}
	stdout.Write(out)
	return 0
}

func readPolicyFile(path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, maxPolicyConfigBytes+1))
	if err != nil {
		return nil, fmt.Errorf("reading %s: %w", path, err)
	}
	if len(data) > maxPolicyConfigBytes {
		return nil, fmt.Errorf("%s is larger than %d bytes", path, maxPolicyConfigBytes)
	}
	return data, nil
}
