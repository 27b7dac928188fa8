package serviceconfig

import (
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"

	"google.golang.org/grpc/codes"

	"github.com/opledger/opledger/internal/methodname"
	"github.com/opledger/opledger/internal/suggest"
	"github.com/opledger/opledger/policy"
)

// FindingKind is a stable, machine-readable name for a kind of problem the
// validator reports. The string values do not change between releases;
// docs/retry-ownership.md lists them with what each means.
type FindingKind string

// Finding kinds.
const (
	// findingSyntax: the file is not a single JSON object.
	findingSyntax FindingKind = "syntax"
	// findingUnknownField: a key that grpc-go does not know, such as the
	// misspelled "retryPolicyy". grpc-go ignores it silently.
	findingUnknownField FindingKind = "unknown-field"
	// findingKeyCase: a known key in the wrong letter case ("MaxAttempts").
	// grpc-go accepts it only because encoding/json folds case.
	findingKeyCase FindingKind = "key-case"
	// findingDuplicateKey: the same key twice in one JSON object; only the
	// last one counts.
	findingDuplicateKey FindingKind = "duplicate-key"
	// findingWrongType: a value of the wrong JSON type; grpc-go rejects it.
	findingWrongType FindingKind = "wrong-type"
	// findingMissingName: a methodConfig entry without "name"; grpc-go skips it.
	findingMissingName FindingKind = "missing-name"
	// findingMethodWithoutService: a name with a method but no service;
	// grpc-go rejects the config.
	findingMethodWithoutService FindingKind = "method-without-service"
	// findingDuplicateName: the same name twice; grpc-go rejects the config.
	findingDuplicateName FindingKind = "duplicate-name"
	// findingUnknownService: a service name that matches no service in the
	// catalog (renamed, misspelled or in the wrong letter case). Its settings
	// apply to nothing, silently.
	findingUnknownService FindingKind = "unknown-service"
	// findingUnknownMethod: a method name that matches no method in the
	// catalog (renamed, misspelled or in the wrong letter case). The method
	// then runs with the channel defaults, silently.
	findingUnknownMethod FindingKind = "unknown-method"
	// findingInvalidRetryPolicy: a retry policy grpc-go rejects: maxAttempts
	// below 2 or not an integer, a missing field, a backoff or multiplier that
	// is not positive, no retryable codes.
	findingInvalidRetryPolicy FindingKind = "invalid-retry-policy"
	// findingInvalidDuration: a duration that is not a string like "0.1s".
	findingInvalidDuration FindingKind = "invalid-duration"
	// findingInvalidCode: a status code that is neither a known name nor an
	// integer 0–16.
	findingInvalidCode FindingKind = "invalid-code"
	// findingCodeCase: a status code name not in upper case ("unavailable");
	// grpc-go rejects it.
	findingCodeCase FindingKind = "code-case"
	// findingCodeNotRetryable: a retryable code that will not change on a
	// retry (INVALID_ARGUMENT, PERMISSION_DENIED…) or OK; see policy.Eligible.
	findingCodeNotRetryable FindingKind = "code-not-retryable"
	// findingMaxAttemptsClamped: maxAttempts above 5; grpc-go clamps it to 5
	// silently.
	findingMaxAttemptsClamped FindingKind = "max-attempts-clamped"
	// findingHedgingPolicy: a hedgingPolicy; grpc-go ignores it silently.
	findingHedgingPolicy FindingKind = "hedging-policy"
	// findingRetryNonIdempotent: a retry policy covers a non-idempotent
	// method.
	findingRetryNonIdempotent FindingKind = "retry-non-idempotent"
	// findingRetryKeyedWithoutLedger: a retry policy covers a keyed method
	// that has no durable ledger behind it.
	findingRetryKeyedWithoutLedger FindingKind = "retry-keyed-without-ledger"
	// findingRetryNotOwned: a retry or hedging policy on a channel whose
	// retry owner is not the service config.
	findingRetryNotOwned FindingKind = "retry-not-owned"
	// findingInvalidThrottling: retryThrottling that grpc-go rejects (or, when
	// methodConfig is absent, accepts by mistake).
	findingInvalidThrottling FindingKind = "invalid-throttling"
)

// Finding is one problem found by Validate.
type Finding struct {
	// Kind is the stable kind of problem.
	Kind FindingKind
	// Path locates the problem in the JSON document, such as
	// "methodConfig[0].retryPolicy.maxAttempts"; "" for the whole document.
	Path string
	// Name is the method config name involved, exactly as grpc-go keys it:
	// "/pkg.Service/Method", "/pkg.Service/" for a whole service, "" for the
	// channel default (then HasName is true) — or "" with HasName false when
	// no name is involved. For method-without-service it is the method as
	// written, since grpc-go has no key for it.
	Name string
	// HasName distinguishes the channel-default name "" from no name.
	HasName bool
	// Method is the catalog method the finding is about, when a service or
	// default name covers it; "" otherwise.
	Method string
	// Message explains the problem and, where possible, the fix.
	Message string
}

// String formats the finding on one line:
// `kind: path name "…" [method …]: message`.
func (f Finding) String() string {
	var b strings.Builder
	b.WriteString(string(f.Kind))
	b.WriteString(": ")
	if f.Path != "" {
		b.WriteString(f.Path)
	} else {
		b.WriteString("(document)")
	}
	if f.HasName {
		b.WriteString(" name ")
		b.WriteString(strconv.Quote(f.Name))
	}
	if f.Method != "" && f.Method != f.Name {
		b.WriteString(" method ")
		b.WriteString(strconv.Quote(f.Method))
	}
	b.WriteString(": ")
	b.WriteString(f.Message)
	return b.String()
}

// Validate checks a service config (JSON, as given to
// grpc.WithDefaultServiceConfig or served by a resolver) against a catalog
// and the channel's retry owner, and returns every finding: problems in the
// document in document order, then retry policies that cover methods they
// must not, in catalog order. It is stricter than grpc-go: besides what
// grpc-go rejects, it reports what grpc-go accepts silently but is almost
// certainly a mistake (see the Finding kinds). The range rules of retry
// policies and throttling are those of RetryPolicy.Validate and
// RetryThrottling.Validate. A nil catalog is an empty catalog. An invalid
// owner is an error wrapping policy.ErrInvalidOwner; everything wrong with
// the document itself is a finding, never an error, and Validate never
// panics.
func Validate(data []byte, c *policy.Catalog, owner policy.RetryOwner) ([]Finding, error) {
	if !owner.Valid() {
		return nil, fmt.Errorf("%w: %d", policy.ErrInvalidOwner, uint8(owner))
	}
	v := &validator{cat: c, owner: owner, names: make(map[string]*nameEntry)}
	if len(data) > maxConfigBytes {
		v.add(Finding{Kind: findingSyntax, Message: fmt.Sprintf("larger than %d bytes", maxConfigBytes)})
		return v.findings, nil
	}
	root, err := parseJSONTree(data)
	if err != nil {
		v.add(Finding{Kind: findingSyntax, Message: "not valid JSON: " + err.Error()})
		return v.findings, nil
	}
	if root.kind != jsonObject {
		v.add(Finding{Kind: findingSyntax, Message: "the service config must be a JSON object, not " + root.kind.String()})
		return v.findings, nil
	}
	v.document(root)
	v.coverage()
	return v.findings, nil
}

type nameEntry struct {
	path  string // JSON path of the name
	entry int    // index into validator.entries
}

type entryInfo struct {
	retry bool // has a retryPolicy (valid or not)
}

type validator struct {
	cat      *policy.Catalog
	owner    policy.RetryOwner
	findings []Finding
	names    map[string]*nameEntry
	entries  []entryInfo
}

func (v *validator) add(f Finding) { v.findings = append(v.findings, f) }

func (v *validator) at(kind FindingKind, path, format string, args ...any) {
	v.add(Finding{Kind: kind, Path: path, Message: fmt.Sprintf(format, args...)})
}

// fields checks an object's keys against the known ones and returns the
// value for each known key, reporting unknown, wrong-case and duplicate keys.
func (v *validator) fields(obj *jsonValue, path string, known ...string) map[string]*jsonValue {
	out := make(map[string]*jsonValue, len(known))
	seen := make(map[string]bool, len(obj.fields))
	for _, f := range obj.fields {
		fp := joinPath(path, f.key)
		match := ""
		for _, k := range known {
			if f.key == k {
				match = k
				break
			}
		}
		if match == "" {
			for _, k := range known {
				if strings.EqualFold(f.key, k) {
					match = k
					v.at(findingKeyCase, fp, "key %q should be spelled %q; grpc-go accepts it only because Go's JSON decoder ignores case", f.key, k)
					break
				}
			}
		}
		if match == "" {
			msg := fmt.Sprintf("unknown field %q; grpc-go ignores it silently", truncate(f.key))
			if s := closest(f.key, known); s != "" {
				msg += fmt.Sprintf(" (did you mean %q?)", s)
			} else if path == "" && isMethodConfigKey(f.key) {
				msg += fmt.Sprintf(" (%q belongs inside a methodConfig entry)", f.key)
			}
			v.at(findingUnknownField, fp, "%s", msg)
			continue
		}
		if seen[match] {
			v.at(findingDuplicateKey, fp, "key %q appears more than once in this object; only the last one counts", match)
		}
		seen[match] = true
		out[match] = f.val
	}
	return out
}

func (v *validator) expect(val *jsonValue, path string, kind jsonKind) bool {
	if val.kind == kind {
		return true
	}
	v.at(findingWrongType, path, "want %s, got %s; grpc-go rejects the config", kind, val.kind)
	return false
}

func (v *validator) document(root *jsonValue) {
	f := v.fields(root, "", "loadBalancingPolicy", "loadBalancingConfig", "methodConfig", "retryThrottling", "healthCheckConfig")
	// Visit the known keys in the order they appear in the document.
	for _, fld := range root.fields {
		for key, val := range f {
			if val != fld.val || val.kind == jsonNull {
				continue
			}
			switch key {
			case "loadBalancingPolicy":
				v.expect(val, key, jsonString)
			case "healthCheckConfig":
				if v.expect(val, key, jsonObject) {
					h := v.fields(val, key, "serviceName")
					if sn := h["serviceName"]; sn != nil && sn.kind != jsonNull {
						v.expect(sn, "healthCheckConfig.serviceName", jsonString)
					}
				}
			case "methodConfig":
				if v.expect(val, key, jsonArray) {
					for i, mc := range val.elems {
						v.methodConfig(mc, fmt.Sprintf("methodConfig[%d]", i))
					}
				}
			case "retryThrottling":
				v.throttling(val, key)
			}
		}
	}
}

func (v *validator) methodConfig(mc *jsonValue, path string) {
	if mc.kind == jsonNull {
		return
	}
	if !v.expect(mc, path, jsonObject) {
		return
	}
	idx := len(v.entries)
	v.entries = append(v.entries, entryInfo{})
	f := v.fields(mc, path, "name", "waitForReady", "timeout", "maxRequestMessageBytes", "maxResponseMessageBytes", "retryPolicy", "hedgingPolicy")
	v.plainFields(f, path)
	rp, hp := f["retryPolicy"], f["hedgingPolicy"]
	hasRetry := rp != nil && rp.kind != jsonNull
	hasHedge := hp != nil && hp.kind != jsonNull
	v.entries[idx] = entryInfo{retry: hasRetry}

	names := v.nameList(f["name"], path, idx)
	if hasRetry {
		v.retryPolicy(rp, joinPath(path, "retryPolicy"))
	}
	if hasHedge {
		v.hedgingPolicy(hp, joinPath(path, "hedgingPolicy"))
	}
	if v.owner != policy.OwnerServiceConfig && (hasRetry || hasHedge) {
		pol := "retryPolicy"
		if !hasRetry {
			pol = "hedgingPolicy"
		}
		msg := fmt.Sprintf("%s on a channel whose retry owner is %s; only the %s owner may retry in the service config, otherwise retries multiply across layers", pol, v.owner, policy.OwnerServiceConfig)
		if len(names) == 0 {
			v.at(findingRetryNotOwned, joinPath(path, pol), "%s", msg)
		}
		for _, key := range names {
			v.add(Finding{Kind: findingRetryNotOwned, Path: joinPath(path, pol), Name: key, HasName: true, Message: msg})
		}
	}
}

// plainFields checks the fields of a methodConfig entry that are not about
// names or retries: waitForReady, timeout and the message size limits.
func (v *validator) plainFields(f map[string]*jsonValue, path string) {
	if w := f["waitForReady"]; w != nil && w.kind != jsonNull {
		v.expect(w, joinPath(path, "waitForReady"), jsonBool)
	}
	if t := f["timeout"]; t != nil && t.kind != jsonNull {
		v.duration(t, joinPath(path, "timeout"))
	}
	for _, k := range []string{"maxRequestMessageBytes", "maxResponseMessageBytes"} {
		if n := f[k]; n != nil && n.kind != jsonNull {
			p := joinPath(path, k)
			if v.expect(n, p, jsonNumber) {
				if _, err := strconv.ParseInt(n.num.String(), 10, 64); err != nil {
					v.at(findingWrongType, p, "%s is not a 64-bit integer; grpc-go rejects the config", truncate(n.num.String()))
				}
			}
		}
	}
}

// nameList checks the name list nm of methodConfig entry idx at path and
// returns grpc-go's keys of its valid names.
func (v *validator) nameList(nm *jsonValue, path string, idx int) []string {
	var names []string
	if nm == nil || nm.kind == jsonNull {
		msg := "methodConfig entry without \"name\"; grpc-go skips it, so its settings apply to nothing"
		v.at(findingMissingName, path, "%s", msg)
		return nil
	}
	if !v.expect(nm, joinPath(path, "name"), jsonArray) {
		return nil
	}
	if len(nm.elems) == 0 {
		v.at(findingMissingName, joinPath(path, "name"), "empty name list; this entry applies to nothing")
	}
	for j, n := range nm.elems {
		np := fmt.Sprintf("%s.name[%d]", path, j)
		if key, ok := v.name(n, np, idx); ok {
			names = append(names, key)
		}
	}
	return names
}

// name checks one name object and records it; it returns grpc-go's key.
func (v *validator) name(n *jsonValue, path string, entry int) (string, bool) {
	if !v.expect(n, path, jsonObject) {
		return "", false
	}
	f := v.fields(n, path, "service", "method")
	var svc, m string
	ok := true
	if s := f["service"]; s != nil && s.kind != jsonNull {
		if v.expect(s, joinPath(path, "service"), jsonString) {
			svc = s.str
		} else {
			ok = false
		}
	}
	if s := f["method"]; s != nil && s.kind != jsonNull {
		if v.expect(s, joinPath(path, "method"), jsonString) {
			m = s.str
		} else {
			ok = false
		}
	}
	if !ok {
		return "", false
	}
	key, err := methodName{Service: svc, Method: m}.Path()
	if err != nil {
		v.add(Finding{Kind: findingMethodWithoutService, Path: path, Name: truncate(m), HasName: true,
			Message: fmt.Sprintf("method %q has no service; grpc-go rejects the config (\"cannot combine empty 'service' and non-empty 'method'\")", truncate(m))})
		return "", false
	}
	if prev, dup := v.names[key]; dup {
		v.add(Finding{Kind: findingDuplicateName, Path: path, Name: key, HasName: true,
			Message: fmt.Sprintf("name already listed at %s; grpc-go rejects the config (\"duplicated name\")", prev.path)})
		return "", false
	}
	v.names[key] = &nameEntry{path: path, entry: entry}
	v.resolveName(key, svc, m, path)
	return key, true
}

// resolveName reports a name that matches nothing in the catalog.
func (v *validator) resolveName(key, svc, m, path string) {
	if svc == "" {
		return // the channel default matches every method
	}
	methods := serviceMethods(v.cat, svc)
	if len(methods) == 0 {
		hint := ""
		for _, s := range services(v.cat) {
			if strings.EqualFold(s, svc) {
				hint = fmt.Sprintf(" (the catalog has %q: letter case differs)", s)
				break
			}
		}
		if hint == "" {
			if s := closest(svc, services(v.cat)); s != "" {
				hint = fmt.Sprintf(" (did you mean %q?)", s)
			}
		}
		kind := findingUnknownService
		what := "service"
		if m != "" {
			kind, what = findingUnknownMethod, "method"
		}
		v.add(Finding{Kind: kind, Path: path, Name: key, HasName: true,
			Message: fmt.Sprintf("%s matches nothing: service %q is not in the catalog%s; grpc-go applies the entry to nothing, silently", what, truncate(svc), hint)})
		return
	}
	if m == "" {
		return
	}
	if _, ok := v.cat.Lookup(key); ok {
		return
	}
	var names []string
	hint := ""
	for _, p := range methods {
		mn := p.Method()
		names = append(names, mn)
		if strings.EqualFold(mn, m) {
			hint = fmt.Sprintf(" (the catalog has %q: letter case differs)", mn)
		}
	}
	if hint == "" {
		if s := closest(m, names); s != "" {
			hint = fmt.Sprintf(" (did you mean %q?)", s)
		}
	}
	v.add(Finding{Kind: findingUnknownMethod, Path: path, Name: key, HasName: true,
		Message: fmt.Sprintf("method matches nothing: service %q has no method %q%s; the method it was meant for runs with the channel defaults, silently", svc, truncate(m), hint)})
}

func (v *validator) retryPolicy(rp *jsonValue, path string) {
	if !v.expect(rp, path, jsonObject) {
		return
	}
	f := v.fields(rp, path, "maxAttempts", "initialBackoff", "maxBackoff", "backoffMultiplier", "retryableStatusCodes")
	var missing []string
	for _, k := range []string{"maxAttempts", "initialBackoff", "maxBackoff", "backoffMultiplier", "retryableStatusCodes"} {
		if f[k] == nil || f[k].kind == jsonNull {
			missing = append(missing, k)
		}
	}
	if len(missing) > 0 {
		v.at(findingInvalidRetryPolicy, path, "missing %s; grpc-go rejects the config", strings.Join(missing, ", "))
	}
	if ma := f["maxAttempts"]; ma != nil && ma.kind != jsonNull {
		p := joinPath(path, "maxAttempts")
		if v.expect(ma, p, jsonNumber) {
			n, err := strconv.ParseInt(ma.num.String(), 10, 64)
			switch {
			case err != nil:
				v.at(findingInvalidRetryPolicy, p, "maxAttempts %s is not an integer; grpc-go rejects the config", truncate(ma.num.String()))
			case !maxAttemptsRule.ok(n):
				v.at(findingInvalidRetryPolicy, p, "%s; grpc-go rejects the config", maxAttemptsRule.problem(n, strconv.FormatInt(n, 10)))
			case attemptsClamped(n):
				v.at(findingMaxAttemptsClamped, p, "maxAttempts %d is above %d; grpc-go clamps it to %d silently", n, grpcMaxAttempts, grpcMaxAttempts)
			}
		}
	}
	for _, r := range []rule[time.Duration]{initialBackoffRule, maxBackoffRule} {
		if d := f[r.field]; d != nil && d.kind != jsonNull {
			p := joinPath(path, r.field)
			if dur, ok := v.duration(d, p); ok {
				if prob := r.problem(dur, duration(dur).String()); prob != "" {
					v.at(findingInvalidRetryPolicy, p, "%s; grpc-go rejects the config", prob)
				}
			}
		}
	}
	if bm := f[backoffMultiplierRule.field]; bm != nil && bm.kind != jsonNull {
		p := joinPath(path, backoffMultiplierRule.field)
		if x, ok := v.number(bm, p); ok {
			if prob := backoffMultiplierRule.problem(x, truncate(bm.num.String())); prob != "" {
				v.at(findingInvalidRetryPolicy, p, "%s; grpc-go rejects the config", prob)
			}
		}
	}
	if cs := f[retryableCodesRule.field]; cs != nil && cs.kind != jsonNull {
		p := joinPath(path, retryableCodesRule.field)
		if v.expect(cs, p, jsonArray) {
			if prob := retryableCodesRule.problem(len(cs.elems), ""); prob != "" {
				v.at(findingInvalidRetryPolicy, p, "%s; grpc-go rejects the config", prob)
			}
			v.codes(cs, p, true)
		}
	}
}

func (v *validator) hedgingPolicy(hp *jsonValue, path string) {
	v.at(findingHedgingPolicy, path, "grpc-go does not implement hedging and ignores hedgingPolicy silently; remove it (use a retryPolicy on an idempotent method instead)")
	if !v.expect(hp, path, jsonObject) {
		return
	}
	f := v.fields(hp, path, "maxAttempts", "hedgingDelay", "nonFatalStatusCodes")
	if d := f["hedgingDelay"]; d != nil && d.kind != jsonNull {
		v.duration(d, joinPath(path, "hedgingDelay"))
	}
	if cs := f["nonFatalStatusCodes"]; cs != nil && cs.kind != jsonNull {
		p := joinPath(path, "nonFatalStatusCodes")
		if v.expect(cs, p, jsonArray) {
			v.codes(cs, p, false)
		}
	}
}

// codes checks a list of status codes; retryableCodes marks the
// retryableStatusCodes of a retry policy, whose every code must be worth
// retrying.
func (v *validator) codes(cs *jsonValue, path string, retryableCodes bool) {
	seen := make(map[codes.Code]bool)
	for i, c := range cs.elems {
		p := fmt.Sprintf("%s[%d]", path, i)
		var code codes.Code
		switch c.kind {
		case jsonString:
			parsed, err := parseCode(c.str)
			if err != nil || isDigits(c.str) {
				v.at(findingInvalidCode, p, "%q is not a gRPC status code name; grpc-go rejects the config", truncate(c.str))
				continue
			}
			if c.str != codeNames[parsed] {
				v.at(findingCodeCase, p, "code %q must be written %q; grpc-go accepts upper case only and rejects the config", c.str, codeNames[parsed])
			}
			code = parsed
		case jsonNumber:
			n, err := strconv.ParseUint(c.num.String(), 10, 32)
			if err != nil || n >= uint64(numCodes) {
				v.at(findingInvalidCode, p, "%s is not a gRPC status code (0–16); grpc-go rejects the config", truncate(c.num.String()))
				continue
			}
			code = codes.Code(n)
		default:
			v.at(findingInvalidCode, p, "a status code must be a name like \"UNAVAILABLE\", not %s; grpc-go rejects the config", c.kind)
			continue
		}
		if seen[code] {
			continue
		}
		seen[code] = true
		if retryableCodes {
			if d := retryable(code); d.Action != policy.Retry {
				v.at(findingCodeNotRetryable, p, "%s is not worth retrying even for an idempotent method (%s)", codeName(code), d.Reason)
			}
		}
	}
}

func isDigits(s string) bool { return s != "" && allDigits(s) }

func (v *validator) duration(d *jsonValue, path string) (dur time.Duration, ok bool) {
	if d.kind != jsonString {
		v.at(findingInvalidDuration, path, "want a duration string like \"0.1s\", got %s; grpc-go rejects the config", d.kind)
		return 0, false
	}
	t, err := parseDuration(d.str)
	if err != nil {
		v.at(findingInvalidDuration, path, "%q is not a duration like \"0.1s\" (seconds with an \"s\" suffix); grpc-go rejects the config", truncate(d.str))
		return 0, false
	}
	return t, true
}

// number reads a JSON number as a float64, reporting a value of another
// type. A number out of float64's range reads as NaN, which no rule
// accepts.
func (v *validator) number(x *jsonValue, path string) (float64, bool) {
	if !v.expect(x, path, jsonNumber) {
		return 0, false
	}
	n, err := strconv.ParseFloat(x.num.String(), 64)
	if err != nil {
		return math.NaN(), true
	}
	return n, true
}

func (v *validator) throttling(rt *jsonValue, path string) {
	if !v.expect(rt, path, jsonObject) {
		return
	}
	f := v.fields(rt, path, maxTokensRule.field, tokenRatioRule.field)
	for _, r := range []rule[float64]{maxTokensRule, tokenRatioRule} {
		p := joinPath(path, r.field)
		x := f[r.field]
		if x == nil || x.kind == jsonNull {
			v.at(findingInvalidThrottling, p, "%s is missing; it must %s", r.field, r.want)
			continue
		}
		if n, ok := v.number(x, p); ok {
			if prob := r.problem(n, truncate(x.num.String())); prob != "" {
				v.at(findingInvalidThrottling, p, "%s", prob)
			}
		}
	}
}

// coverage applies grpc-go's lookup (exact name, then service, then channel
// default) to every catalog method and reports retry policies that cover
// methods they must not.
func (v *validator) coverage() {
	for _, p := range v.cat.Methods() {
		svc := p.Service()
		var key string
		var ne *nameEntry
		for _, k := range []string{p.FullMethod, "/" + svc + "/", ""} {
			if e, ok := v.names[k]; ok {
				key, ne = k, e
				break
			}
		}
		if ne == nil || !v.entries[ne.entry].retry {
			continue
		}
		scope := "its own entry"
		if key != p.FullMethod {
			scope = fmt.Sprintf("the entry for %q", key)
			if key == "" {
				scope = "the channel default entry"
			}
		}
		switch {
		case p.Kind == policy.KindKeyed && !p.DurableLedger:
			v.add(Finding{Kind: findingRetryKeyedWithoutLedger, Path: ne.path, Name: key, HasName: true, Method: p.FullMethod,
				Message: fmt.Sprintf("keyed method %s is retried by %s but has no durable ledger behind it, so a retry after a lost response runs the mutation twice", p.FullMethod, scope)})
		case p.Kind != policy.KindKeyed && p.Kind != policy.KindIdempotent && p.Kind != policy.KindNoSideEffects:
			v.add(Finding{Kind: findingRetryNonIdempotent, Path: ne.path, Name: key, HasName: true, Method: p.FullMethod,
				Message: fmt.Sprintf("non-idempotent method %s is retried by %s; a retry after a lost response runs it twice (mark it idempotency_level = IDEMPOTENT only if that is true)", p.FullMethod, scope)})
		}
	}
}

// joinPath appends an object key to a JSON path; a key that is not a plain
// identifier is quoted, so that a path never spans lines.
func joinPath(path, key string) string {
	if !methodname.IsIdent(key) {
		return path + "[" + strconv.Quote(truncate(key)) + "]"
	}
	if path == "" {
		return key
	}
	return path + "." + key
}

// closest returns the candidate within a small edit distance of s, or "".
func closest(s string, candidates []string) string { return suggest.Closest(s, candidates) }

// isMethodConfigKey reports whether key belongs in a methodConfig entry: a
// retryPolicy at the top level is a known way to get no retries at all.
func isMethodConfigKey(key string) bool {
	for _, k := range []string{"name", "retryPolicy", "hedgingPolicy", "timeout", "waitForReady"} {
		if strings.EqualFold(key, k) {
			return true
		}
	}
	return false
}

// services returns the names of the services of cat's methods, sorted.
func services(cat *policy.Catalog) []string {
	var out []string
	for _, p := range cat.Methods() {
		if svc := p.Service(); svc != "" && !slices.Contains(out, svc) {
			out = append(out, svc)
		}
	}
	slices.Sort(out)
	return out
}

// serviceMethods returns cat's methods of service svc.
func serviceMethods(cat *policy.Catalog, svc string) []policy.MethodPolicy {
	var out []policy.MethodPolicy
	for _, p := range cat.Methods() {
		if p.Service() == svc {
			out = append(out, p)
		}
	}
	return out
}
