package mesh

import (
	"fmt"
	"regexp"
	"strconv"
	"strings"
)

// maxRegexBytes bounds a regular expression read from a configuration.
const maxRegexBytes = 4096

// matcher decides whether a route matches a gRPC request for a method,
// given its path /pkg.Service/Method.
type matcher struct {
	desc string // for messages: `uri prefix "/shop.v1.Orders/"`
	fn   func(path string) bool
	// conditional: the match has further conditions (headers, query
	// parameters, ports, source labels…) that only some requests meet, so
	// a route after it still applies to the others.
	conditional bool
	// catchAll: the path part matches every path.
	catchAll bool
	// never: the match cannot select a gRPC request (an HTTP method other
	// than POST).
	never bool
	// gw is what Gateway API's precedence ranks the match by, for a match
	// of an HTTPRoute or GRPCRoute rule (see precedence.go).
	gw gwKey
}

func (m matcher) matches(path string) bool {
	return !m.never && (m.catchAll || (m.fn != nil && m.fn(path)))
}

func fold(s string, ignoreCase bool) string {
	if ignoreCase {
		return strings.ToLower(s)
	}
	return s
}

func caseNote(ignoreCase bool) string {
	if ignoreCase {
		return " (any case)"
	}
	return ""
}

func exactMatcher(what, v string, ignoreCase bool) matcher {
	want := fold(v, ignoreCase)
	return matcher{desc: fmt.Sprintf("%s exact %s%s", what, strconv.Quote(truncate(v)), caseNote(ignoreCase)),
		fn: func(p string) bool { return fold(p, ignoreCase) == want }}
}

// prefixMatcher is a plain string prefix (Istio, Envoy).
func prefixMatcher(what, v string, ignoreCase bool) matcher {
	want := fold(v, ignoreCase)
	return matcher{desc: fmt.Sprintf("%s prefix %s%s", what, strconv.Quote(truncate(v)), caseNote(ignoreCase)),
		fn:       func(p string) bool { return strings.HasPrefix(fold(p, ignoreCase), want) },
		catchAll: v == "" || v == "/"}
}

// segmentPrefixMatcher matches whole path elements: "/a" matches "/a" and
// "/a/b" but not "/ab" (Gateway API PathPrefix, Envoy
// path_separated_prefix). A trailing slash is ignored.
func segmentPrefixMatcher(what, v string, ignoreCase bool) matcher {
	want := strings.TrimRight(fold(v, ignoreCase), "/")
	return matcher{desc: fmt.Sprintf("%s prefix %s%s", what, strconv.Quote(truncate(v)), caseNote(ignoreCase)),
		fn: func(p string) bool {
			p = fold(p, ignoreCase)
			return p == want || strings.HasPrefix(p, want+"/")
		},
		catchAll: want == ""}
}

// regexMatcher matches the whole path against an RE2 expression, as Envoy's
// safe_regex (and so Istio's uri regex) and Linkerd's pathRegex do.
func regexMatcher(what, re string, ignoreCase bool) (matcher, error) {
	if len(re) > maxRegexBytes {
		return matcher{}, fmt.Errorf("the regular expression is longer than %d bytes", maxRegexBytes)
	}
	flags := ""
	if ignoreCase {
		flags = "(?i)"
	}
	c, err := regexp.Compile(flags + "^(?:" + re + ")$")
	if err != nil {
		return matcher{}, fmt.Errorf("invalid regular expression %s: %v", strconv.Quote(truncate(re)), err)
	}
	return matcher{desc: fmt.Sprintf("%s regex %s%s", what, strconv.Quote(truncate(re)), caseNote(ignoreCase)),
		fn: c.MatchString}, nil
}

// grpcMethodMatcher is a GRPCRoute method match: exact service and/or
// method, or regular expressions for either.
func grpcMethodMatcher(service, method string, regex bool) (matcher, error) {
	if !regex {
		m := matcher{desc: fmt.Sprintf("method %s", strconv.Quote(truncate(service+"/"+method))),
			gw: gwKey{grpc: true, svcLen: len(service), methLen: len(method)}}
		m.fn = func(p string) bool {
			svc, meth, ok := splitPath(p)
			return ok && (service == "" || svc == service) && (method == "" || meth == method)
		}
		return m, nil
	}
	var sre, mre *regexp.Regexp
	for _, x := range []struct {
		re  string
		dst **regexp.Regexp
	}{{service, &sre}, {method, &mre}} {
		if x.re == "" {
			continue
		}
		if len(x.re) > maxRegexBytes {
			return matcher{}, fmt.Errorf("the regular expression is longer than %d bytes", maxRegexBytes)
		}
		c, err := regexp.Compile("^(?:" + x.re + ")$")
		if err != nil {
			return matcher{}, fmt.Errorf("invalid regular expression %s: %v", strconv.Quote(truncate(x.re)), err)
		}
		*x.dst = c
	}
	return matcher{desc: fmt.Sprintf("method regex %s", strconv.Quote(truncate(service+"/"+method))),
		gw: gwKey{grpc: true, regex: true},
		fn: func(p string) bool {
			svc, meth, ok := splitPath(p)
			return ok && (sre == nil || sre.MatchString(svc)) && (mre == nil || mre.MatchString(meth))
		}}, nil
}

// allMatcher matches every request: a route without match conditions.
func allMatcher(desc string) matcher { return matcher{desc: desc, catchAll: true} }

// splitPath splits /pkg.Service/Method.
func splitPath(p string) (service, method string, ok bool) {
	rest, ok := strings.CutPrefix(p, "/")
	if !ok {
		return "", "", false
	}
	service, method, ok = strings.Cut(rest, "/")
	return service, method, ok && service != "" && method != "" && !strings.Contains(method, "/")
}
