package policy

import (
	"fmt"
	"sort"
	"time"

	"github.com/opledger/opledger/internal/methodname"
)

// Kind classifies what repeating a method does.
type Kind uint8

// Method kinds. The zero value is KindNonIdempotent, the safe default for a
// method nobody has classified.
const (
	// KindNonIdempotent: running the method twice may apply its effect twice.
	// It is never retried once it may have reached the server.
	KindNonIdempotent Kind = iota
	// KindNoSideEffects: the method only reads (idempotency_level
	// NO_SIDE_EFFECTS). It is also idempotent.
	KindNoSideEffects
	// KindIdempotent: running the method twice has the same effect as
	// running it once (idempotency_level IDEMPOTENT).
	KindIdempotent
	// KindKeyed: a mutation made safe to repeat by a caller-supplied
	// idempotency key, provided a durable ledger records its completion
	// (see MethodPolicy.DurableLedger).
	KindKeyed
)

// String returns "non-idempotent", "no-side-effects", "idempotent" or "keyed".
func (k Kind) String() string {
	switch k {
	case KindNonIdempotent:
		return "non-idempotent"
	case KindNoSideEffects:
		return "no-side-effects"
	case KindIdempotent:
		return "idempotent"
	case KindKeyed:
		return "keyed"
	default:
		return fmt.Sprintf("Kind(%d)", uint8(k))
	}
}

// Shape is a method's streaming shape.
type Shape uint8

// Streaming shapes.
const (
	// ShapeUnary: one request, one response.
	ShapeUnary Shape = iota
	// ShapeClientStream: a stream of requests, one response.
	ShapeClientStream
	// ShapeServerStream: one request, a stream of responses.
	ShapeServerStream
	// ShapeBidiStream: streams in both directions.
	ShapeBidiStream
)

// String returns "unary", "client-stream", "server-stream" or "bidi-stream".
func (s Shape) String() string {
	switch s {
	case ShapeUnary:
		return "unary"
	case ShapeClientStream:
		return "client-stream"
	case ShapeServerStream:
		return "server-stream"
	case ShapeBidiStream:
		return "bidi-stream"
	default:
		return fmt.Sprintf("Shape(%d)", uint8(s))
	}
}

// ShapeOf returns the shape for a method's client and server streaming flags.
func ShapeOf(clientStreams, serverStreams bool) Shape {
	switch {
	case clientStreams && serverStreams:
		return ShapeBidiStream
	case clientStreams:
		return ShapeClientStream
	case serverStreams:
		return ShapeServerStream
	default:
		return ShapeUnary
	}
}

// MethodPolicy is what the retry machinery knows about one method.
type MethodPolicy struct {
	// FullMethod is the method's full name, "/pkg.Service/Method", as gRPC
	// passes it to interceptors.
	FullMethod string
	// Kind classifies what repeating the method does.
	Kind Kind
	// Shape is the method's streaming shape.
	Shape Shape
	// DurableLedger states that a durable operation ledger records the
	// completion of this keyed method, so that a repeated key replays the
	// first outcome instead of running again. It is meaningful only for
	// KindKeyed; a keyed method without it is never retried.
	DurableLedger bool
	// Retention, when positive, is how long a key of this keyed method is
	// remembered from its birth, when shorter than the ledger's retention
	// (a server refuses a longer one when it is built): a key born
	// before its window (the retention minus the ledger's clock skew) is
	// refused as expired. Zero means the ledger's retention.
	Retention time.Duration
	// UnknownBirth says what a server does with a key of this keyed
	// method that carries no readable birth (a key that is not a UUIDv7,
	// sent without a first-sent time): AcceptUnknownBirth (the zero value)
	// or RefuseUnknownBirth.
	UnknownBirth BirthPolicy
}

// BirthPolicy says what a server does with a key that carries no
// readable birth: its ledger cannot refuse a late retry of such a key as
// expired, so past the retention the call runs again.
type BirthPolicy uint8

const (
	// AcceptUnknownBirth accepts such a key, as any other, and counts it
	// (the servers' opledger.key.birth attribute reads "unknown"): past
	// the ledger's retention, a retry of it runs again. The default, so
	// that foreign clients that make random keys keep working.
	AcceptUnknownBirth BirthPolicy = iota
	// RefuseUnknownBirth refuses such a key as invalid, before anything
	// runs: callers must send a UUIDv7 key or a first-sent time.
	RefuseUnknownBirth
)

// String returns "accept" or "refuse".
func (b BirthPolicy) String() string {
	switch b {
	case AcceptUnknownBirth:
		return "accept"
	case RefuseUnknownBirth:
		return "refuse"
	}
	return fmt.Sprintf("BirthPolicy(%d)", uint8(b))
}

// Service returns the service part of FullMethod ("pkg.Service"), or "" if
// FullMethod is malformed.
func (p MethodPolicy) Service() string {
	svc, _, ok := splitFullMethod(p.FullMethod)
	if !ok {
		return ""
	}
	return svc
}

// Method returns the method part of FullMethod ("Method"), or "" if
// FullMethod is malformed.
func (p MethodPolicy) Method() string {
	_, m, ok := splitFullMethod(p.FullMethod)
	if !ok {
		return ""
	}
	return m
}

// splitFullMethod splits "/pkg.Service/Method" into "pkg.Service" and
// "Method". ok is false unless the name has exactly that form, with a
// service made of dot-separated identifiers and a method identifier, and
// is at most 512 bytes long (the grammar the ledger also enforces).
func splitFullMethod(fullMethod string) (service, method string, ok bool) {
	service, method, err := methodname.Split(fullMethod)
	return service, method, err == nil
}

// Catalog maps full method names to method policies. A Catalog is immutable
// once built and safe for concurrent use; the With methods return modified
// copies.
type Catalog struct {
	methods  map[string]MethodPolicy
	services map[string][]string // service -> sorted full method names
}

// NewCatalog builds a catalog from method policies. Every FullMethod must be
// well formed (errInvalidMethodName) and listed once (errDuplicateMethod).
func NewCatalog(policies ...MethodPolicy) (*Catalog, error) {
	m := make(map[string]MethodPolicy, len(policies))
	for _, p := range policies {
		if err := checkPolicy(p); err != nil {
			return nil, err
		}
		if _, dup := m[p.FullMethod]; dup {
			return nil, fmt.Errorf("%w: %q", errDuplicateMethod, p.FullMethod)
		}
		m[p.FullMethod] = p
	}
	return newCatalog(m), nil
}

func checkPolicy(p MethodPolicy) error {
	if _, _, err := methodname.Split(p.FullMethod); err != nil {
		return fmt.Errorf("%w: %q: %w", errInvalidMethodName, truncate(p.FullMethod), err)
	}
	if p.Kind > KindKeyed {
		return fmt.Errorf("%w: %q has unknown kind %d", ErrInvalidConfig, p.FullMethod, uint8(p.Kind))
	}
	if p.Shape > ShapeBidiStream {
		return fmt.Errorf("%w: %q has unknown shape %d", ErrInvalidConfig, p.FullMethod, uint8(p.Shape))
	}
	return nil
}

func newCatalog(m map[string]MethodPolicy) *Catalog {
	c := &Catalog{methods: m, services: make(map[string][]string)}
	for name := range m {
		svc, _, _ := splitFullMethod(name)
		c.services[svc] = append(c.services[svc], name)
	}
	for _, names := range c.services {
		sort.Strings(names)
	}
	return c
}

// size returns the number of methods in the catalog.
func (c *Catalog) size() int {
	if c == nil {
		return 0
	}
	return len(c.methods)
}

// Lookup returns the policy of a full method name. Matching is exact and
// case-sensitive, as in gRPC.
func (c *Catalog) Lookup(fullMethod string) (MethodPolicy, bool) {
	if c == nil {
		return MethodPolicy{}, false
	}
	p, ok := c.methods[fullMethod]
	return p, ok
}

// Methods returns every method policy, sorted by full method name.
func (c *Catalog) Methods() []MethodPolicy {
	if c == nil {
		return nil
	}
	out := make([]MethodPolicy, 0, len(c.methods))
	for _, svc := range c.serviceNames() {
		out = append(out, c.serviceMethods(svc)...)
	}
	return out
}

// serviceNames returns the names of the services in the catalog, sorted.
func (c *Catalog) serviceNames() []string {
	if c == nil {
		return nil
	}
	out := make([]string, 0, len(c.services))
	for svc := range c.services {
		out = append(out, svc)
	}
	sort.Strings(out)
	return out
}

// serviceMethods returns the policies of one service's methods, sorted by
// full method name; nil if the service is not in the catalog.
func (c *Catalog) serviceMethods(service string) []MethodPolicy {
	if c == nil {
		return nil
	}
	names := c.services[service]
	if len(names) == 0 {
		return nil
	}
	out := make([]MethodPolicy, len(names))
	for i, n := range names {
		out[i] = c.methods[n]
	}
	return out
}

// With returns a copy of the catalog in which the given policies are added,
// or replace the policies of the same full method names.
func (c *Catalog) With(policies ...MethodPolicy) (*Catalog, error) {
	m := make(map[string]MethodPolicy, c.size()+len(policies))
	if c != nil {
		for k, v := range c.methods {
			m[k] = v
		}
	}
	seen := make(map[string]bool, len(policies))
	for _, p := range policies {
		if err := checkPolicy(p); err != nil {
			return nil, err
		}
		if seen[p.FullMethod] {
			return nil, fmt.Errorf("%w: %q", errDuplicateMethod, p.FullMethod)
		}
		seen[p.FullMethod] = true
		m[p.FullMethod] = p
	}
	return newCatalog(m), nil
}

// WithKeyed returns a copy of the catalog in which the named method, which
// must already be in the catalog (errUnknownMethod), is a keyed mutation.
// durableLedger states whether a durable ledger records its completions.
// Its shape is kept.
func (c *Catalog) WithKeyed(fullMethod string, durableLedger bool) (*Catalog, error) {
	p, ok := c.Lookup(fullMethod)
	if !ok {
		return nil, fmt.Errorf("%w: %q", errUnknownMethod, fullMethod)
	}
	p.Kind = KindKeyed
	p.DurableLedger = durableLedger
	return c.With(p)
}
