package mesh

import (
	"encoding/json"
	"fmt"
	"net/url"
	"strings"

	"github.com/opledger/opledger/internal/suggest"
	"github.com/opledger/opledger/policy"
	"github.com/opledger/opledger/policy/serviceconfig"
)

// defaultApplicationAttempts is the attempts of one call that Check counts
// for the application layer when Options.ApplicationAttempts is 0: the
// default of the kit's client interceptor (keyedconf.DefaultMaxAttempts).
const defaultApplicationAttempts = 5

// Options describe the channel Check judges.
type Options struct {
	// Owner is the channel's retry owner. Required.
	Owner policy.RetryOwner
	// Target is the channel's target, such as "xds:///payments" or
	// "dns:///payments.shop.svc.cluster.local:8080"; optional. An xds:
	// target makes the channel proxyless (as does any configuration read
	// with AddXDS), and its host selects the configuration that applies
	// when Hosts is empty.
	Target string
	// Hosts are the destination hosts the channel calls, as the mesh names
	// them: Kubernetes service names (short, name.namespace or full) or xDS
	// virtual host domains. Only the configuration for them applies. Empty
	// means the host of Target, or else every host in the configuration.
	Hosts []string
	// Istio states that Istio is the mesh even if no Istio resource was
	// read, so that its default retries apply.
	Istio bool
	// ApplicationAttempts is the attempts of one call at the application
	// layer when the owner is the application; 0 means 5, the default of
	// the kit's client interceptors.
	ApplicationAttempts int
	// ServiceConfig is the channel's service config, counted when the owner
	// is the service config; nil means the one serviceconfig.Generate
	// writes for the catalog with default settings.
	ServiceConfig *serviceconfig.Config
}

// LayerAttempts is what one layer does to one method.
type LayerAttempts struct {
	// Layer is the layer.
	Layer Layer `json:"layer"`
	// Attempts is the most attempts one call can make at this layer; 1 when
	// it does not retry the method.
	Attempts Attempts `json:"attempts"`
	// Conditions lists the conditions it retries on, as the layer names
	// them.
	Conditions []string `json:"conditions,omitempty"`
	// Budget describes what bounds the layer's retries; "" when nothing
	// does (or it does not retry).
	Budget string `json:"budget,omitempty"`
	// Sources name where the layer's behaviour comes from.
	Sources []string `json:"sources,omitempty"`
}

// MethodReport is the retry behaviour of one catalog method across layers.
type MethodReport struct {
	// Method is the full method name.
	Method string `json:"method"`
	// Kind is the method's kind in the catalog ("non-idempotent",
	// "no-side-effects", "idempotent", "keyed").
	Kind string `json:"kind"`
	// Layers lists the application, the service config and every mesh
	// layer of the configuration, in that order.
	Layers []LayerAttempts `json:"layers"`
	// Amplification is the product of the layers' attempts: how many
	// requests one call can become at the server, in the worst case and
	// before budgets.
	Amplification Attempts `json:"amplification"`
}

// Report is the result of Check.
type Report struct {
	// Owner is the channel's retry owner.
	Owner policy.RetryOwner `json:"owner"`
	// Target is Options.Target.
	Target string `json:"target,omitempty"`
	// XDS reports that the channel is proxyless (xds:///).
	XDS bool `json:"xds"`
	// Findings lists every problem: those found while reading, then per
	// method in catalog order, then per route.
	Findings []Finding `json:"findings"`
	// Methods lists every catalog method, sorted.
	Methods []MethodReport `json:"methods"`
}

// rule is one layer's retry behaviour for the requests a route matches.
type rule struct {
	layer     Layer
	loc       location
	attempts  Attempts
	conds     []string
	budget    string // what bounds the retries; "" for nothing
	noBudget  string // why nothing does
	via       string // how the rule reaches the route
	isDefault bool   // a product's default, not written in the file
}

// source describes where a rule comes from.
func (r *rule) source() string {
	s := r.loc.where()
	if r.loc.file != "" {
		s = r.loc.file + ": " + s
	}
	if r.via != "" {
		s += " (" + r.via + ")"
	}
	return s
}

type route struct {
	loc     location
	name    string
	matches []matcher // any of them; none: every request
	rule    *rule     // nil: the route does not retry
	// In a table ranked by precedence: the HTTPRoute or GRPCRoute the rule
	// belongs to, the rule's index in it, and how its hostnames match the
	// request's host.
	ref   *routeRef
	index int
	host  hostScore
}

// table is a route table of one layer for one host.
type table struct {
	layer Layer
	loc   location
	// routes are in the product's order; rank says how a request picks
	// among the matching ones.
	routes   []route
	rank     ranking
	coverage bool // report routes matching nothing and methods no route matches
	// unmatchedServed: a request no route matches is still served, without
	// retries (Linkerd's default route), rather than refused.
	unmatchedServed bool
	// gateway: the routes of a Gateway, where every call of the channel
	// arrives, and which answers a call no route matches with 404.
	gateway bool
}

// resolve returns the routes that can apply to a request for path. In a
// first-match table, those are the matching routes in order up to the
// first one without further conditions; in a table ranked by precedence,
// see resolveRanked.
func (t *table) resolve(path string) []*route {
	if t.rank != rankFirst {
		return t.resolveRanked(path)
	}
	var out []*route
	for i := range t.routes {
		r := &t.routes[i]
		if len(r.matches) == 0 {
			out = append(out, r)
			break
		}
		found, conditional := false, true
		for _, m := range r.matches {
			if m.matches(path) {
				found = true
				conditional = conditional && m.conditional
			}
		}
		if !found {
			continue
		}
		out = append(out, r)
		if !conditional {
			break
		}
	}
	return out
}

// Check judges the configuration for a channel with the given catalog and
// options, and reports every finding and the amplification of every method.
// A nil catalog is empty. An invalid owner is an error wrapping
// policy.ErrInvalidOwner; an invalid ApplicationAttempts one wrapping
// policy.ErrInvalidConfig. Problems of the configuration are findings,
// never errors.
func Check(c *Config, cat *policy.Catalog, opts Options) (*Report, error) {
	opts, err := checkOptions(opts)
	if err != nil {
		return nil, err
	}
	c = c.forCheck(opts)
	sc, err := channelServiceConfig(cat, opts)
	if err != nil {
		return nil, err
	}
	rep := &Report{Owner: opts.Owner, Target: opts.Target, XDS: c.hasXDS() || targetScheme(opts.Target) == "xds"}
	tables := c.meshTables(channelHosts(opts))
	present := presentLayers(tables)
	ck := &checker{c: c, cat: cat, opts: opts, rep: rep, sc: sc, tables: tables, seen: map[string]bool{}}
	rep.Findings = append(rep.Findings, c.findings...)
	if rep.XDS && opts.Owner == policy.OwnerServiceConfig {
		rep.Findings = append(rep.Findings, serviceConfigReplaced(c, opts.Target))
	}
	for _, p := range cat.Methods() {
		rep.Methods = append(rep.Methods, ck.method(p, present))
	}
	for _, l := range meshLayers {
		for _, t := range tables[l] {
			ck.coverage(t)
		}
	}
	if rep.Findings == nil {
		rep.Findings = []Finding{}
	}
	if rep.Methods == nil {
		rep.Methods = []MethodReport{}
	}
	return rep, nil
}

// checkOptions validates the options and fills in their defaults.
func checkOptions(opts Options) (Options, error) {
	if !opts.Owner.Valid() {
		return opts, fmt.Errorf("%w: %d", policy.ErrInvalidOwner, uint8(opts.Owner))
	}
	if opts.ApplicationAttempts < 0 {
		return opts, fmt.Errorf("%w: ApplicationAttempts %d is negative", policy.ErrInvalidConfig, opts.ApplicationAttempts)
	}
	if opts.ApplicationAttempts == 0 {
		opts.ApplicationAttempts = defaultApplicationAttempts
	}
	return opts, nil
}

// forCheck returns the copy of c that one Check works on: findings made
// while building tables (overridden annotations) must not accumulate in the
// caller's Config across calls. A nil c is empty.
func (c *Config) forCheck(opts Options) *Config {
	if c == nil {
		c = &Config{}
	}
	work := *c
	work.findings = append([]Finding(nil), c.findings...)
	if opts.Istio {
		work.istioSeen = true
	}
	return &work
}

// channelHosts returns the hosts whose configuration applies to the
// channel: Options.Hosts, or else the host of its target, or else none
// (every host).
func channelHosts(opts Options) []string {
	if len(opts.Hosts) > 0 {
		return opts.Hosts
	}
	if h := targetHost(opts.Target); h != "" {
		return []string{h}
	}
	return nil
}

// channelServiceConfig returns the retries of the service config Check
// counts: the one in the options, or else the one serviceconfig.Generate
// writes when the service config owns retries, or else nil.
func channelServiceConfig(cat *policy.Catalog, opts Options) (*scRetries, error) {
	sc := opts.ServiceConfig
	if sc == nil && opts.Owner == policy.OwnerServiceConfig {
		var err error
		if sc, err = serviceconfig.Generate(cat, opts.Owner, serviceconfig.RetrySettings{}); err != nil {
			return nil, err
		}
	}
	if sc == nil {
		return nil, nil
	}
	js, err := sc.JSON()
	if err != nil {
		return nil, err
	}
	var r scRetries
	if err := json.Unmarshal([]byte(js), &r); err != nil {
		return nil, err
	}
	return &r, nil
}

// scRetries is what Check reads of a service config (its JSON): the names
// and retry policies of its method configs, and its throttling.
type scRetries struct {
	MethodConfig []struct {
		Name []struct {
			Service string `json:"service"`
			Method  string `json:"method"`
		} `json:"name"`
		RetryPolicy *struct {
			MaxAttempts          int      `json:"maxAttempts"`
			RetryableStatusCodes []string `json:"retryableStatusCodes"`
		} `json:"retryPolicy"`
	} `json:"methodConfig"`
	RetryThrottling *struct {
		MaxTokens  float64 `json:"maxTokens"`
		TokenRatio float64 `json:"tokenRatio"`
	} `json:"retryThrottling"`
}

// namePath is the key grpc-go looks a method config name up by:
// "/service/method", "/service/" for a whole service, "" for the channel
// default; ok is false for a method without a service, which grpc-go
// rejects.
func namePath(service, method string) (path string, ok bool) {
	switch {
	case service == "":
		return "", method == ""
	case method == "":
		return "/" + service + "/", true
	}
	return "/" + service + "/" + method, true
}

// meshTables returns the route tables of every mesh layer for the hosts.
func (c *Config) meshTables(hosts []string) map[Layer][]*table {
	return map[Layer][]*table{
		layerIstio:      c.istioTables(hosts),
		layerEnvoy:      c.envoyTables(layerEnvoy, hosts),
		layerLinkerd:    c.linkerdTables(hosts),
		layerGatewayAPI: c.gatewayTables(hosts),
		layerXDS:        c.envoyTables(layerXDS, hosts),
	}
}

// presentLayers returns the mesh layers that have tables, in meshLayers'
// order. Gateway API routes without a retry field are read for coverage
// only; their implementation's retries are its own layer.
func presentLayers(tables map[Layer][]*table) []Layer {
	var present []Layer
	for _, l := range meshLayers {
		if len(tables[l]) > 0 && (l != layerGatewayAPI || anyRule(tables[l])) {
			present = append(present, l)
		}
	}
	return present
}

// serviceConfigReplaced is the finding of an xds:/// channel whose retry
// owner is the service config.
func serviceConfigReplaced(c *Config, target string) Finding {
	f := Finding{Kind: findingServiceConfigReplaced, Layer: layerXDS, Object: "channel " + target,
		Message: "the channel dials xds:///, so grpc-go takes its service config from the xDS resolver: a generated config given with grpc.WithDefaultServiceConfig is not used (its retry policy and throttling are lost), " +
			"and with grpc.WithDisableServiceConfig (grpcint's DialOptions for the service-config owner) the channel gets no addresses and every call fails",
		Fix: "make the owner mesh (the control plane's retry_policy) or application (the kit's interceptor, with grpc.WithDisableRetry), and dial without a service config of your own"}
	if target == "" {
		f.Object = "xds:/// channel"
	}
	if len(c.xdsRoutes) > 0 {
		f.File = c.xdsRoutes[0].loc.file
	}
	return f
}

func anyRule(ts []*table) bool {
	for _, t := range ts {
		for _, r := range t.routes {
			if r.rule != nil {
				return true
			}
		}
	}
	return false
}

type checker struct {
	c      *Config
	cat    *policy.Catalog
	opts   Options
	rep    *Report
	sc     *scRetries
	tables map[Layer][]*table
	seen   map[string]bool
}

func (ck *checker) add(f Finding) {
	key := fmt.Sprint(f.Kind, "|", f.File, "|", f.Document, "|", f.Object, "|", f.Path, "|", f.Method, "|", f.Layer)
	if ck.seen[key] {
		return
	}
	ck.seen[key] = true
	ck.rep.Findings = append(ck.rep.Findings, f)
}

// retryable reports whether the kit's own layers may retry a method once it
// was sent: policy.Eligible's rule.
func retryable(p policy.MethodPolicy) bool {
	switch p.Kind {
	case policy.KindNoSideEffects, policy.KindIdempotent:
		return true
	case policy.KindKeyed:
		return p.DurableLedger
	}
	return false
}

// method reports what every layer does to one method, and the findings of
// its mesh layers' retries.
func (ck *checker) method(p policy.MethodPolicy, present []Layer) MethodReport {
	mr := MethodReport{Method: p.FullMethod, Kind: p.Kind.String()}
	mr.Layers = append(mr.Layers, ck.applicationLayer(p), ck.serviceConfigLayer(p))
	var retrying []Layer
	var rules []*rule
	for _, l := range present {
		la, lrules := ck.meshLayer(l, p)
		if len(lrules) > 0 {
			retrying = append(retrying, l)
		}
		rules = append(rules, lrules...)
		mr.Layers = append(mr.Layers, la)
	}
	ck.ownerFindings(p, retrying, mr.Layers)
	for _, r := range rules {
		ck.ruleFindings(p, r)
	}
	mr.Amplification = one
	for _, la := range mr.Layers {
		mr.Amplification = mr.Amplification.times(la.Attempts)
	}
	return mr
}

// applicationLayer is what the kit's client interceptor does to a method
// when the application owns retries; one attempt otherwise.
func (ck *checker) applicationLayer(p policy.MethodPolicy) LayerAttempts {
	app := LayerAttempts{Layer: layerApplication, Attempts: one}
	if ck.opts.Owner != policy.OwnerApplication {
		return app
	}
	app.Sources = []string{"the kit's client interceptor (policy.Eligible decides each retry)"}
	if retryable(p) {
		app.Attempts = Attempts{N: ck.opts.ApplicationAttempts}
		app.Budget = "the kit's retry budget per target (policy.Budget)"
	}
	return app
}

// meshLayer is what one mesh layer does to a method: the most attempts of
// its retrying rules for the method, their conditions and sources, and
// their budgets when every rule has one. It returns the rules too.
func (ck *checker) meshLayer(l Layer, p policy.MethodPolicy) (LayerAttempts, []*rule) {
	la := LayerAttempts{Layer: l, Attempts: one}
	var rules []*rule
	for _, t := range ck.tables[l] {
		for _, r := range t.resolve(p.FullMethod) {
			if r.rule != nil && r.rule.attempts.retries() {
				rules = append(rules, r.rule)
			}
		}
	}
	budgets := []string{}
	allBudgeted := true
	for _, r := range rules {
		if r.attempts.more(la.Attempts) {
			la.Attempts = r.attempts
		}
		la.Conditions = union(la.Conditions, r.conds)
		la.Sources = union(la.Sources, []string{r.source()})
		if r.budget != "" {
			budgets = union(budgets, []string{r.budget})
		} else {
			allBudgeted = false
		}
	}
	if allBudgeted && len(budgets) > 0 {
		la.Budget = strings.Join(budgets, "; ")
	}
	if l == layerXDS && len(rules) > 0 {
		la.Sources = append(la.Sources, "grpc-go applies it unless the channel is built with grpc.WithDisableRetry() (grpcint's DialOptions add it for the owners application and none)")
	}
	return la, rules
}

func (ck *checker) serviceConfigLayer(p policy.MethodPolicy) LayerAttempts {
	la := LayerAttempts{Layer: layerServiceConfig, Attempts: one}
	if ck.opts.Owner != policy.OwnerServiceConfig || ck.sc == nil {
		return la
	}
	if ck.rep.XDS {
		la.Sources = []string{"replaced by the xDS resolver's service config on an xds:/// channel"}
		return la
	}
	svc := p.Service()
	found := -1
	for _, key := range []string{p.FullMethod, "/" + svc + "/", ""} {
		for i := range ck.sc.MethodConfig {
			for _, n := range ck.sc.MethodConfig[i].Name {
				if k, ok := namePath(n.Service, n.Method); ok && k == key {
					found = i
				}
			}
			if found >= 0 {
				break
			}
		}
		if found >= 0 {
			break
		}
	}
	source := "the service config"
	if ck.opts.ServiceConfig == nil {
		source = "the service config serviceconfig.Generate writes"
	}
	la.Sources = []string{source}
	if found < 0 || ck.sc.MethodConfig[found].RetryPolicy == nil {
		return la
	}
	rp := ck.sc.MethodConfig[found].RetryPolicy
	n := min(rp.MaxAttempts, grpcMaxAttempts)
	if n > 1 {
		la.Attempts = Attempts{N: n}
		for _, code := range rp.RetryableStatusCodes {
			la.Conditions = append(la.Conditions, code)
		}
		if t := ck.sc.RetryThrottling; t != nil {
			la.Budget = fmt.Sprintf("retryThrottling (maxTokens %g, tokenRatio %g)", t.MaxTokens, t.TokenRatio)
		}
	}
	return la
}

// ruleFindings reports what is wrong with one retrying rule for one method:
// unsafe conditions and a missing budget.
func (ck *checker) ruleFindings(p policy.MethodPolicy, r *rule) {
	base := r.loc.finding("", r.layer, "", "")
	base.Method = p.FullMethod
	if unsafe := unsafeConditions(r.conds); len(unsafe) > 0 {
		f := base
		f.Conditions = unsafe
		turnOff := offFix(r.layer)
		neverSent := ", or retry only on connect-failure,refused-stream (never sent)"
		if r.layer == layerXDS {
			neverSent = "" // grpc-go reads only the gRPC conditions
		}
		switch {
		case p.Kind == policy.KindKeyed && !p.DurableLedger:
			f.Kind = findingRetryKeyedWithoutLedger
			f.Message = fmt.Sprintf("%s retries keyed method %s (%s) on %s, under which it may have run, but no durable ledger records its completions: a retry after a lost answer runs it twice",
				r.layer, p.FullMethod, r.attempts.text(), strings.Join(unsafe, ", "))
			f.Fix = "add the ledger (--keyed, not --keyed-no-ledger), or " + turnOff + neverSent
			ck.add(f)
		case !retryable(p):
			f.Kind = findingRetryNonIdempotent
			f.Message = fmt.Sprintf("%s retries non-idempotent method %s (%s) on %s, under which it may have run: a retry after a lost answer runs it twice",
				r.layer, p.FullMethod, r.attempts.text(), strings.Join(unsafe, ", "))
			f.Fix = turnOff + neverSent + ", or make it a keyed mutation with a ledger"
			ck.add(f)
		}
	}
	if r.budget == "" {
		f := base
		f.Kind = findingNoBudget
		why := r.noBudget
		if why == "" {
			why = "nothing bounds them"
		}
		f.Message = fmt.Sprintf("%s retries %s (%s) with no retry budget: %s; when the service fails, every call becomes up to %s requests", r.layer, p.FullMethod, r.attempts.text(), why, r.attempts)
		f.Fix = budgetFix(r.layer)
		ck.add(f)
	}
}

// ownerFindings reports a second retry owner.
func (ck *checker) ownerFindings(p policy.MethodPolicy, retrying []Layer, layers []LayerAttempts) {
	owner := ck.opts.Owner
	attempts := func(l Layer) LayerAttempts {
		for _, la := range layers {
			if la.Layer == l {
				return la
			}
		}
		return LayerAttempts{}
	}
	for i, l := range retrying {
		la := attempts(l)
		f := Finding{Kind: findingSecondOwner, Layer: l, Method: p.FullMethod, Conditions: la.Conditions}
		if len(la.Sources) > 0 {
			f.Object = la.Sources[0]
		}
		if r := ck.firstRule(p, l); r != nil {
			f.File, f.Document, f.Object, f.Path = r.loc.file, r.loc.doc, r.loc.object, r.loc.path
		}
		switch {
		case owner == policy.OwnerServiceConfig && l == layerXDS:
			continue // the xDS policy is the channel's own retries there; service-config-replaced says so
		case owner == policy.OwnerNone:
			f.Message = fmt.Sprintf("%s retries %s (%s) on a channel whose retry owner is none: nobody may retry it", l, p.FullMethod, la.Attempts.text())
			f.Fix = offFix(l) + ", or make " + string(l) + " the owner (mesh)"
		case owner == policy.OwnerMesh:
			if i == 0 {
				continue
			}
			f.Message = fmt.Sprintf("%s and %s both retry %s (%s × %s): two mesh layers multiply like two owners", retrying[0], l, p.FullMethod, attempts(retrying[0]).Attempts.text(), la.Attempts.text())
			f.Fix = offFix(l) + " and leave the retries to " + string(retrying[0])
		default:
			own := attempts(layerApplication)
			if owner == policy.OwnerServiceConfig {
				own = attempts(layerServiceConfig)
			}
			f.Message = fmt.Sprintf("%s retries %s (%s) on a channel whose retry owner is %s (%s): the layers multiply to %s requests per call",
				l, p.FullMethod, la.Attempts.text(), owner, own.Attempts.text(), own.Attempts.times(la.Attempts))
			f.Fix = offFix(l) + ", or make the mesh the owner and turn the channel's own retries off"
		}
		ck.add(f)
	}
}

// firstRule returns the first retrying rule of a layer for a method.
func (ck *checker) firstRule(p policy.MethodPolicy, l Layer) *rule {
	for _, t := range ck.tables[l] {
		for _, r := range t.resolve(p.FullMethod) {
			if r.rule != nil && r.rule.attempts.retries() {
				return r.rule
			}
		}
	}
	return nil
}

// coverage reports the routes of a table that match no catalog method and
// the catalog methods that no route of the table matches: at a Gateway,
// every method of the channel, once a route matches one; elsewhere, the
// methods of a service whose other methods are routed. A table whose
// unmatched requests are served (a Linkerd ServiceProfile's default route)
// reports no method.
func (ck *checker) coverage(t *table) {
	if !t.coverage || len(t.routes) == 0 || len(ck.cat.Methods()) == 0 {
		return
	}
	methods := ck.cat.Methods()
	servedServices := map[string]bool{}
	for i := range t.routes {
		r := &t.routes[i]
		if len(r.matches) == 0 {
			return // a catch-all route: every method is covered
		}
		allCatch, allNever, any := true, true, false
		var descs []string
		for _, m := range r.matches {
			allCatch = allCatch && m.catchAll && !m.never
			allNever = allNever && m.never
			descs = append(descs, m.desc)
			for _, p := range methods {
				if m.matches(p.FullMethod) {
					any = true
					servedServices[p.Service()] = true
				}
			}
		}
		if any || allCatch || allNever {
			continue
		}
		msg := fmt.Sprintf("the route (%s) matches no method of the catalog", strings.Join(descs, "; "))
		if s := closestMethod(descs, methods); s != "" {
			msg += fmt.Sprintf(" (did you mean %q?)", s)
		}
		msg += ": a renamed or misspelled method, or a service missing from the descriptors"
		f := r.loc.finding(findingRouteMatchesNothing, t.layer, msg+"; its settings apply to nothing", "match the method's current name, /package.Service/Method")
		ck.add(f)
	}
	if t.unmatchedServed || len(servedServices) == 0 {
		return
	}
	for _, p := range methods {
		if (!t.gateway && !servedServices[p.Service()]) || len(t.resolve(p.FullMethod)) > 0 {
			continue
		}
		var what string
		other := "routes match other methods of " + p.Service()
		switch {
		case t.gateway:
			other = "the gateway routes other methods of the channel"
			what = "the gateway answers its calls with 404, which gRPC clients see as UNIMPLEMENTED (Gateway API: with no matching rule attached to the parent a request comes from, \"a HTTP 404 status code MUST be returned\"), and no retries apply to them at this layer"
		case t.rank != rankFirst:
			what = "the mesh refuses its calls (GAMMA: when routes are attached to a Service, requests that match none of them are rejected; the proxy answers 404, which gRPC clients see as UNIMPLEMENTED), and no retries apply to them at this layer"
		default:
			what = "so the proxy refuses its calls (no route: 404, which gRPC clients see as UNIMPLEMENTED)"
		}
		f := t.loc.at("").finding(findingMethodNotCovered, t.layer,
			fmt.Sprintf("no route matches %s although %s: renamed, or its route was forgotten; %s", p.FullMethod, other, what),
			"add a route for "+p.FullMethod+" (or fix the route that was meant for it)")
		f.Method = p.FullMethod
		ck.add(f)
	}
}

// closestMethod suggests a catalog method for a route's exact matches.
func closestMethod(descs []string, methods []policy.MethodPolicy) string {
	names := make([]string, len(methods))
	for i, p := range methods {
		names[i] = p.FullMethod
	}
	for _, d := range descs {
		if i := strings.Index(d, "\""); i >= 0 {
			v := strings.Trim(d[i:], "\"")
			if j := strings.Index(v, "\""); j >= 0 {
				v = v[:j]
			}
			if s := closest(v, names); s != "" {
				return s
			}
		}
	}
	return ""
}

func offFix(l Layer) string {
	switch l {
	case layerIstio:
		return "set retries: {attempts: 0} on the VirtualService route (or meshConfig.defaultHttpRetryPolicy: {attempts: 0} for Istio's default)"
	case layerEnvoy:
		return "remove retry_policy from the route and its virtual host"
	case layerLinkerd:
		return "remove the retry.linkerd.io annotations (or set isRetryable: false in the ServiceProfile)"
	case layerGatewayAPI:
		return "remove the rule's retry field"
	case layerXDS:
		return "remove retry_policy from the route and its virtual host in the control plane (or dial with grpc.WithDisableRetry())"
	}
	return "turn the layer's retries off"
}

func budgetFix(l Layer) string {
	switch l {
	case layerIstio:
		return "add a DestinationRule for the host with trafficPolicy.retryBudget {percent: 10, minRetryConcurrency: 3} (or a small connectionPool.http.maxRetries)"
	case layerEnvoy:
		return "give the cluster circuit_breakers.thresholds[].retry_budget (or a small max_retries)"
	case layerLinkerd:
		return "configure the retries in a ServiceProfile with spec.retryBudget (retryRatio 0.1, minRetriesPerSecond 5, ttl 10s), as opledger policy generate --mesh linkerd writes"
	case layerGatewayAPI:
		return "retry in the mesh's own resources that have a budget, or keep attempts at 1"
	case layerXDS:
		return "leave retries to the application (the kit's budget) and remove the retry_policy, or keep num_retries at 1"
	}
	return "add a retry budget"
}

// targetScheme returns a target's scheme ("xds", "dns"…), or "".
func targetScheme(target string) string {
	scheme, _, ok := strings.Cut(target, ":")
	if !ok || strings.ContainsAny(scheme, "/.[]") {
		return ""
	}
	return strings.ToLower(scheme)
}

// targetHost returns the host a target names: the endpoint of
// "scheme:///endpoint" or "scheme://authority/endpoint", or the target
// itself.
func targetHost(target string) string {
	if target == "" {
		return ""
	}
	if targetScheme(target) == "" {
		return target
	}
	u, err := url.Parse(target)
	if err != nil {
		return ""
	}
	ep := strings.TrimPrefix(u.Path, "/")
	if ep == "" {
		ep = u.Opaque
	}
	return ep
}

// didYouMean returns ` (did you mean "x"?)` for a misspelled name, or "".
func didYouMean(s string, candidates []string) string {
	if c := closest(s, candidates); c != "" {
		return fmt.Sprintf(" (did you mean %q?)", c)
	}
	return ""
}

// closest returns the candidate within a small edit distance of s, or "".
func closest(s string, candidates []string) string { return suggest.Closest(s, candidates) }
