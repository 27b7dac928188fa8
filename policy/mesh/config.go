package mesh

import (
	"fmt"
	"strings"
)

// Config is retry configuration of the third layer read from files: mesh
// resources (AddMesh) and the RouteConfiguration of proxyless xDS channels
// (AddXDS). The zero value is empty and ready to use. A Config is not safe
// for concurrent use; Check only reads it.
type Config struct {
	findings []Finding
	docs     int

	istioSeen        bool        // some Istio document was read: Istio is the mesh
	meshDefault      *istioRetry // meshConfig.defaultHttpRetryPolicy; nil: Istio's built-in default
	virtualServices  []*virtualService
	destinationRules []*destinationRule
	envoyFilters     []*envoyFilter
	rootNamespace    string   // meshConfig.rootNamespace; "": istio-system
	vsExportTo       []string // meshConfig.defaultVirtualServiceExportTo

	envoyRoutes   []*routeConfig // layerEnvoy
	envoyClusters []*envoyCluster
	xdsRoutes     []*routeConfig // layerXDS
	rdsRefs       []rdsRef       // HttpConnectionManagers that take their routes from RDS

	profiles []*serviceProfile
	services []*k8sService
	routes   []*k8sRoute
	policies []*gatewayPolicy // Envoy Gateway's and Gateway API's BackendTrafficPolicies
}

// location is where something was read.
type location struct {
	file   string
	doc    int
	object string
	path   string
}

func (l location) at(path string) location { l.path = path; return l }

func (l location) finding(kind FindingKind, layer Layer, msg, fix string) Finding {
	return Finding{Kind: kind, File: l.file, Document: l.doc, Object: l.object, Path: l.path, Layer: layer, Message: msg, Fix: fix}
}

// where describes the location in a message: "VirtualService shop/orders
// spec.http[0].retries".
func (l location) where() string {
	s := l.object
	if l.path != "" {
		s += " " + l.path
	}
	return strings.TrimSpace(s)
}

func (c *Config) add(f Finding) { c.findings = append(c.findings, f) }

// parseFindings returns the problems found while reading, in the order of the
// files and documents. Check reports them too.
func (c *Config) parseFindings() []Finding { return append([]Finding(nil), c.findings...) }

// documentCount returns the number of documents read.
func (c *Config) documentCount() int { return c.docs }

// hasXDS reports whether AddXDS read a route configuration: the channel
// dials xds:///.
func (c *Config) hasXDS() bool { return len(c.xdsRoutes) > 0 }

// AddMesh reads one file of mesh configuration: YAML with one or several
// documents, or JSON, holding the Istio, Envoy, Linkerd and Gateway API
// resources listed in the package documentation (a Kubernetes List's
// items and an xDS DiscoveryResponse's resources too). file names the file
// in findings. Problems are findings (which Check reports), never errors: a
// document that cannot be read, or whose kind the checker does not read, is
// reported and skipped.
func (c *Config) AddMesh(file string, data []byte) { c.addFile(file, data, false) }

// AddXDS reads one file with the xDS resources a control plane serves to
// proxyless gRPC clients (an xds:/// channel): a RouteConfiguration, or a
// Listener with an inline route_config, in protojson form (JSON, or the same
// in YAML; several documents, "@type" wrappers and a DiscoveryResponse's
// resources are read; Clusters and ClusterLoadAssignments are accepted and
// not needed). Its retry policies are read as grpc-go reads them (gRFC A44).
func (c *Config) AddXDS(file string, data []byte) { c.addFile(file, data, true) }

func (c *Config) addFile(file string, data []byte, xds bool) {
	if len(data) > maxConfigBytes {
		c.add(Finding{Kind: findingSyntax, File: file, Message: fmt.Sprintf("larger than %d bytes", maxConfigBytes),
			Fix: "split the configuration into several files"})
		return
	}
	for i, doc := range splitYAML(data) {
		loc := location{file: file, doc: i + 1}
		if c.docs >= maxDocuments {
			c.add(loc.finding(findingSyntax, "", fmt.Sprintf("more than %d documents; the rest is not read", maxDocuments), "split the configuration into several files"))
			return
		}
		c.docs++
		v, err := decode(doc)
		if err != nil {
			c.add(loc.finding(findingSyntax, "", "not valid YAML or JSON: "+truncate(strings.ReplaceAll(err.Error(), "\n", " ")), "fix the document"))
			continue
		}
		c.value(loc, v, xds, 0)
	}
}

// value reads one document, or an element of a list of them.
func (c *Config) value(loc location, v any, xds bool, nesting int) {
	if nesting > 4 {
		c.add(loc.finding(findingSyntax, "", "lists nested too deeply", "flatten the list"))
		return
	}
	switch t := v.(type) {
	case nil:
		return // an empty document
	case []any:
		for i, e := range t {
			c.value(loc.at(fmt.Sprintf("%s[%d]", loc.path, i)), e, xds, nesting+1)
		}
		return
	case map[string]any:
		o := obj{m: t, path: loc.path}
		c.object(loc, o, xds, nesting)
	default:
		c.add(loc.finding(findingSyntax, "", "the document is "+describe(v)+", not an object", "write one resource per document"))
	}
}

func (c *Config) object(loc location, o obj, xds bool, nesting int) {
	if typ, ok := o.str("@type"); ok {
		c.envoyTyped(loc, o, typ, xds)
		return
	}
	apiVersion, hasAPI := o.str("apiVersion")
	kind, hasKind := o.str("kind")
	if hasAPI || hasKind {
		if kind == "List" || strings.HasSuffix(kind, "List") && o.m["items"] != nil {
			items, paths := o.list("items")
			for i, it := range items {
				c.value(loc.at(paths[i]), it, xds, nesting+1)
			}
			return
		}
		if xds {
			c.add(loc.at(o.path).finding(findingUnknownKind, layerXDS, fmt.Sprintf("%s %s is a Kubernetes resource, not an xDS resource", truncate(apiVersion), truncate(kind)),
				"pass it with --mesh, and the RouteConfiguration the control plane serves with --xds"))
			return
		}
		c.kubernetes(loc, o, apiVersion, kind)
		return
	}
	if res, paths := o.list("resources"); res != nil && (o.m["type_url"] != nil || o.m["typeUrl"] != nil || o.m["version_info"] != nil || o.m["versionInfo"] != nil) {
		for i, r := range res { // a DiscoveryResponse
			c.value(loc.at(paths[i]), r, xds, nesting+1)
		}
		return
	}
	switch {
	case has(o, "virtual_hosts") || has(o, "vhds"):
		c.readRouteConfiguration(loc, o, xds)
	case has(o, "static_resources"):
		c.readBootstrap(loc, o, xds)
	case has(o, "api_listener") || has(o, "filter_chains"):
		c.readListener(loc, o, xds)
	case !xds && has(o, "defaultHttpRetryPolicy"):
		c.readMeshConfig(loc.at(o.path), o, "MeshConfig")
	case !xds && has(o, "meshConfig"):
		if mc, ok := o.child("meshConfig"); ok {
			c.readMeshConfig(loc, mc, "Istio values")
		}
	default:
		layer := Layer("")
		if xds {
			layer = layerXDS
		}
		c.add(loc.at(o.path).finding(findingUnknownKind, layer, "a document with no apiVersion, kind or @type that is none of the configurations read (RouteConfiguration, Listener, Envoy bootstrap, mesh config)",
			"give the resource its apiVersion and kind (or its @type), or remove it from the input"))
	}
}

func has(o obj, name string) bool { _, _, ok := o.key(name); return ok }

// objectName formats "Kind ns/name".
func objectName(kind string, meta obj) (name, namespace, full string) {
	name, _ = meta.str("name")
	namespace, _ = meta.str("namespace")
	kind = truncate(kind)
	full = kind + " " + truncate(name)
	if namespace != "" {
		full = kind + " " + truncate(namespace) + "/" + truncate(name)
	}
	return name, namespace, full
}

// kubernetes reads a Kubernetes resource by its group and kind, and reports
// one this checker does not read.
func (c *Config) kubernetes(loc location, o obj, apiVersion, kind string) {
	group, version, found := strings.Cut(apiVersion, "/")
	if !found {
		group, version = "", apiVersion
	}
	meta, _ := o.child("metadata")
	name, ns, full := objectName(kind, meta)
	loc.object = full
	loc.path = o.path
	switch {
	case group == "networking.istio.io":
		c.istioNetworking(loc, o, apiVersion, version, kind, name, ns)
	case group == "install.istio.io" && kind == "IstioOperator":
		c.istioSeen = true
		if spec, ok := o.child("spec"); ok {
			if mc, ok := spec.child("meshConfig"); ok {
				c.readMeshConfig(loc, mc, full)
			}
		}
	case group == "" && version == "v1" && kind == "ConfigMap":
		c.readIstioConfigMap(loc, o, name)
	case group == "" && version == "v1" && kind == "Service":
		c.readService(loc, o, meta, name, ns)
	case group == "linkerd.io" && kind == "ServiceProfile":
		if version != "v1alpha2" && version != "v1alpha1" {
			c.add(loc.finding(findingUnknownKind, "", fmt.Sprintf("apiVersion %s is not read (linkerd.io/v1alpha2 is)", truncate(apiVersion)), "use linkerd.io/v1alpha2"))
			return
		}
		c.readServiceProfile(loc, o, name, ns)
	case (group == "gateway.networking.k8s.io" || group == "policy.linkerd.io") && (kind == "HTTPRoute" || kind == "GRPCRoute"):
		c.readRoute(loc, o, meta, kind, name, ns)
	case c.readGatewayPolicy(loc, o, group, kind, ns):
	default:
		what := "apiVersion " + truncate(apiVersion) + " kind " + truncate(kind)
		if kind == "" {
			what = "a document without kind"
		}
		c.add(loc.finding(findingUnknownKind, "", what+" is not a retry configuration this checker reads (Istio VirtualService, DestinationRule, IstioOperator, the istio ConfigMap; Linkerd ServiceProfile, Service annotations; Gateway API HTTPRoute, GRPCRoute; Envoy RouteConfiguration)",
			"remove it from the input, or check it by hand"))
	}
}

// istioNetworking reads a networking.istio.io resource: a VirtualService or
// a DestinationRule of a served version.
func (c *Config) istioNetworking(loc location, o obj, apiVersion, version, kind, name, ns string) {
	if version != "v1" && version != "v1beta1" && version != "v1alpha3" {
		c.add(loc.finding(findingUnknownKind, "", fmt.Sprintf("apiVersion %s is not read (networking.istio.io/v1, v1beta1 and v1alpha3 are)", truncate(apiVersion)), "use a served version"))
		return
	}
	c.istioSeen = true
	switch kind {
	case "VirtualService":
		c.readVirtualService(loc, o, name, ns)
	case "DestinationRule":
		c.readDestinationRule(loc, o, ns)
	case "EnvoyFilter":
		c.readEnvoyFilter(loc, o, ns)
	default:
		c.add(loc.finding(findingUnknownKind, "", fmt.Sprintf("an Istio %s does not configure retries (VirtualService, DestinationRule and EnvoyFilter do)", truncate(kind)), "remove it from the input"))
	}
}

// readIstioConfigMap reads Istio's mesh config from the istio ConfigMap
// (named istio or istio-REVISION) and reports any other ConfigMap.
func (c *Config) readIstioConfigMap(loc location, o obj, name string) {
	data, _ := o.child("data")
	mesh, hasMesh := data.str("mesh")
	if !hasMesh || !(name == "istio" || strings.HasPrefix(name, "istio-")) {
		c.add(loc.finding(findingUnknownKind, "", "a ConfigMap other than Istio's mesh config (named istio or istio-REVISION, with data.mesh)", "remove it from the input"))
		return
	}
	c.istioSeen = true
	meshLoc := loc.at(joinPath(data.path, "mesh"))
	v, err := decode([]byte(mesh))
	if err != nil {
		c.add(meshLoc.finding(findingSyntax, layerIstio, "data.mesh is not valid YAML: "+truncate(err.Error()), "fix the mesh config"))
		return
	}
	mc, ok := asObj(v, joinPath(data.path, "mesh"))
	if !ok {
		if v != nil {
			c.add(meshLoc.finding(findingSyntax, layerIstio, "data.mesh is not an object", "fix the mesh config"))
		}
		return
	}
	c.readMeshConfig(loc, mc, loc.object)
}
