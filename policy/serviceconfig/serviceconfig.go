package serviceconfig

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"sort"
	"strconv"
	"strings"
	"time"

	"google.golang.org/grpc/codes"

	"github.com/opledger/opledger/policy"
)

// Config is a gRPC service config, limited to the parts that concern
// retries plus the other keys grpc-go reads (so that a parsed config
// marshals back without loss). Create one with [Generate] or [Parse]; its
// [Config.JSON] is the string for grpc.WithDefaultServiceConfig.
type Config struct{ doc *document }

// JSON validates the config and returns its JSON encoding, ready for
// grpc.WithDefaultServiceConfig.
func (c *Config) JSON() (string, error) {
	if c == nil || c.doc == nil {
		return (&document{}).JSON()
	}
	return c.doc.JSON()
}

// Parse decodes a service config and checks it the way grpc-go does, and a
// little more strictly: unknown fields are errors (grpc-go drops them
// silently), retryThrottling is checked even without methodConfig, and
// durations must be well formed. Status code names are accepted in any
// letter case, as gRFC A6 allows; [Validate] reports the lower-case ones
// that grpc-go rejects. Errors wrap ErrInvalid.
func Parse(data []byte) (*Config, error) {
	d, err := parseDocument(data)
	if err != nil {
		return nil, err
	}
	return &Config{doc: d}, nil
}

// Generate derives a channel's service config from a catalog.
//
// For policy.OwnerServiceConfig it writes one method config naming every
// no-side-effects and idempotent method of the catalog individually (never a
// whole service, so that a method added later is not covered by accident),
// with a retry policy from settings, plus retryThrottling. Keyed and
// non-idempotent methods get no retry entry: a keyed mutation needs the
// application's resolve step, which grpc-go cannot do.
//
// For policy.OwnerApplication, policy.OwnerMesh and policy.OwnerNone it
// returns a config with no retry or hedging entry at all: the service config
// must not retry on a channel it does not own. An invalid owner is
// policy.ErrInvalidOwner; invalid settings are policy.ErrInvalidConfig.
func Generate(c *policy.Catalog, owner policy.RetryOwner, settings RetrySettings) (*Config, error) {
	d, err := generate(c, owner, settings)
	if err != nil {
		return nil, err
	}
	return &Config{doc: d}, nil
}

// CheckOwnership refuses a service config that retries or hedges on a
// channel it does not own: any retryPolicy or hedgingPolicy entry when owner
// is not policy.OwnerServiceConfig is an error matching ErrRetryNotOwned
// that names the first offending entry. With the application as owner the
// channel's retries are disabled, so an entry would either be ignored or,
// on a channel built without the kit, stack a second layer.
func CheckOwnership(owner policy.RetryOwner, sc *Config) error {
	var d *document
	if sc != nil {
		d = sc.doc
	}
	return checkOwnership(owner, d)
}

// document is the typed form of a service config: its JSON fields.
type document struct {
	// LoadBalancingPolicy is the deprecated load-balancing policy name.
	LoadBalancingPolicy string `json:"loadBalancingPolicy,omitempty"`
	// LoadBalancingConfig is kept verbatim; this package does not read it.
	LoadBalancingConfig json.RawMessage `json:"loadBalancingConfig,omitempty"`
	// MethodConfig lists per-method settings.
	MethodConfig []methodConfig `json:"methodConfig,omitempty"`
	// RetryThrottling is the channel's retry-throttling token bucket.
	RetryThrottling *RetryThrottling `json:"retryThrottling,omitempty"`
	// HealthCheckConfig enables client-side health checking.
	HealthCheckConfig *healthCheckConfig `json:"healthCheckConfig,omitempty"`
}

// HealthCheckConfig is the service config's healthCheckConfig object.
type healthCheckConfig struct {
	// ServiceName is the service name sent in health checks.
	ServiceName string `json:"serviceName"`
}

// MethodConfig is one entry of the service config's methodConfig list.
type methodConfig struct {
	// Name lists the methods this entry applies to. grpc-go skips an entry
	// without names.
	Name []methodName `json:"name,omitempty"`
	// WaitForReady makes calls wait for a ready connection.
	WaitForReady *bool `json:"waitForReady,omitempty"`
	// Timeout is the default call timeout.
	Timeout *duration `json:"timeout,omitempty"`
	// MaxRequestMessageBytes limits request message size.
	MaxRequestMessageBytes *int64 `json:"maxRequestMessageBytes,omitempty"`
	// MaxResponseMessageBytes limits response message size.
	MaxResponseMessageBytes *int64 `json:"maxResponseMessageBytes,omitempty"`
	// RetryPolicy makes grpc-go retry these methods.
	RetryPolicy *retryPolicy `json:"retryPolicy,omitempty"`
	// HedgingPolicy is part of gRFC A6 but grpc-go does not implement it and
	// ignores it silently. It is kept so that it can be reported.
	HedgingPolicy *hedgingPolicy `json:"hedgingPolicy,omitempty"`
}

// Name selects methods: Service and Method name one method; Service alone
// names every method of a service; both empty name every method of the
// channel. A Method without a Service is invalid.
type methodName struct {
	// Service is the full service name, "pkg.Service".
	Service string `json:"service,omitempty"`
	// Method is the method name, "Method".
	Method string `json:"method,omitempty"`
}

// Path returns the key grpc-go uses for lookups: "/pkg.Service/Method",
// "/pkg.Service/" for a whole service, or "" for the channel default. A
// method without a service is an error wrapping ErrInvalid.
func (n methodName) Path() (string, error) {
	if n.Service == "" {
		if n.Method != "" {
			return "", fmt.Errorf("%w: cannot combine empty 'service' and non-empty 'method' (%q)", ErrInvalid, n.Method)
		}
		return "", nil
	}
	return "/" + n.Service + "/" + n.Method, nil
}

// RetryPolicy is a method config's retryPolicy (gRFC A6). All fields are
// required by grpc-go.
type retryPolicy struct {
	// MaxAttempts counts the original call; it must be at least 2. grpc-go
	// clamps values above 5 (its default cap) without error.
	MaxAttempts int `json:"maxAttempts"`
	// InitialBackoff is the base delay before the first retry; > 0.
	InitialBackoff duration `json:"initialBackoff"`
	// MaxBackoff caps the delay before jitter; > 0.
	MaxBackoff duration `json:"maxBackoff"`
	// BackoffMultiplier grows the delay per retry; > 0.
	BackoffMultiplier float64 `json:"backoffMultiplier"`
	// RetryableStatusCodes lists the codes that are retried; not empty.
	RetryableStatusCodes []statusCode `json:"retryableStatusCodes"`
}

// Validate reports the problems grpc-go rejects a retry policy for: fewer
// than 2 attempts, a backoff or multiplier that is not positive, or no
// codes (the rules the package-level Validate applies too). The error wraps
// ErrInvalid and lists every problem.
func (p *retryPolicy) Validate() error {
	probs := problems(
		maxAttemptsRule.problem(int64(p.MaxAttempts), strconv.Itoa(p.MaxAttempts)),
		initialBackoffRule.problem(time.Duration(p.InitialBackoff), p.InitialBackoff.String()),
		maxBackoffRule.problem(time.Duration(p.MaxBackoff), p.MaxBackoff.String()),
		backoffMultiplierRule.problem(p.BackoffMultiplier, strconv.FormatFloat(p.BackoffMultiplier, 'g', -1, 64)),
		retryableCodesRule.problem(len(p.RetryableStatusCodes), ""),
	)
	if len(probs) > 0 {
		return fmt.Errorf("%w: invalid retry policy: %s", ErrInvalid, strings.Join(probs, ", "))
	}
	return nil
}

// HedgingPolicy is a method config's hedgingPolicy (gRFC A6). grpc-go does
// not implement hedging and ignores this object.
type hedgingPolicy struct {
	// MaxAttempts counts the original call.
	MaxAttempts int `json:"maxAttempts"`
	// HedgingDelay is the delay between hedged attempts.
	HedgingDelay *duration `json:"hedgingDelay,omitempty"`
	// NonFatalStatusCodes lists the codes that do not stop hedging.
	NonFatalStatusCodes []statusCode `json:"nonFatalStatusCodes,omitempty"`
}

// RetryThrottling is the service config's retryThrottling object: the
// gRFC A6 token bucket grpc-go keeps per server name. Each failed attempt
// takes a token, each successful call adds TokenRatio, and grpc-go retries
// only while more than half of MaxTokens remain.
type RetryThrottling struct {
	// MaxTokens is the bucket size, in (0, 1000].
	MaxTokens float64 `json:"maxTokens"`
	// TokenRatio is the tokens a successful call adds; > 0. Decimals past
	// the third are ignored.
	TokenRatio float64 `json:"tokenRatio"`
}

// validate reports the problems grpc-go rejects throttling for (the rules
// the package-level Validate applies too). The error wraps ErrInvalid and
// lists every problem.
func (t *RetryThrottling) validate() error {
	probs := problems(
		maxTokensRule.problem(t.MaxTokens, strconv.FormatFloat(t.MaxTokens, 'g', -1, 64)),
		tokenRatioRule.problem(t.TokenRatio, strconv.FormatFloat(t.TokenRatio, 'g', -1, 64)),
	)
	if len(probs) > 0 {
		return fmt.Errorf("%w: invalid retryThrottling: %s", ErrInvalid, strings.Join(probs, ", "))
	}
	return nil
}

// Duration is a time.Duration that marshals as a protobuf JSON duration
// string, such as "0.1s" or "2s", which is what grpc-go's service config
// parser requires.
type duration time.Duration

// String formats the duration as in JSON, without quotes: "0.1s".
func (d duration) String() string {
	ns := int64(d)
	sign := ""
	var sec, frac uint64
	if ns < 0 {
		sign = "-"
		u := uint64(-(ns + 1)) + 1 // avoids overflow at math.MinInt64
		sec, frac = u/1e9, u%1e9
	} else {
		sec, frac = uint64(ns)/1e9, uint64(ns)%1e9
	}
	s := sign + strconv.FormatUint(sec, 10)
	if frac != 0 {
		f := fmt.Sprintf("%09d", frac)
		s += "." + strings.TrimRight(f, "0")
	}
	return s + "s"
}

// MarshalJSON implements json.Marshaler.
func (d duration) MarshalJSON() ([]byte, error) {
	return []byte(`"` + d.String() + `"`), nil
}

// UnmarshalJSON implements json.Unmarshaler. It accepts a string of seconds
// with up to nine decimals and an "s" suffix ("1s", "0.25s", "-1.5s"), and
// rejects anything else, including "100ms".
func (d *duration) UnmarshalJSON(b []byte) error {
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		return fmt.Errorf("%w: duration must be a string like \"0.1s\": %s", ErrInvalid, truncate(string(b)))
	}
	v, err := parseDuration(s)
	if err != nil {
		return err
	}
	*d = duration(v)
	return nil
}

// maxProtoSeconds is the largest number of seconds a protobuf Duration holds.
const maxProtoSeconds = 315_576_000_000

// ParseDuration parses a protobuf JSON duration ("0.1s"): an optional minus
// sign, decimal seconds with at most nine decimals, and the suffix "s".
// Values outside time.Duration's range are errors. Errors wrap
// ErrInvalid.
func parseDuration(s string) (time.Duration, error) {
	bad := func(why string) (time.Duration, error) {
		return 0, fmt.Errorf("%w: malformed duration %q: %s", ErrInvalid, truncate(s), why)
	}
	body, ok := strings.CutSuffix(s, "s")
	if !ok {
		return bad(`missing "s" unit (write "0.1s", not "100ms")`)
	}
	neg := false
	if strings.HasPrefix(body, "-") {
		neg, body = true, body[1:]
	}
	whole, frac, hasFrac := strings.Cut(body, ".")
	if whole == "" && frac == "" {
		return bad("no digits")
	}
	if !allDigits(whole) || !allDigits(frac) {
		return bad("want digits with an optional decimal point")
	}
	if hasFrac && len(frac) > 9 {
		return bad("more than nine decimals")
	}
	var sec, ns int64
	if whole != "" {
		if len(whole) > 12 {
			return bad("out of range")
		}
		sec, _ = strconv.ParseInt(whole, 10, 64)
		if sec > maxProtoSeconds {
			return bad("out of range")
		}
	}
	if frac != "" {
		ns, _ = strconv.ParseInt(frac, 10, 64)
		for i := len(frac); i < 9; i++ {
			ns *= 10
		}
	}
	const maxSec = math.MaxInt64 / int64(time.Second)
	if sec > maxSec || (sec == maxSec && ns > math.MaxInt64%int64(time.Second)) {
		return bad("out of range for a Go time.Duration")
	}
	v := sec*int64(time.Second) + ns
	if neg {
		v = -v
	}
	return time.Duration(v), nil
}

func allDigits(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return true
}

// StatusCode is a gRPC status code that marshals as its upper-case name
// ("UNAVAILABLE"), the only spelling grpc-go accepts besides integers.
type statusCode codes.Code

var codeNames = [...]string{
	"OK", "CANCELLED", "UNKNOWN", "INVALID_ARGUMENT", "DEADLINE_EXCEEDED",
	"NOT_FOUND", "ALREADY_EXISTS", "PERMISSION_DENIED", "RESOURCE_EXHAUSTED",
	"FAILED_PRECONDITION", "ABORTED", "OUT_OF_RANGE", "UNIMPLEMENTED",
	"INTERNAL", "UNAVAILABLE", "DATA_LOSS", "UNAUTHENTICATED",
}

// numCodes is the number of gRPC status codes, 0 through 16.
const numCodes = len(codeNames)

// CodeName returns the canonical upper-case name of a gRPC code
// ("DEADLINE_EXCEEDED"), or "CODE(n)" for a value outside 0–16.
func codeName(c codes.Code) string {
	if uint32(c) < uint32(numCodes) {
		return codeNames[c]
	}
	return "CODE(" + strconv.FormatUint(uint64(c), 10) + ")"
}

// ParseCode parses a gRPC code name in any letter case (gRFC A6 allows it;
// grpc-go does not) or its integer value. Errors wrap
// ErrInvalid.
func parseCode(s string) (codes.Code, error) {
	if n, err := strconv.ParseUint(s, 10, 32); err == nil {
		if n < uint64(numCodes) {
			return codes.Code(n), nil
		}
		return 0, fmt.Errorf("%w: invalid code: %d", ErrInvalid, n)
	}
	for i, name := range codeNames {
		if strings.EqualFold(s, name) {
			return codes.Code(i), nil
		}
	}
	return 0, fmt.Errorf("%w: invalid code: %q", ErrInvalid, truncate(s))
}

// String returns the code's upper-case name.
func (c statusCode) String() string { return codeName(codes.Code(c)) }

// MarshalJSON implements json.Marshaler. A code outside 0–16 is an error.
func (c statusCode) MarshalJSON() ([]byte, error) {
	if uint32(c) >= uint32(numCodes) {
		return nil, fmt.Errorf("%w: invalid code: %d", ErrInvalid, uint32(c))
	}
	return []byte(`"` + codeNames[c] + `"`), nil
}

// UnmarshalJSON implements json.Unmarshaler. It accepts an integer 0–16 or a
// name in any letter case (see ParseCode).
func (c *statusCode) UnmarshalJSON(b []byte) error {
	var s string
	if len(b) > 0 && b[0] == '"' {
		if err := json.Unmarshal(b, &s); err != nil {
			return fmt.Errorf("%w: invalid code: %s", ErrInvalid, truncate(string(b)))
		}
		if _, err := strconv.ParseUint(s, 10, 32); err == nil {
			return fmt.Errorf("%w: invalid code: %q (a number must not be quoted)", ErrInvalid, s)
		}
	} else {
		s = string(b)
	}
	v, err := parseCode(s)
	if err != nil {
		return err
	}
	*c = statusCode(v)
	return nil
}

// truncate shortens untrusted text quoted in an error message or finding.
func truncate(s string) string {
	const max = 64
	if len(s) > max {
		return s[:max] + "…"
	}
	return s
}

// maxConfigBytes bounds the input of Parse and Validate.
const maxConfigBytes = 4 << 20

// parseDocument is [Parse].
func parseDocument(data []byte) (*document, error) {
	if len(data) > maxConfigBytes {
		return nil, fmt.Errorf("%w: larger than %d bytes", ErrInvalid, maxConfigBytes)
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	var sc document
	if err := dec.Decode(&sc); err != nil {
		if errors.Is(err, ErrInvalid) {
			return nil, err
		}
		return nil, fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, fmt.Errorf("%w: trailing data after the JSON object", ErrInvalid)
	}
	if err := sc.Validate(); err != nil {
		return nil, err
	}
	return &sc, nil
}

// Validate reports the problems grpc-go would reject the config for: a
// method without a service, a name listed twice, an invalid retry policy or
// invalid throttling. It does not judge ownership or idempotency; see
// CheckOwnership and the package-level Validate. The error wraps
// ErrInvalid.
func (sc *document) Validate() error {
	seen := make(map[string]bool)
	for i, mc := range sc.MethodConfig {
		if mc.Name == nil {
			continue // grpc-go skips the entry
		}
		if mc.RetryPolicy != nil {
			if err := mc.RetryPolicy.Validate(); err != nil {
				return fmt.Errorf("methodConfig[%d]: %w", i, err)
			}
		}
		for j, n := range mc.Name {
			path, err := n.Path()
			if err != nil {
				return fmt.Errorf("methodConfig[%d].name[%d]: %w", i, j, err)
			}
			if seen[path] {
				return fmt.Errorf("methodConfig[%d].name[%d]: %w: duplicated name %q", i, j, ErrInvalid, path)
			}
			seen[path] = true
		}
	}
	if sc.RetryThrottling != nil {
		if err := sc.RetryThrottling.validate(); err != nil {
			return err
		}
	}
	return nil
}

// JSON validates the config and returns its JSON encoding, ready for
// grpc.WithDefaultServiceConfig.
func (sc *document) JSON() (string, error) {
	if err := sc.Validate(); err != nil {
		return "", err
	}
	b, err := json.Marshal(sc)
	if err != nil {
		if errors.Is(err, ErrInvalid) {
			return "", err
		}
		return "", fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	return string(b), nil
}

// RetrySettings shape the retry policy Generate writes. A zero field takes
// its default.
type RetrySettings struct {
	// MaxAttempts counts the original call: 2 to 5; default 3.
	MaxAttempts int
	// InitialBackoff defaults to 100ms.
	InitialBackoff time.Duration
	// MaxBackoff defaults to 1s.
	MaxBackoff time.Duration
	// BackoffMultiplier defaults to 2.
	BackoffMultiplier float64
	// RetryableStatusCodes defaults to UNAVAILABLE. Every code must be one
	// that policy.Eligible retries for an idempotent method after the
	// request was sent (UNAVAILABLE, DEADLINE_EXCEEDED, UNKNOWN, INTERNAL, ABORTED,
	// RESOURCE_EXHAUSTED).
	RetryableStatusCodes []codes.Code
	// Throttling defaults to maxTokens 10, tokenRatio 0.1.
	Throttling *RetryThrottling
}

func (s RetrySettings) withDefaults() (RetrySettings, error) {
	if s.MaxAttempts == 0 {
		s.MaxAttempts = 3
	}
	if s.InitialBackoff == 0 {
		s.InitialBackoff = 100 * time.Millisecond
	}
	if s.MaxBackoff == 0 {
		s.MaxBackoff = time.Second
	}
	if s.BackoffMultiplier == 0 {
		s.BackoffMultiplier = 2
	}
	if len(s.RetryableStatusCodes) == 0 {
		s.RetryableStatusCodes = []codes.Code{codes.Unavailable}
	}
	if s.Throttling == nil {
		s.Throttling = &RetryThrottling{MaxTokens: 10, TokenRatio: 0.1}
	}
	switch {
	case !maxAttemptsRule.ok(int64(s.MaxAttempts)) || attemptsClamped(int64(s.MaxAttempts)):
		return s, fmt.Errorf("%w: MaxAttempts %d outside [%d, %d]", policy.ErrInvalidConfig, s.MaxAttempts, minAttempts, grpcMaxAttempts)
	case s.InitialBackoff <= 0 || s.MaxBackoff <= 0 || s.MaxBackoff < s.InitialBackoff:
		return s, fmt.Errorf("%w: backoff %s..%s must be positive and ordered", policy.ErrInvalidConfig, s.InitialBackoff, s.MaxBackoff)
	case !(s.BackoffMultiplier >= 1) || math.IsInf(s.BackoffMultiplier, 0):
		return s, fmt.Errorf("%w: BackoffMultiplier %v must be >= 1", policy.ErrInvalidConfig, s.BackoffMultiplier)
	}
	for _, c := range s.RetryableStatusCodes {
		if d := retryable(c); d.Action != policy.Retry {
			return s, fmt.Errorf("%w: %s is not retryable (%s)", policy.ErrInvalidConfig, codeName(c), d.Reason)
		}
	}
	if err := s.Throttling.validate(); err != nil {
		return s, fmt.Errorf("%w: %w", policy.ErrInvalidConfig, err)
	}
	return s, nil
}

// generate is [Generate].
func generate(c *policy.Catalog, owner policy.RetryOwner, settings RetrySettings) (*document, error) {
	if !owner.Valid() {
		return nil, fmt.Errorf("%w: %d", policy.ErrInvalidOwner, uint8(owner))
	}
	if owner != policy.OwnerServiceConfig {
		return &document{}, nil
	}
	s, err := settings.withDefaults()
	if err != nil {
		return nil, err
	}
	var names []methodName
	for _, p := range c.Methods() {
		if p.Kind != policy.KindNoSideEffects && p.Kind != policy.KindIdempotent {
			continue
		}
		names = append(names, methodName{Service: p.Service(), Method: p.Method()})
	}
	sc := &document{RetryThrottling: &RetryThrottling{MaxTokens: s.Throttling.MaxTokens, TokenRatio: s.Throttling.TokenRatio}}
	if len(names) == 0 {
		return sc, nil
	}
	codeSet := make(map[codes.Code]bool)
	var list []statusCode
	for _, c := range s.RetryableStatusCodes {
		if !codeSet[c] {
			codeSet[c] = true
			list = append(list, statusCode(c))
		}
	}
	sort.Slice(list, func(i, j int) bool { return list[i] < list[j] })
	sc.MethodConfig = []methodConfig{{
		Name: names,
		RetryPolicy: &retryPolicy{
			MaxAttempts:          s.MaxAttempts,
			InitialBackoff:       duration(s.InitialBackoff),
			MaxBackoff:           duration(s.MaxBackoff),
			BackoffMultiplier:    s.BackoffMultiplier,
			RetryableStatusCodes: list,
		},
	}}
	return sc, nil
}

// checkOwnership is [CheckOwnership].
func checkOwnership(owner policy.RetryOwner, sc *document) error {
	if !owner.Valid() {
		return fmt.Errorf("%w: %d", policy.ErrInvalidOwner, uint8(owner))
	}
	if owner == policy.OwnerServiceConfig || sc == nil {
		return nil
	}
	for _, mc := range sc.MethodConfig {
		var pol string
		switch {
		case mc.RetryPolicy != nil:
			pol = "retryPolicy"
		case mc.HedgingPolicy != nil:
			pol = "hedgingPolicy"
		default:
			continue
		}
		name := ""
		if len(mc.Name) > 0 {
			name, _ = mc.Name[0].Path()
		}
		return &ownershipError{Owner: owner, Name: name, Policy: pol}
	}
	return nil
}
