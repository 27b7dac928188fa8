package mesh

import (
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"time"
)

// istioValidation applies Istio's own validation of a resource (the
// validating webhook, which istiod also runs when it reads the resource;
// istio/istio pkg/config/validation and the CRD schemas): any rule broken
// makes Istio refuse the whole resource, so what it says is not applied and
// the defaults stay in force. Each broken rule is an invalid-resource
// finding.
type istioValidation struct {
	c      *Config
	what   string // "VirtualService"
	effect string // what stays in force instead
	// rejected reports that a rule was broken.
	rejected bool
}

// reject records one broken rule.
func (v *istioValidation) reject(at location, msg, fix string) {
	v.rejected = true
	v.c.add(at.finding(findingInvalidResource, layerIstio, msg+"; Istio's validation rejects the whole "+v.what+", so none of it is applied: "+v.effect, fix))
}

// bad reports a value Istio rejects: with a validation, the resource is
// rejected; without one (the mesh config, which Istio does not validate
// this way), the value is reported as read differently than written.
func (c *Config) bad(val *istioValidation, at location, msg, fix string) {
	if val != nil {
		val.reject(at, msg, fix)
		return
	}
	c.add(at.finding(findingInvalidValue, layerIstio, msg, fix))
}

// istioDuration checks a duration as Istio does (agent.ValidateDuration and
// the CRD's duration(self) >= duration('1ms')): at least 1ms, in whole
// milliseconds.
func istioDuration(v any) (time.Duration, string) {
	d, ok := duration(v)
	switch {
	case !ok:
		return 0, "is not a duration such as \"2s\" or \"25ms\""
	case d < time.Millisecond:
		return d, "must be at least 1ms"
	case d%time.Millisecond != 0:
		return d, "must be in whole milliseconds (Istio supports no finer precision)"
	}
	return d, ""
}

// checkDuration rejects a field that is not a valid Istio duration.
func (c *Config) checkDuration(val *istioValidation, at location, field string, v any) {
	if _, why := istioDuration(v); why != "" {
		c.bad(val, at, fmt.Sprintf("%s %s %s", field, describe(v), why), "write a duration of at least 1ms, such as \"2s\"")
	}
}

// istioRetryOnValid reports whether one element of retryOn passes Istio's
// validation (agent.ValidateHTTPRetry): the list is split at commas without
// trimming, and each element must be an HTTP status code Go's net/http
// knows, or one of Envoy's retry conditions.
func istioRetryOnValid(tok string) bool {
	if n, err := strconv.Atoi(tok); err == nil && knownHTTPStatus(n) {
		return true
	}
	_, ok := envoyConditions[tok]
	return ok
}

// isDNSLabel reports whether s is an RFC 1123 label, as Kubernetes
// namespaces are.
func isDNSLabel(s string) bool {
	if s == "" || len(s) > 63 {
		return false
	}
	for i, r := range s {
		switch {
		case r >= 'a' && r <= 'z', r >= '0' && r <= '9':
		case r == '-' && i > 0 && i < len(s)-1:
		default:
			return false
		}
	}
	return true
}

// validateExportTo applies Istio's rules for exportTo (validateExportTo):
// ".", "*" or namespace names, no duplicates, "*" alone; "~" is for
// ServiceEntries only.
func (c *Config) validateExportTo(at location, exportTo []string, ns string, val *istioValidation) {
	seen := map[string]bool{}
	for _, e := range exportTo {
		key := e
		if e == "." {
			key = ns
		}
		switch {
		case seen[key]:
			val.reject(at, fmt.Sprintf("exportTo lists %q twice", truncate(e)), "list each namespace once")
		case e == "~":
			val.reject(at, "exportTo ~ (none) is not allowed for an Istio configuration object", "remove the resource instead, or export it to \".\"")
		case e != "." && e != "*" && !isDNSLabel(e):
			val.reject(at, fmt.Sprintf("exportTo %q is not \".\", \"*\" or a namespace name", truncate(e)), "fix the entry")
		}
		seen[key] = true
	}
	if seen["*"] && len(exportTo) > 1 {
		val.reject(at, "exportTo cannot mix \"*\" with other entries", "write exportTo: [\"*\"] alone")
	}
}

// validateRegex applies Istio's check of a regular expression
// (validateStringRegexp): at most 1024 bytes, and one Go's regexp package
// compiles.
func validateRegex(re string) string {
	if re == "" {
		return "an empty regex"
	}
	if len(re) > 1024 {
		return "a regex longer than 1024 bytes"
	}
	if _, err := regexp.Compile(re); err != nil {
		return "an invalid regex: " + strings.ReplaceAll(err.Error(), "\n", " ")
	}
	return ""
}

// strList reads a field that is a list of strings; ok is false when the
// field is set to something else (a type the CRD schema rejects).
func strList(o obj, name string) (out []string, path string, ok bool) {
	v, p, found := o.key(name)
	if !found {
		return nil, "", true
	}
	list, isList := v.([]any)
	if !isList {
		return nil, p, false
	}
	for _, e := range list {
		s, isStr := e.(string)
		if !isStr {
			return nil, p, false
		}
		out = append(out, s)
	}
	return out, p, true
}
