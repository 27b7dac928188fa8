package serviceconfig

import (
	"errors"
	"strings"
	"testing"

	"github.com/opledger/opledger/policy"
)

const goodRetry = `"retryPolicy":{"maxAttempts":3,"initialBackoff":"0.1s","maxBackoff":"1s","backoffMultiplier":2,"retryableStatusCodes":["UNAVAILABLE"]}`

type wantFinding struct {
	kind FindingKind
	path string
	name string // "-" for no name
	// method, when set, is the catalog method the finding is about.
	method string
}

func checkFindings(t *testing.T, label string, got []Finding, want []wantFinding) {
	t.Helper()
	match := func(f Finding, w wantFinding) bool {
		name := "-"
		if f.HasName {
			name = f.Name
		}
		return f.Kind == w.kind && f.Path == w.path && name == w.name && (w.method == "" || f.Method == w.method)
	}
	ok := len(got) == len(want)
	for i := 0; ok && i < len(got); i++ {
		ok = match(got[i], want[i])
	}
	for _, f := range got {
		if f.Message == "" {
			t.Errorf("%s: finding without message: %+v", label, f)
		}
		if strings.Contains(f.String(), "\n") {
			t.Errorf("%s: finding spans lines: %q", label, f)
		}
	}
	if !ok {
		var b strings.Builder
		for _, f := range got {
			b.WriteString("\n  " + f.String())
		}
		t.Errorf("%s: got %d findings:%s\nwant %+v", label, len(got), b.String(), want)
	}
}

func TestValidate(t *testing.T) {
	c := testCatalog(t)
	mc := func(names, rest string) string {
		s := `{"name":[` + names + `]`
		if rest != "" {
			s += "," + rest
		}
		return s + "}"
	}
	doc := func(mcs ...string) string { return `{"methodConfig":[` + strings.Join(mcs, ",") + `]}` }
	n := func(svc, m string) string {
		if m == "" {
			return `{"service":"` + svc + `"}`
		}
		return `{"service":"` + svc + `","method":"` + m + `"}`
	}
	cases := []struct {
		name  string
		owner policy.RetryOwner
		js    string
		want  []wantFinding
	}{
		{"clean", policy.OwnerServiceConfig, doc(mc(n("shop.v1.Orders", "Get")+","+n("shop.v1.Orders", "Put"), goodRetry)), nil},
		{"clean without retries", policy.OwnerNone, doc(mc(n("shop.v1.Orders", ""), `"waitForReady":true,"timeout":"2s"`)), nil},
		{"empty", policy.OwnerMesh, `{}`, nil},
		{"renamed method", policy.OwnerServiceConfig, doc(mc(n("shop.v1.Orders", "Fetch"), goodRetry)),
			[]wantFinding{{findingUnknownMethod, "methodConfig[0].name[0]", "/shop.v1.Orders/Fetch", ""}}},
		{"misspelled method", policy.OwnerServiceConfig, doc(mc(n("shop.v1.Orders", "Gett"), goodRetry)),
			[]wantFinding{{findingUnknownMethod, "methodConfig[0].name[0]", "/shop.v1.Orders/Gett", ""}}},
		{"wrong case method", policy.OwnerServiceConfig, doc(mc(n("shop.v1.Orders", "get"), goodRetry)),
			[]wantFinding{{findingUnknownMethod, "methodConfig[0].name[0]", "/shop.v1.Orders/get", ""}}},
		{"unknown service", policy.OwnerServiceConfig, doc(mc(n("shop.v1.orders", ""), goodRetry)),
			[]wantFinding{{findingUnknownService, "methodConfig[0].name[0]", "/shop.v1.orders/", ""}}},
		{"method of unknown service", policy.OwnerServiceConfig, doc(mc(n("shop.v2.Orders", "Get"), goodRetry)),
			[]wantFinding{{findingUnknownMethod, "methodConfig[0].name[0]", "/shop.v2.Orders/Get", ""}}},
		{"method without service", policy.OwnerServiceConfig, doc(mc(`{"method":"Get"}`, goodRetry)),
			[]wantFinding{{findingMethodWithoutService, "methodConfig[0].name[0]", "Get", ""}}},
		{"duplicate name", policy.OwnerServiceConfig, doc(mc(n("shop.v1.Orders", "Get"), goodRetry), mc(n("shop.v1.Orders", "Get"), `"timeout":"1s"`)),
			[]wantFinding{{findingDuplicateName, "methodConfig[1].name[0]", "/shop.v1.Orders/Get", ""}}},
		{"unknown field", policy.OwnerServiceConfig, doc(mc(n("shop.v1.Orders", "Get"), strings.Replace(goodRetry, "retryPolicy", "retryPolicyy", 1))),
			[]wantFinding{{findingUnknownField, "methodConfig[0].retryPolicyy", "-", ""}}},
		{"key with a newline", policy.OwnerServiceConfig, `{"method\nConfig":[]}`,
			[]wantFinding{{findingUnknownField, `["method\nConfig"]`, "-", ""}}},
		{"unknown top-level field", policy.OwnerServiceConfig, `{"methodConfigs":[]}`,
			[]wantFinding{{findingUnknownField, "methodConfigs", "-", ""}}},
		{"retryPolicy without the methodConfig wrapper", policy.OwnerServiceConfig, `{` + goodRetry + `}`,
			[]wantFinding{{findingUnknownField, "retryPolicy", "-", ""}}},
		{"wrong-case key", policy.OwnerServiceConfig, doc(mc(n("shop.v1.Orders", "Get"), strings.Replace(goodRetry, "maxAttempts", "MaxAttempts", 1))),
			[]wantFinding{{findingKeyCase, "methodConfig[0].retryPolicy.MaxAttempts", "-", ""}}},
		{"duplicate key", policy.OwnerServiceConfig, doc(mc(n("shop.v1.Orders", "Get"), goodRetry+`,"timeout":"1s","timeout":"2s"`)),
			[]wantFinding{{findingDuplicateKey, "methodConfig[0].timeout", "-", ""}}},
		{"lower-case code", policy.OwnerServiceConfig, doc(mc(n("shop.v1.Orders", "Get"), strings.Replace(goodRetry, `"UNAVAILABLE"`, `"unavailable"`, 1))),
			[]wantFinding{{findingCodeCase, "methodConfig[0].retryPolicy.retryableStatusCodes[0]", "-", ""}}},
		{"invalid codes", policy.OwnerServiceConfig, doc(mc(n("shop.v1.Orders", "Get"), strings.Replace(goodRetry, `"UNAVAILABLE"`, `"UNAVAILABLE",17,"NOPE",true,"14",14`, 1))),
			[]wantFinding{
				{findingInvalidCode, "methodConfig[0].retryPolicy.retryableStatusCodes[1]", "-", ""},
				{findingInvalidCode, "methodConfig[0].retryPolicy.retryableStatusCodes[2]", "-", ""},
				{findingInvalidCode, "methodConfig[0].retryPolicy.retryableStatusCodes[3]", "-", ""},
				{findingInvalidCode, "methodConfig[0].retryPolicy.retryableStatusCodes[4]", "-", ""},
			}},
		{"code not retryable", policy.OwnerServiceConfig, doc(mc(n("shop.v1.Orders", "Get"), strings.Replace(goodRetry, `"UNAVAILABLE"`, `"UNAVAILABLE","INVALID_ARGUMENT"`, 1))),
			[]wantFinding{{findingCodeNotRetryable, "methodConfig[0].retryPolicy.retryableStatusCodes[1]", "-", ""}}},
		{"maxAttempts above 5", policy.OwnerServiceConfig, doc(mc(n("shop.v1.Orders", "Get"), strings.Replace(goodRetry, `"maxAttempts":3`, `"maxAttempts":10`, 1))),
			[]wantFinding{{findingMaxAttemptsClamped, "methodConfig[0].retryPolicy.maxAttempts", "-", ""}}},
		{"maxAttempts 1", policy.OwnerServiceConfig, doc(mc(n("shop.v1.Orders", "Get"), strings.Replace(goodRetry, `"maxAttempts":3`, `"maxAttempts":1`, 1))),
			[]wantFinding{{findingInvalidRetryPolicy, "methodConfig[0].retryPolicy.maxAttempts", "-", ""}}},
		{"maxAttempts 2.5", policy.OwnerServiceConfig, doc(mc(n("shop.v1.Orders", "Get"), strings.Replace(goodRetry, `"maxAttempts":3`, `"maxAttempts":2.5`, 1))),
			[]wantFinding{{findingInvalidRetryPolicy, "methodConfig[0].retryPolicy.maxAttempts", "-", ""}}},
		{"bad durations and multiplier", policy.OwnerServiceConfig, doc(mc(n("shop.v1.Orders", "Get"),
			`"retryPolicy":{"maxAttempts":3,"initialBackoff":"100ms","maxBackoff":"0s","backoffMultiplier":0,"retryableStatusCodes":[]}`)),
			[]wantFinding{
				{findingInvalidDuration, "methodConfig[0].retryPolicy.initialBackoff", "-", ""},
				{findingInvalidRetryPolicy, "methodConfig[0].retryPolicy.maxBackoff", "-", ""},
				{findingInvalidRetryPolicy, "methodConfig[0].retryPolicy.backoffMultiplier", "-", ""},
				{findingInvalidRetryPolicy, "methodConfig[0].retryPolicy.retryableStatusCodes", "-", ""},
			}},
		{"missing retry fields", policy.OwnerServiceConfig, doc(mc(n("shop.v1.Orders", "Get"), `"retryPolicy":{"maxAttempts":3}`)),
			[]wantFinding{{findingInvalidRetryPolicy, "methodConfig[0].retryPolicy", "-", ""}}},
		{"hedging", policy.OwnerServiceConfig, doc(mc(n("shop.v1.Orders", "Get"), `"hedgingPolicy":{"maxAttempts":3,"hedgingDelay":"0.05s","nonFatalStatusCodes":["UNAVAILABLE"]}`)),
			[]wantFinding{{findingHedgingPolicy, "methodConfig[0].hedgingPolicy", "-", ""}}},
		{"retry on non-idempotent", policy.OwnerServiceConfig, doc(mc(n("shop.v1.Orders", "Upload"), goodRetry)),
			[]wantFinding{{findingRetryNonIdempotent, "methodConfig[0].name[0]", "/shop.v1.Orders/Upload", "/shop.v1.Orders/Upload"}}},
		{"retry on keyed without ledger", policy.OwnerServiceConfig, doc(mc(n("shop.v1.Orders", "Cancel")+","+n("shop.v1.Orders", "Create"), goodRetry)),
			[]wantFinding{{findingRetryKeyedWithoutLedger, "methodConfig[0].name[0]", "/shop.v1.Orders/Cancel", "/shop.v1.Orders/Cancel"}}},
		{"service-level name covers every method", policy.OwnerServiceConfig, doc(mc(n("shop.v1.Orders", ""), goodRetry)),
			[]wantFinding{
				{findingRetryKeyedWithoutLedger, "methodConfig[0].name[0]", "/shop.v1.Orders/", "/shop.v1.Orders/Cancel"},
				{findingRetryNonIdempotent, "methodConfig[0].name[0]", "/shop.v1.Orders/", "/shop.v1.Orders/Chat"},
				{findingRetryNonIdempotent, "methodConfig[0].name[0]", "/shop.v1.Orders/", "/shop.v1.Orders/Upload"},
			}},
		{"more specific entry wins over the service entry", policy.OwnerServiceConfig,
			doc(mc(n("shop.v1.Orders", ""), goodRetry), mc(n("shop.v1.Orders", "Cancel")+","+n("shop.v1.Orders", "Chat")+","+n("shop.v1.Orders", "Upload"), `"timeout":"1s"`)), nil},
		{"channel default covers every service", policy.OwnerServiceConfig, doc(mc(`{}`, goodRetry)),
			[]wantFinding{
				{findingRetryKeyedWithoutLedger, "methodConfig[0].name[0]", "", "/shop.v1.Orders/Cancel"},
				{findingRetryNonIdempotent, "methodConfig[0].name[0]", "", "/shop.v1.Orders/Chat"},
				{findingRetryNonIdempotent, "methodConfig[0].name[0]", "", "/shop.v1.Orders/Upload"},
			}},
		{"retry when the mesh owns retries", policy.OwnerMesh, doc(mc(n("shop.v1.Orders", "Get")+","+n("shop.v1.Catalog", ""), goodRetry)),
			[]wantFinding{
				{findingRetryNotOwned, "methodConfig[0].retryPolicy", "/shop.v1.Orders/Get", ""},
				{findingRetryNotOwned, "methodConfig[0].retryPolicy", "/shop.v1.Catalog/", ""},
			}},
		{"hedging when nobody retries", policy.OwnerNone, doc(mc(n("shop.v1.Orders", "Get"), `"hedgingPolicy":{"maxAttempts":2}`)),
			[]wantFinding{
				{findingHedgingPolicy, "methodConfig[0].hedgingPolicy", "-", ""},
				{findingRetryNotOwned, "methodConfig[0].hedgingPolicy", "/shop.v1.Orders/Get", ""},
			}},
		{"retry when the application owns retries", policy.OwnerApplication, doc(mc(n("shop.v1.Orders", "Get"), goodRetry)),
			[]wantFinding{{findingRetryNotOwned, "methodConfig[0].retryPolicy", "/shop.v1.Orders/Get", ""}}},
		{"missing name", policy.OwnerServiceConfig, `{"methodConfig":[{` + goodRetry + `}]}`,
			[]wantFinding{{findingMissingName, "methodConfig[0]", "-", ""}}},
		{"throttling without methodConfig", policy.OwnerServiceConfig, `{"retryThrottling":{"maxTokens":1001,"tokenRatio":-1}}`,
			[]wantFinding{
				{findingInvalidThrottling, "retryThrottling.maxTokens", "-", ""},
				{findingInvalidThrottling, "retryThrottling.tokenRatio", "-", ""},
			}},
		{"throttling missing field", policy.OwnerServiceConfig, `{"retryThrottling":{"maxTokens":10}}`,
			[]wantFinding{{findingInvalidThrottling, "retryThrottling.tokenRatio", "-", ""}}},
		{"wrong types", policy.OwnerServiceConfig, `{"methodConfig":{},"loadBalancingPolicy":1,"retryThrottling":[]}`,
			[]wantFinding{
				{findingWrongType, "methodConfig", "-", ""},
				{findingWrongType, "loadBalancingPolicy", "-", ""},
				{findingWrongType, "retryThrottling", "-", ""},
			}},
		{"not json", policy.OwnerServiceConfig, `{"methodConfig":[`, []wantFinding{{findingSyntax, "", "-", ""}}},
		{"not an object", policy.OwnerServiceConfig, `[]`, []wantFinding{{findingSyntax, "", "-", ""}}},
		{"trailing data", policy.OwnerServiceConfig, `{} x`, []wantFinding{{findingSyntax, "", "-", ""}}},
		{"too deep", policy.OwnerServiceConfig, `{"loadBalancingConfig":` + strings.Repeat("[", 100) + strings.Repeat("]", 100) + `}`,
			[]wantFinding{{findingSyntax, "", "-", ""}}},
	}
	for _, tc := range cases {
		got, err := Validate([]byte(tc.js), c, tc.owner)
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		checkFindings(t, tc.name, got, tc.want)
	}
	if _, err := Validate([]byte(`{}`), c, 0); !errors.Is(err, policy.ErrInvalidOwner) {
		t.Errorf("invalid owner: %v", err)
	}
	// A nil catalog knows no method.
	got, err := Validate([]byte(doc(mc(n("a.B", "C"), goodRetry))), nil, policy.OwnerServiceConfig)
	if err != nil || len(got) != 1 || got[0].Kind != findingUnknownMethod {
		t.Errorf("nil catalog: %v, %v", got, err)
	}
}

func TestFindingMessages(t *testing.T) {
	c := testCatalog(t)
	js := `{"methodConfig":[{"name":[{"service":"shop.v1.Orders","method":"get"},{"service":"shop.v1.Orders","method":"Putt"},{"service":"shop.v1.orders"}],` +
		strings.Replace(goodRetry, "retryPolicy", "retryPolicyy", 1) + `}]}`
	got, err := Validate([]byte(js), c, policy.OwnerServiceConfig)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{
		`unknown-field: methodConfig[0].retryPolicyy: unknown field "retryPolicyy"; grpc-go ignores it silently (did you mean "retryPolicy"?)`,
		`unknown-method: methodConfig[0].name[0] name "/shop.v1.Orders/get": method matches nothing: service "shop.v1.Orders" has no method "get" (the catalog has "Get": letter case differs); the method it was meant for runs with the channel defaults, silently`,
		`unknown-method: methodConfig[0].name[1] name "/shop.v1.Orders/Putt": method matches nothing: service "shop.v1.Orders" has no method "Putt" (did you mean "Put"?); the method it was meant for runs with the channel defaults, silently`,
		`unknown-service: methodConfig[0].name[2] name "/shop.v1.orders/": service matches nothing: service "shop.v1.orders" is not in the catalog (the catalog has "shop.v1.Orders": letter case differs); grpc-go applies the entry to nothing, silently`,
	}
	if len(got) != len(want) {
		t.Fatalf("got %v", got)
	}
	for i := range want {
		if got[i].String() != want[i] {
			t.Errorf("finding %d:\n got %s\nwant %s", i, got[i], want[i])
		}
	}
}
