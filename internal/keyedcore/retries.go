package keyedcore

import (
	"errors"
	"fmt"
	"net/textproto"
	"slices"
	"strconv"
	"strings"

	"github.com/opledger/opledger/policy"
)

// The request headers of run-time retry detection (docs/retry-ownership.md,
// "Detecting a second owner at run time"). Names are lower case, as gRPC
// metadata keys are; HTTP reads them in any case.
const (
	// RetryOwnerHeader is the channel's retry owner, declared by the kit's
	// client interceptors on every request: a [Declaration] ("application",
	// "service-config", "mesh" or "none", with ";xds" on a proxyless
	// xds:/// channel).
	RetryOwnerHeader = "opledger-retry-owner"
	// AttemptHeader is the number of the attempt of the kit's own retry
	// loop (1 for the first), sent by the kit's client interceptors on
	// every attempt of a channel whose retries the application owns.
	AttemptHeader = "opledger-attempt"
	// EnvoyAttemptCountHeader is the attempt count Envoy adds when a route
	// sets include_request_attempt_count (Istio does): 1 for the first
	// attempt, more when the mesh retried.
	EnvoyAttemptCountHeader = "x-envoy-attempt-count"
	// PreviousAttemptsHeader is the number of earlier attempts grpc-go
	// (and the gRPC libraries of gRFC A6) sends on a retried or hedged
	// attempt: the retries of the channel's service config, or of the
	// control plane's retry policy on an xds:/// channel.
	PreviousAttemptsHeader = "grpc-previous-rpc-attempts"
	// SecondOwnerHeader is the response header (a trailer on gRPC and
	// connect) a server sends on the answer to a request that a layer
	// other than the channel's owner retried: the layers that are second
	// owners ([RetryJudgement.SecondOwners]), so that a client, or opledger
	// probe, sees what the server's metric counts.
	SecondOwnerHeader = "opledger-second-retry-owner"
)

// The canonical forms of the retry headers' names, as an HTTP header
// (connect's, httpint's) holds them.
var (
	HTTPRetryOwnerHeader = textproto.CanonicalMIMEHeaderKey(RetryOwnerHeader)
	HTTPAttemptHeader    = textproto.CanonicalMIMEHeaderKey(AttemptHeader)
	HTTPSecondOwner      = textproto.CanonicalMIMEHeaderKey(SecondOwnerHeader)
	httpEnvoyAttempt     = textproto.CanonicalMIMEHeaderKey(EnvoyAttemptCountHeader)
	httpPreviousAttempts = textproto.CanonicalMIMEHeaderKey(PreviousAttemptsHeader)
)

// HTTPRetryHeaders reads the retry headers of an HTTP request's header
// (an http.Header): every value of each, as RetryHeaders holds them.
func HTTPRetryHeaders(h map[string][]string) RetryHeaders {
	return RetryHeaders{Owner: h[HTTPRetryOwnerHeader], Attempt: h[HTTPAttemptHeader],
		EnvoyAttempt: h[httpEnvoyAttempt], PreviousAttempts: h[httpPreviousAttempts]}
}

// ErrRetryHeader is wrapped by the errors of ParseDeclaration and
// ParseAttemptCount: a retry header's value the kit does not read.
var ErrRetryHeader = errors.New("keyed: invalid retry header value")

// ownerNamed returns the owner whose name (policy.RetryOwner's String)
// is name, in lower case.
func ownerNamed(name string) (policy.RetryOwner, bool) {
	for _, o := range []policy.RetryOwner{policy.OwnerApplication, policy.OwnerServiceConfig, policy.OwnerMesh, policy.OwnerNone} {
		if o.String() == name {
			return o, true
		}
	}
	return 0, false
}

// Layer is a layer that retries calls, as run-time detection tells them
// apart: the kit's client ([AttemptHeader]), grpc-go's service config (or,
// on a proxyless xds:/// channel, the control plane's policy, which is the
// mesh; [PreviousAttemptsHeader]) and the mesh's proxies
// ([EnvoyAttemptCountHeader]). Each is the layer of the owner of the same
// name.
type Layer string

// The three layers.
const (
	LayerApplication   Layer = "application"
	LayerServiceConfig Layer = "service-config"
	LayerMesh          Layer = "mesh"
)

// Declaration is what a client declares of its channel in
// [RetryOwnerHeader]: the owner, and whether the channel is proxyless
// (xds:///), where grpc-go's retries are the control plane's: the mesh
// layer, not a service config's.
type Declaration struct {
	Owner policy.RetryOwner
	XDS   bool
}

// String returns the header's value: the owner, then ";xds" on a
// proxyless channel.
func (d Declaration) String() string {
	if d.XDS {
		return d.Owner.String() + ";xds"
	}
	return d.Owner.String()
}

// maxRetryHeader bounds the length of a retry header's value the kit
// reads.
const maxRetryHeader = 128

// ParseDeclaration reads a [RetryOwnerHeader] value: an owner name (in any
// letter case) and parameters in the structured-field form
// (";name" or ";name=value", RFC 8941): "xds" (a boolean: ";xds" or
// ";xds=?1" true, ";xds=?0" false) says the channel is proxyless; other
// parameters are ignored, for later versions. Anything else is an error
// wrapping [ErrRetryHeader].
func ParseDeclaration(v string) (Declaration, error) {
	if len(v) > maxRetryHeader {
		return Declaration{}, fmt.Errorf("%w: %s over %d bytes", ErrRetryHeader, RetryOwnerHeader, maxRetryHeader)
	}
	parts := strings.Split(v, ";")
	o, ok := ownerNamed(strings.ToLower(strings.Trim(parts[0], " \t")))
	if !ok {
		return Declaration{}, fmt.Errorf("%w: %s %q is not an owner (want application, service-config, mesh or none)", ErrRetryHeader, RetryOwnerHeader, v)
	}
	d := Declaration{Owner: o}
	for _, p := range parts[1:] {
		name, val, hasVal := strings.Cut(strings.Trim(p, " \t"), "=")
		if !paramName(name) {
			return Declaration{}, fmt.Errorf("%w: %s %q has a bad parameter", ErrRetryHeader, RetryOwnerHeader, v)
		}
		if name != "xds" {
			continue
		}
		switch {
		case !hasVal || val == "?1":
			d.XDS = true
		case val == "?0":
			d.XDS = false
		default:
			return Declaration{}, fmt.Errorf("%w: %s %q: xds is a boolean (?1 or ?0)", ErrRetryHeader, RetryOwnerHeader, v)
		}
	}
	return d, nil
}

// paramName reports whether s is a structured-field parameter key:
// lcalpha or "*", then lcalpha, digits, "_", "-", "." or "*".
func paramName(s string) bool {
	if s == "" || !(s[0] >= 'a' && s[0] <= 'z' || s[0] == '*') {
		return false
	}
	for i := 1; i < len(s); i++ {
		c := s[i]
		if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || strings.IndexByte("_-.*", c) >= 0) {
			return false
		}
	}
	return true
}

// maxAttemptCount is the largest attempt count the kit reads.
const maxAttemptCount = 1 << 20

// ParseAttemptCount reads the value of a count header
// ([AttemptHeader], [EnvoyAttemptCountHeader], [PreviousAttemptsHeader]):
// decimal digits (surrounding spaces allowed), at most 2^20. Anything else
// is an error wrapping [ErrRetryHeader].
func ParseAttemptCount(v string) (int, error) {
	s := strings.Trim(v, " \t")
	if s == "" || len(s) > 8 || strings.TrimLeft(s, "0123456789") != "" {
		return 0, fmt.Errorf("%w: attempt count %q is not a decimal number", ErrRetryHeader, truncateValue(v))
	}
	n, err := strconv.Atoi(s)
	if err != nil || n > maxAttemptCount {
		return 0, fmt.Errorf("%w: attempt count %q over %d", ErrRetryHeader, truncateValue(v), maxAttemptCount)
	}
	return n, nil
}

func truncateValue(v string) string {
	if len(v) > 32 {
		return v[:32] + "…"
	}
	return v
}

// RetryHeaders are a request's retry headers as a transport read them:
// every value of each, in order (nil when absent). A header sent more
// than once is read from its last value; a value that does not parse is
// read as absent.
type RetryHeaders struct {
	Owner            []string // RetryOwnerHeader
	Attempt          []string // AttemptHeader
	EnvoyAttempt     []string // EnvoyAttemptCountHeader
	PreviousAttempts []string // PreviousAttemptsHeader
}

// OwnerSource says where the owner a request was judged against comes
// from.
type OwnerSource string

// The sources of the owner.
const (
	// OwnerDeclared: the client declared it (RetryOwnerHeader).
	OwnerDeclared OwnerSource = "declared"
	// OwnerConfigured: the request declared none; the server's configured
	// owner (ServerConfig.RetryOwner).
	OwnerConfigured OwnerSource = "server"
	// OwnerFromCatalog: neither; the request is judged by the method's
	// kind in the server's catalog (see JudgeRetries).
	OwnerFromCatalog OwnerSource = "catalog"
)

// LayerRetry is one layer's retry seen on a request.
type LayerRetry struct {
	// Layer is the layer that retried.
	Layer Layer
	// Header is the header that shows it.
	Header string
	// Attempt is the request's attempt number at that layer: 2 for its
	// first retry.
	Attempt int
	// SecondOwner reports that the layer is not the channel's owner.
	SecondOwner bool
}

// RetryJudgement is the judgement of one request's retry headers.
type RetryJudgement struct {
	// Owner is the owner the request was judged against; zero when
	// judged by the catalog.
	Owner policy.RetryOwner
	// From says where Owner comes from.
	From OwnerSource
	// XDS reports that the client declared a proxyless xds:/// channel.
	XDS bool
	// Retries are the layers that retried this request (nil when it is
	// every layer's first attempt), in the order application, service
	// config or xDS, mesh proxy.
	Retries []LayerRetry
}

// SecondOwner reports whether a layer that is not the owner retried the
// request.
func (j RetryJudgement) SecondOwner() bool {
	for _, r := range j.Retries {
		if r.SecondOwner {
			return true
		}
	}
	return false
}

// SecondOwners is the value of [SecondOwnerHeader]: the layers that
// retried the request and are not the channel's owner, in the order of
// Retries, comma-separated ("service-config", "service-config, mesh");
// "" when there is none.
func (j RetryJudgement) SecondOwners() string {
	var ls []string
	for _, r := range j.Retries {
		if r.SecondOwner && !slices.Contains(ls, string(r.Layer)) {
			ls = append(ls, string(r.Layer))
		}
	}
	return strings.Join(ls, ", ")
}

// JudgeRetries judges a request's retry headers against its channel's
// owner: the client's declaration, else configured (the server's
// setting; "" for none), else the catalog. A layer retried the request
// when its header says so: AttemptHeader over 1 (the application),
// PreviousAttemptsHeader over 0 (the service config, or the mesh when the
// client declared a proxyless channel), EnvoyAttemptCountHeader over 1
// (the mesh). Against an owner, each layer other than the owner's is a
// second owner (every layer with the owner none; a second mesh layer with
// the owner mesh). Judged by the catalog, retrySafe says whether the
// method's kind lets any layer retry it (no side effects, idempotent,
// keyed): a retry of a method that is not is a second owner (its owner is
// none), and so is every layer when two retried the same request (which
// of them owns the channel is unknown; that both do is wrong).
func JudgeRetries(h RetryHeaders, configured policy.RetryOwner, retrySafe bool) RetryJudgement {
	j := RetryJudgement{From: OwnerFromCatalog}
	if d, ok := lastDeclaration(h.Owner); ok {
		j.Owner, j.From, j.XDS = d.Owner, OwnerDeclared, d.XDS
	} else if configured.Valid() {
		j.Owner, j.From = configured, OwnerConfigured
	}
	if n, ok := lastCount(h.Attempt); ok && n > 1 {
		j.Retries = append(j.Retries, LayerRetry{Layer: LayerApplication, Header: AttemptHeader, Attempt: n})
	}
	if n, ok := lastCount(h.PreviousAttempts); ok && n > 0 {
		l := LayerServiceConfig
		if j.XDS {
			l = LayerMesh
		}
		j.Retries = append(j.Retries, LayerRetry{Layer: l, Header: PreviousAttemptsHeader, Attempt: n + 1})
	}
	if n, ok := lastCount(h.EnvoyAttempt); ok && n > 1 {
		j.Retries = append(j.Retries, LayerRetry{Layer: LayerMesh, Header: EnvoyAttemptCountHeader, Attempt: n})
	}
	meshSeen := false
	for i := range j.Retries {
		r := &j.Retries[i]
		switch {
		case j.From == OwnerFromCatalog:
			r.SecondOwner = !retrySafe || len(j.Retries) > 1
		case r.Layer == LayerMesh && j.Owner == policy.OwnerMesh:
			r.SecondOwner = meshSeen // two mesh layers multiply like two owners
			meshSeen = true
		default:
			r.SecondOwner = string(r.Layer) != j.Owner.String()
		}
	}
	return j
}

func lastDeclaration(vs []string) (Declaration, bool) {
	if len(vs) == 0 {
		return Declaration{}, false
	}
	d, err := ParseDeclaration(vs[len(vs)-1])
	return d, err == nil
}

func lastCount(vs []string) (int, bool) {
	if len(vs) == 0 {
		return 0, false
	}
	n, err := ParseAttemptCount(vs[len(vs)-1])
	return n, err == nil
}
