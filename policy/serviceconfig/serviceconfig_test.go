package serviceconfig

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/opledger/opledger/policy"
)

// grpcAccepts builds a real client with js as its default service config and
// returns NewClient's error.
func grpcAccepts(t testing.TB, js string) error {
	t.Helper()
	cc, err := grpc.NewClient("passthrough:///x",
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultServiceConfig(js))
	if err != nil {
		return err
	}
	cc.Close()
	return nil
}

// appliedMethodConfig returns the method config grpc-go applies to method
// once the channel has left idle with js as its default service config.
func appliedMethodConfig(t *testing.T, js, method string) grpc.MethodConfig {
	t.Helper()
	cc, err := grpc.NewClient("passthrough:///x",
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultServiceConfig(js))
	if err != nil {
		t.Fatalf("grpc.NewClient rejected the generated config: %v\n%s", err, js)
	}
	defer cc.Close()
	cc.Connect()
	// The resolver applies the default config asynchronously when the
	// channel leaves idle; poll briefly for it.
	deadline := time.Now().Add(5 * time.Second)
	for {
		mc := cc.GetMethodConfig(method)
		if mc.RetryPolicy != nil || time.Now().After(deadline) {
			return mc
		}
		time.Sleep(time.Millisecond)
	}
}

func TestGenerateForServiceConfigOwner(t *testing.T) {
	c := testCatalog(t)
	sc, err := generate(c, policy.OwnerServiceConfig, RetrySettings{})
	if err != nil {
		t.Fatal(err)
	}
	js, err := sc.JSON()
	if err != nil {
		t.Fatal(err)
	}
	const want = `{"methodConfig":[{"name":[{"service":"shop.v1.Catalog","method":"List"},` +
		`{"service":"shop.v1.Orders","method":"Get"},{"service":"shop.v1.Orders","method":"Put"},` +
		`{"service":"shop.v1.Orders","method":"Watch"}],` +
		`"retryPolicy":{"maxAttempts":3,"initialBackoff":"0.1s","maxBackoff":"1s","backoffMultiplier":2,"retryableStatusCodes":["UNAVAILABLE"]}}],` +
		`"retryThrottling":{"maxTokens":10,"tokenRatio":0.1}}`
	if js != want {
		t.Errorf("generated\n%s\nwant\n%s", js, want)
	}
	if err := grpcAccepts(t, js); err != nil {
		t.Fatalf("grpc.NewClient: %v", err)
	}
	mc := appliedMethodConfig(t, js, "/shop.v1.Orders/Put")
	rp := mc.RetryPolicy
	if rp == nil || rp.MaxAttempts != 3 || rp.InitialBackoff != 100*time.Millisecond || rp.MaxBackoff != time.Second ||
		rp.BackoffMultiplier != 2 || !rp.RetryableStatusCodes[codes.Unavailable] || len(rp.RetryableStatusCodes) != 1 {
		t.Errorf("grpc-go applied %+v", rp)
	}
	// Keyed and non-idempotent methods get no retry entry.
	for _, m := range []string{"/shop.v1.Orders/Create", "/shop.v1.Orders/Upload", "/shop.v1.Orders/Chat"} {
		if strings.Contains(js, `"method":"`+strings.TrimPrefix(m, "/shop.v1.Orders/")+`"`) {
			t.Errorf("%s has a retry entry", m)
		}
	}
	// The validator finds nothing in what the generator writes.
	findings, err := Validate([]byte(js), c, policy.OwnerServiceConfig)
	if err != nil || len(findings) != 0 {
		t.Errorf("Validate(generated) = %v, %v", findings, err)
	}
	// And the typed parser reads it back unchanged.
	back, err := parseDocument([]byte(js))
	if err != nil {
		t.Fatal(err)
	}
	js2, _ := back.JSON()
	if js2 != js {
		t.Errorf("round trip changed the config:\n%s\n%s", js, js2)
	}
}

func TestGenerateSettings(t *testing.T) {
	c := testCatalog(t)
	sc, err := generate(c, policy.OwnerServiceConfig, RetrySettings{
		MaxAttempts:          5,
		InitialBackoff:       250 * time.Millisecond,
		MaxBackoff:           1500 * time.Millisecond,
		BackoffMultiplier:    1.5,
		RetryableStatusCodes: []codes.Code{codes.Unavailable, codes.ResourceExhausted, codes.Unavailable},
		Throttling:           &RetryThrottling{MaxTokens: 100, TokenRatio: 0.25},
	})
	if err != nil {
		t.Fatal(err)
	}
	js, err := sc.JSON()
	if err != nil {
		t.Fatal(err)
	}
	for _, part := range []string{`"maxAttempts":5`, `"initialBackoff":"0.25s"`, `"maxBackoff":"1.5s"`, `"backoffMultiplier":1.5`,
		`"retryableStatusCodes":["RESOURCE_EXHAUSTED","UNAVAILABLE"]`, `"maxTokens":100`, `"tokenRatio":0.25`} {
		if !strings.Contains(js, part) {
			t.Errorf("missing %s in %s", part, js)
		}
	}
	if err := grpcAccepts(t, js); err != nil {
		t.Fatal(err)
	}
	for _, bad := range []RetrySettings{
		{MaxAttempts: 1}, {MaxAttempts: 6}, {InitialBackoff: -time.Second}, {InitialBackoff: 2 * time.Second, MaxBackoff: time.Second},
		{BackoffMultiplier: 0.5}, {RetryableStatusCodes: []codes.Code{codes.InvalidArgument}},
		{RetryableStatusCodes: []codes.Code{codes.OK}}, {Throttling: &RetryThrottling{MaxTokens: 2000, TokenRatio: 1}},
	} {
		if _, err := generate(c, policy.OwnerServiceConfig, bad); !errors.Is(err, policy.ErrInvalidConfig) {
			t.Errorf("settings %+v: error %v, want ErrInvalidConfig", bad, err)
		}
	}
	// A catalog without retryable methods gets throttling only.
	empty, _ := policy.NewCatalog(policy.MethodPolicy{FullMethod: "/a.B/Do"})
	sc, err = generate(empty, policy.OwnerServiceConfig, RetrySettings{})
	if err != nil || len(sc.MethodConfig) != 0 || sc.RetryThrottling == nil {
		t.Errorf("empty catalog: %+v, %v", sc, err)
	}
}

func TestGenerateOtherOwners(t *testing.T) {
	c := testCatalog(t)
	for _, o := range []policy.RetryOwner{policy.OwnerApplication, policy.OwnerMesh, policy.OwnerNone} {
		sc, err := generate(c, o, RetrySettings{MaxAttempts: 5})
		if err != nil {
			t.Fatal(err)
		}
		js, err := sc.JSON()
		if err != nil || js != "{}" {
			t.Errorf("owner %v: %s, %v", o, js, err)
		}
		if err := grpcAccepts(t, js); err != nil {
			t.Errorf("owner %v: grpc rejected %s: %v", o, js, err)
		}
		if err := checkOwnership(o, sc); err != nil {
			t.Errorf("owner %v: CheckOwnership: %v", o, err)
		}
	}
	if _, err := generate(c, 0, RetrySettings{}); !errors.Is(err, policy.ErrInvalidOwner) {
		t.Errorf("zero owner: %v", err)
	}
}

func TestCheckOwnership(t *testing.T) {
	retry := &document{MethodConfig: []methodConfig{
		{Name: []methodName{{Service: "shop.v1.Orders"}}, WaitForReady: new(bool)},
		{Name: []methodName{{Service: "shop.v1.Orders", Method: "Get"}}, RetryPolicy: &retryPolicy{MaxAttempts: 2}},
	}}
	hedge := &document{MethodConfig: []methodConfig{{Name: []methodName{{}}, HedgingPolicy: &hedgingPolicy{MaxAttempts: 2}}}}
	for _, o := range []policy.RetryOwner{policy.OwnerApplication, policy.OwnerMesh, policy.OwnerNone} {
		err := checkOwnership(o, retry)
		var oe *ownershipError
		if !errors.Is(err, ErrRetryNotOwned) || !errors.As(err, &oe) || oe.Name != "/shop.v1.Orders/Get" || oe.Policy != "retryPolicy" || oe.Owner != o {
			t.Errorf("owner %v retry: %v", o, err)
		}
		err = checkOwnership(o, hedge)
		if !errors.As(err, &oe) || oe.Name != "" || oe.Policy != "hedgingPolicy" {
			t.Errorf("owner %v hedge: %v", o, err)
		}
		if !strings.Contains(err.Error(), o.String()) {
			t.Errorf("message %q does not name the owner", err)
		}
	}
	if err := checkOwnership(policy.OwnerServiceConfig, retry); err != nil {
		t.Errorf("service-config owner: %v", err)
	}
	if err := checkOwnership(policy.RetryOwner(7), retry); !errors.Is(err, policy.ErrInvalidOwner) {
		t.Errorf("invalid owner: %v", err)
	}
}

func TestDuration(t *testing.T) {
	cases := []struct {
		d    time.Duration
		text string
	}{
		{100 * time.Millisecond, "0.1s"}, {time.Second, "1s"}, {1500 * time.Millisecond, "1.5s"},
		{time.Nanosecond, "0.000000001s"}, {0, "0s"}, {-2500 * time.Millisecond, "-2.5s"},
		{90 * time.Second, "90s"}, {time.Duration(-1 << 63), "-9223372036.854775808s"},
	}
	for _, c := range cases {
		b, err := json.Marshal(duration(c.d))
		if err != nil || string(b) != `"`+c.text+`"` {
			t.Errorf("Marshal(%v) = %s, %v; want %q", c.d, b, err, c.text)
		}
		if c.d == time.Duration(-1<<63) {
			continue
		}
		var back duration
		if err := json.Unmarshal(b, &back); err != nil || time.Duration(back) != c.d {
			t.Errorf("Unmarshal(%s) = %v, %v", b, time.Duration(back), err)
		}
	}
	for _, ok := range []string{"1.s", ".5s", "0.123456789s", "9223372036s"} {
		if _, err := parseDuration(ok); err != nil {
			t.Errorf("ParseDuration(%q): %v", ok, err)
		}
	}
	for _, bad := range []string{"", "s", "-s", ".s", "100ms", "1", "1.2.3s", "1.0000000001s", "+1s", "1.-5s", "--1s", "1e3s", " 1s", "315576000001s", "9999999999999s"} {
		if _, err := parseDuration(bad); !errors.Is(err, ErrInvalid) {
			t.Errorf("ParseDuration(%q) error %v, want ErrInvalid", bad, err)
		}
	}
	var d duration
	if err := json.Unmarshal([]byte(`0.1`), &d); !errors.Is(err, ErrInvalid) {
		t.Errorf("number duration: %v", err)
	}
}

func TestStatusCode(t *testing.T) {
	for c := codes.Code(0); c < 17; c++ {
		b, err := json.Marshal(statusCode(c))
		if err != nil || string(b) != `"`+codeName(c)+`"` || strings.ToUpper(codeName(c)) != codeName(c) {
			t.Errorf("Marshal(%v) = %s, %v", c, b, err)
		}
		// grpc-go's own decoder agrees on the spelling.
		var gc codes.Code
		if err := json.Unmarshal(b, &gc); err != nil || gc != c {
			t.Errorf("grpc codes.Code reads %s as %v, %v", b, gc, err)
		}
		var back statusCode
		if err := json.Unmarshal(b, &back); err != nil || back != statusCode(c) {
			t.Errorf("Unmarshal(%s) = %v, %v", b, back, err)
		}
	}
	for in, want := range map[string]codes.Code{`"unavailable"`: codes.Unavailable, `14`: codes.Unavailable, `"Deadline_Exceeded"`: codes.DeadlineExceeded, `0`: codes.OK} {
		var c statusCode
		if err := json.Unmarshal([]byte(in), &c); err != nil || codes.Code(c) != want {
			t.Errorf("Unmarshal(%s) = %v, %v", in, c, err)
		}
	}
	for _, bad := range []string{`17`, `-1`, `"14"`, `"UNAVAILABLE "`, `"NOPE"`, `2.5`, `true`, `"`} {
		var c statusCode
		if err := json.Unmarshal([]byte(bad), &c); err == nil {
			t.Errorf("Unmarshal(%s) accepted", bad)
		}
	}
	if _, err := json.Marshal(statusCode(17)); err == nil {
		t.Error("Marshal(17) accepted")
	}
	if codeName(codes.Code(20)) != "CODE(20)" {
		t.Error(codeName(20))
	}
}

// TestParseRejectsWhatGRPCRejects runs the inputs grpc-go is
// known to reject through Parse and through a real client.
func TestParseRejectsWhatGRPCRejects(t *testing.T) {
	rp := `"retryPolicy":{"maxAttempts":%s,"initialBackoff":%s,"maxBackoff":"1s","backoffMultiplier":2,"retryableStatusCodes":[%s]}`
	mk := func(name, attempts, backoff, code string) string {
		return `{"methodConfig":[{"name":[` + name + `],` + sprintf(rp, attempts, backoff, code) + `}]}`
	}
	get := `{"service":"shop.v1.Orders","method":"Get"}`
	cases := map[string]string{
		"method without service": mk(`{"method":"Get"}`, "3", `"0.1s"`, `"UNAVAILABLE"`),
		"duplicated name":        mk(get+","+get, "3", `"0.1s"`, `"UNAVAILABLE"`),
		"maxAttempts 1":          mk(get, "1", `"0.1s"`, `"UNAVAILABLE"`),
		"maxAttempts 2.5":        mk(get, "2.5", `"0.1s"`, `"UNAVAILABLE"`),
		"100ms":                  mk(get, "3", `"100ms"`, `"UNAVAILABLE"`),
		"zero backoff":           mk(get, "3", `"0s"`, `"UNAVAILABLE"`),
		"code 17":                mk(get, "3", `"0.1s"`, `17`),
		"empty codes":            mk(get, "3", `"0.1s"`, ``),
		"not json":               `{"methodConfig":`,
		"throttling 0 tokens":    `{"methodConfig":[],"retryThrottling":{"maxTokens":0,"tokenRatio":0.1}}`,
		"throttling ratio 0":     `{"methodConfig":[],"retryThrottling":{"maxTokens":10,"tokenRatio":0}}`,
	}
	for name, js := range cases {
		if err := grpcAccepts(t, js); err == nil {
			t.Errorf("%s: grpc-go accepted %s (the test's premise is wrong)", name, js)
		}
		if _, err := parseDocument([]byte(js)); !errors.Is(err, ErrInvalid) {
			t.Errorf("%s: Parse error %v, want ErrInvalid", name, err)
		}
	}
	// Stricter than grpc-go: unknown fields and throttling without methodConfig.
	for name, js := range map[string]string{
		"unknown field":             `{"methodConfig":[{"name":[` + get + `],"retryPolicyy":{}}]}`,
		"throttling without config": `{"retryThrottling":{"maxTokens":0,"tokenRatio":0.1}}`,
		"trailing data":             `{} {}`,
		"trailing brace":            `{}}`,
	} {
		if err := grpcAccepts(t, js); err != nil && !strings.HasPrefix(name, "trailing") {
			t.Errorf("%s: grpc-go rejected %s: %v", name, js, err)
		}
		if _, err := parseDocument([]byte(js)); !errors.Is(err, ErrInvalid) {
			t.Errorf("%s: Parse error %v, want ErrInvalid", name, err)
		}
	}
	// Lower-case codes: A6 allows them, so the parser does; Validate reports them.
	sc, err := parseDocument([]byte(mk(get, "3", `"0.1s"`, `"unavailable"`)))
	if err != nil || sc.MethodConfig[0].RetryPolicy.RetryableStatusCodes[0] != statusCode(codes.Unavailable) {
		t.Errorf("lower-case code: %+v, %v", sc, err)
	}
	if _, err := (&document{MethodConfig: []methodConfig{{Name: []methodName{{Method: "X"}}}}}).JSON(); !errors.Is(err, ErrInvalid) {
		t.Errorf("JSON of invalid config: %v", err)
	}
}
