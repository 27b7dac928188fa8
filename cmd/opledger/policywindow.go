package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/opledger/opledger/internal/keyedconf"
	"github.com/opledger/opledger/internal/methodname"
	"github.com/opledger/opledger/policy"
	"github.com/opledger/opledger/policy/serviceconfig"
)

// findingWindow is the kind of a window finding: a client keeps sending
// one key for longer than the ledger honours it.
const findingWindow = "window-outlasts-retention"

// grpcMaxAttempts is grpc-go's cap on a retry policy's maxAttempts: it
// clamps larger values without error.
const grpcMaxAttempts = 5

// methodRetentions is the repeatable --method-retention flag:
// /pkg.Service/Method=DURATION, a keyed method's own retention
// (policy.MethodPolicy.Retention).
type methodRetentions map[string]time.Duration

func (m methodRetentions) String() string {
	names := make([]string, 0, len(m))
	for n, d := range m {
		names = append(names, n+"="+d.String())
	}
	sort.Strings(names)
	return strings.Join(names, ",")
}

func (m methodRetentions) Set(s string) error {
	name, dur, ok := strings.Cut(s, "=")
	if !ok {
		return fmt.Errorf("%q: want /pkg.Service/Method=DURATION, as /shop.v1.Orders/Create=6h", s)
	}
	if methodname.Check(name) != nil {
		return fmt.Errorf("%q is not a full method name like /pkg.Service/Method", name)
	}
	d, err := time.ParseDuration(dur)
	if err != nil || d <= 0 {
		return fmt.Errorf("%s: retention %q: want a positive duration, as 6h", name, dur)
	}
	if _, dup := m[name]; dup {
		return fmt.Errorf("%s is given twice", name)
	}
	m[name] = d
	return nil
}

// windowFlags are policy check's flags about the ledger's window.
type windowFlags struct {
	retention, skew, resolve *time.Duration
	methods                  methodRetentions
}

func addWindowFlags(pf *policyFlags) *windowFlags {
	w := &windowFlags{methods: methodRetentions{}}
	w.retention = pf.fs.Duration("retention", 24*time.Hour, "")
	w.skew = pf.fs.Duration("clock-skew", -1, "") // negative: the ledger's default
	w.resolve = pf.fs.Duration("resolve-window", 0, "")
	pf.fs.Var(w.methods, "method-retention", "")
	return w
}

// ledgerWindow is the retention and clock skew the check judges against,
// as ledger.WithRetention and ledger.WithClockSkew set them.
type ledgerWindow struct {
	retention, skew time.Duration
}

// window validates the flags and returns the ledger's retention and skew;
// the skew defaults as the ledger's: a minute, or a tenth of the retention
// when that is shorter.
func (w *windowFlags) window() (ledgerWindow, error) {
	lw := ledgerWindow{retention: *w.retention, skew: *w.skew}
	if lw.retention <= 0 {
		return lw, errors.New("--retention must be positive")
	}
	if lw.skew < 0 {
		lw.skew = min(time.Minute, lw.retention/10)
	}
	if lw.skew >= lw.retention {
		return lw, fmt.Errorf("--clock-skew %v must be shorter than --retention %v", lw.skew, lw.retention)
	}
	if *w.resolve < 0 {
		return lw, errors.New("--resolve-window must not be negative")
	}
	return lw, nil
}

// applyRetentions gives the catalog's keyed methods their
// --method-retention, refused as a server refuses it when it is built: a
// method that is not keyed with a ledger, a retention longer than the
// ledger's, or one no longer than the clock skew (no key would be honoured).
func (w *windowFlags) applyRetentions(cat *policy.Catalog, lw ledgerWindow) (*policy.Catalog, error) {
	names := make([]string, 0, len(w.methods))
	for n := range w.methods {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		d := w.methods[n]
		p, ok := cat.Lookup(n)
		switch {
		case !ok:
			return nil, fmt.Errorf("--method-retention: unknown method %q", n)
		case p.Kind != policy.KindKeyed || !p.DurableLedger:
			return nil, fmt.Errorf("--method-retention: %s is not a keyed method with a ledger (mark it with --keyed)", n)
		case d > lw.retention:
			return nil, fmt.Errorf("--method-retention: %s: retention %v is longer than the ledger's %v (--retention): a server refuses it", n, d, lw.retention)
		case d <= lw.skew:
			return nil, fmt.Errorf("--method-retention: %s: retention %v is not longer than the clock skew %v: every key would be refused", n, d, lw.skew)
		}
		p.Retention = d
		var err error
		if cat, err = cat.With(p); err != nil {
			return nil, fmt.Errorf("--method-retention: %w", err)
		}
	}
	return cat, nil
}

// windowFinding is one client window that outlasts a keyed method's
// window; its JSON form is what --json prints.
type windowFinding struct {
	File          string  `json:"file"`
	Kind          string  `json:"kind"`
	Path          string  `json:"path,omitempty"`
	Name          *string `json:"name,omitempty"`
	Method        string  `json:"method"`
	Source        string  `json:"source"` // "service-config" or "resolve-window"
	Window        string  `json:"window"`
	WindowSeconds float64 `json:"windowSeconds"`
	Retention     string  `json:"retention"`
	ClockSkew     string  `json:"clockSkew"`
	Message       string  `json:"message"`
}

// String formats the finding as the service config's findings are:
// `kind: path name "…" method "…": message`.
func (f windowFinding) String() string {
	var b strings.Builder
	b.WriteString(f.Kind + ": ")
	if f.Path != "" {
		b.WriteString(f.Path + " ")
	}
	if f.Name != nil && *f.Name != f.Method {
		b.WriteString("name " + strconv.Quote(*f.Name) + " ")
	}
	b.WriteString("method " + strconv.Quote(f.Method) + ": " + f.Message)
	return b.String()
}

// windowCheck is what checkWindows judges: the catalog, the channel's
// owner, its service config (nil for none, or one that did not parse: its
// findings say why) and where it was read, the clients' resolve window
// (0: the kit client's default when the application owns retries) and the
// ledger's window.
type windowCheck struct {
	cat     *policy.Catalog
	owner   policy.RetryOwner
	sc      *serviceconfig.Config
	scPath  string
	resolve time.Duration
	ledger  ledgerWindow
}

// checkWindows reports every keyed method with a ledger whose clients may
// send one key for longer than the method's window (its retention, or the
// ledger's, minus the clock skew): a retry after the window is refused as
// IDEMPOTENCY_KEY_EXPIRED (a key with a birth) or runs again (a key
// without one, past its retention). Two windows are judged: the service
// config's retry policy of the method, when the service config owns the
// channel's retries (its attempts and backoff bound how long grpc-go
// retries one call), and the kit client's resolve window (given, or its
// default when the application owns the retries).
func checkWindows(wc windowCheck) ([]windowFinding, error) {
	var retries *scRetryPolicies
	if wc.sc != nil && wc.owner == policy.OwnerServiceConfig {
		js, err := wc.sc.JSON()
		if err != nil {
			return nil, err
		}
		retries = new(scRetryPolicies)
		if err := json.Unmarshal([]byte(js), retries); err != nil {
			return nil, err
		}
	}
	resolve, resolveSource := wc.resolve, "--resolve-window"
	if resolve == 0 && wc.owner == policy.OwnerApplication {
		resolve, resolveSource = keyedconf.DefaultResolveWindow, "the kit client's default resolve window"
	}
	var out []windowFinding
	for _, p := range wc.cat.Methods() {
		if p.Kind != policy.KindKeyed || !p.DurableLedger {
			continue
		}
		retention := wc.ledger.retention
		if p.Retention > 0 && p.Retention < retention {
			retention = p.Retention
		}
		honoured := retention - wc.ledger.skew
		base := windowFinding{File: wc.scPath, Kind: findingWindow, Method: p.FullMethod,
			Retention: retention.String(), ClockSkew: wc.ledger.skew.String()}
		if retries != nil {
			if rp, path, name, ok := retries.lookup(p); ok {
				if w, how := rp.window(); w > honoured {
					f := base
					f.Source, f.Path, f.Name = "service-config", path, &name
					f.setWindow(w, honoured, "grpc-go's retries of one call ("+how+")",
						"lower maxAttempts or maxBackoff, lengthen the method's retention, or leave the keyed method to the application owner")
					out = append(out, f)
				}
			}
		}
		if resolve > honoured {
			f := base
			f.File, f.Source = "("+resolveSource+")", "resolve-window"
			f.setWindow(resolve, honoured, "the client's resolves of one key ("+resolveSource+")",
				"shorten the client's keyed.WithResolveWindow (or its deadline), or lengthen the method's retention")
			out = append(out, f)
		}
	}
	return out, nil
}

// setWindow fills the finding's window and message.
func (f *windowFinding) setWindow(w, honoured time.Duration, what, fix string) {
	f.Window, f.WindowSeconds = w.String(), w.Seconds()
	f.Message = fmt.Sprintf("%s may last %v, longer than the %v the ledger honours a key (retention %s minus clock skew %s): "+
		"a retry after that is refused as IDEMPOTENCY_KEY_EXPIRED (a key with a birth) or, past the retention, runs again (a key without one); %s",
		what, w, honoured, f.Retention, f.ClockSkew, fix)
}

// scRetryPolicies is what checkWindows reads of a service config (its
// JSON, as serviceconfig writes it back): the names and retry policies of
// its method configs.
type scRetryPolicies struct {
	MethodConfig []struct {
		Name []struct {
			Service string `json:"service"`
			Method  string `json:"method"`
		} `json:"name"`
		RetryPolicy *scRetryPolicy `json:"retryPolicy"`
	} `json:"methodConfig"`
}

// scRetryPolicy is a method config's retryPolicy.
type scRetryPolicy struct {
	MaxAttempts       int     `json:"maxAttempts"`
	InitialBackoff    string  `json:"initialBackoff"`
	MaxBackoff        string  `json:"maxBackoff"`
	BackoffMultiplier float64 `json:"backoffMultiplier"`
}

// lookup returns the retry policy grpc-go applies to the method: the
// first method config naming the method, else its service, else the
// channel default (gRFC A6), with its JSON path and name; ok is false when
// that config has no retry policy or nothing names the method.
func (r *scRetryPolicies) lookup(p policy.MethodPolicy) (rp *scRetryPolicy, path, name string, ok bool) {
	for _, key := range []string{p.FullMethod, "/" + p.Service() + "/", ""} {
		for i, mc := range r.MethodConfig {
			for _, n := range mc.Name {
				if k, valid := scNamePath(n.Service, n.Method); valid && k == key {
					if mc.RetryPolicy == nil {
						return nil, "", "", false
					}
					return mc.RetryPolicy, fmt.Sprintf("methodConfig[%d].retryPolicy", i), key, true
				}
			}
		}
	}
	return nil, "", "", false
}

// scNamePath is the key grpc-go looks a method config name up by.
func scNamePath(service, method string) (string, bool) {
	switch {
	case service == "":
		return "", method == ""
	case method == "":
		return "/" + service + "/", true
	}
	return "/" + service + "/" + method, true
}

// window returns how long grpc-go may go on retrying one call under the
// policy: the sum of the bounds of the waits before each retry (gRFC A6:
// the n-th retry waits up to min(initialBackoff × multiplier^(n-1),
// maxBackoff)), with maxAttempts capped at grpc-go's 5; the attempts' own
// durations are not counted (the call's deadline bounds them). It
// saturates instead of overflowing.
func (rp *scRetryPolicy) window() (time.Duration, string) {
	n := min(rp.MaxAttempts, grpcMaxAttempts)
	initial, maxB := protoSeconds(rp.InitialBackoff), protoSeconds(rp.MaxBackoff)
	total, wait := 0.0, initial
	for range n - 1 {
		total += min(wait, maxB)
		wait *= rp.BackoffMultiplier
	}
	how := fmt.Sprintf("%d attempts, waits up to %s, ×%g, at most %s each", n, rp.InitialBackoff, rp.BackoffMultiplier, rp.MaxBackoff)
	if total*1e9 >= math.MaxInt64 {
		return time.Duration(math.MaxInt64), how
	}
	return time.Duration(total * 1e9), how
}

// protoSeconds reads a protobuf JSON duration as serviceconfig writes it
// ("0.1s") in seconds; 0 if malformed (serviceconfig has validated it).
func protoSeconds(s string) float64 {
	v, err := strconv.ParseFloat(strings.TrimSuffix(s, "s"), 64)
	if err != nil || v < 0 {
		return 0
	}
	return v
}
