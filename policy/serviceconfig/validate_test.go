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
			[]wantFinding{{FindingUnknownMethod, "methodConfig[0].name[0]", "/shop.v1.Orders/Fetch", ""}}},
		{"misspelled method", policy.OwnerServiceConfig, doc(mc(n("shop.v1.Orders", "Gett"), goodRetry)),
			[]wantFinding{{FindingUnknownMethod, "methodConfig[0].name[0]", "/shop.v1.Orders/Gett", ""}}},
		{"wrong case method", policy.OwnerServiceConfig, doc(mc(n("shop.v1.Orders", "get"), goodRetry)),
			[]wantFinding{{FindingUnknownMethod, "methodConfig[0].name[0]", "/shop.v1.Orders/get", ""}}},
		{"unknown service", policy.OwnerServiceConfig, doc(mc(n("shop.v1.orders", ""), goodRetry)),
			[]wantFinding{{FindingUnknownService, "methodConfig[0].name[0]", "/shop.v1.orders/", ""}}},
		{"method of unknown service", policy.OwnerServiceConfig, doc(mc(n("shop.v2.Orders", "Get"), goodRetry)),
			[]wantFinding{{FindingUnknownMethod, "methodConfig[0].name[0]", "/shop.v2.Orders/Get", ""}}},
		{"method without service", policy.OwnerServiceConfig, doc(mc(`{"method":"Get"}`, goodRetry)),
			[]wantFinding{{FindingMethodWithoutService, "methodConfig[0].name[0]", "Get", ""}}},
		{"duplicate name", policy.OwnerServiceConfig, doc(mc(n("shop.v1.Orders", "Get"), goodRetry), mc(n("shop.v1.Orders", "Get"), `"timeout":"1s"`)),
			[]wantFinding{{FindingDuplicateName, "methodConfig[1].name[0]", "/shop.v1.Orders/Get", ""}}},
		{"unknown field", policy.OwnerServiceConfig, doc(mc(n("shop.v1.Orders", "Get"), strings.Replace(goodRetry, "retryPolicy", "retryPolicyy", 1))),
			[]wantFinding{{FindingUnknownField, "methodConfig[0].retryPolicyy", "-", ""}}},
		{"key with a newline", policy.OwnerServiceConfig, `{"method\nConfig":[]}`,
			[]wantFinding{{FindingUnknownField, `["method\nConfig"]`, "-", ""}}},
		{"unknown top-level field", policy.OwnerServiceConfig, `{"methodConfigs":[]}`,
			[]wantFinding{{FindingUnknownField, "methodConfigs", "-", ""}}},
		{"retryPolicy without the methodConfig wrapper", policy.OwnerServiceConfig, `{` + goodRetry + `}`,
			[]wantFinding{{FindingUnknownField, "retryPolicy", "-", ""}}},
		{"wrong-case key", policy.OwnerServiceConfig, doc(mc(n("shop.v1.Orders", "Get"), strings.Replace(goodRetry, "maxAttempts", "MaxAttempts", 1))),
			[]wantFinding{{FindingKeyCase, "methodConfig[0].retryPolicy.MaxAttempts", "-", ""}}},
		{"duplicate key", policy.OwnerServiceConfig, doc(mc(n("shop.v1.Orders", "Get"), goodRetry+`,"timeout":"1s","timeout":"2s"`)),
			[]wantFinding{{FindingDuplicateKey, "methodConfig[0].timeout", "-", ""}}},
		{"lower-case code", policy.OwnerServiceConfig, doc(mc(n("shop.v1.Orders", "Get"), strings.Replace(goodRetry, `"UNAVAILABLE"`, `"unavailable"`, 1))),
			[]wantFinding{{FindingCodeCase, "methodConfig[0].retryPolicy.retryableStatusCodes[0]", "-", ""}}},
		{"invalid codes", policy.OwnerServiceConfig, doc(mc(n("shop.v1.Orders", "Get"), strings.Replace(goodRetry, `"UNAVAILABLE"`, `"UNAVAILABLE",17,"NOPE",true,"14",14`, 1))),
			[]wantFinding{
				{FindingInvalidCode, "methodConfig[0].retryPolicy.retryableStatusCodes[1]", "-", ""},
				{FindingInvalidCode, "methodConfig[0].retryPolicy.retryableStatusCodes[2]", "-", ""},
				{FindingInvalidCode, "methodConfig[0].retryPolicy.retryableStatusCodes[3]", "-", ""},
				{FindingInvalidCode, "methodConfig[0].retryPolicy.retryableStatusCodes[4]", "-", ""},
			}},
		{"code not retryable", policy.OwnerServiceConfig, doc(mc(n("shop.v1.Orders", "Get"), strings.Replace(goodRetry, `"UNAVAILABLE"`, `"UNAVAILABLE","INVALID_ARGUMENT"`, 1))),
			[]wantFinding{{FindingCodeNotRetryable, "methodConfig[0].retryPolicy.retryableStatusCodes[1]", "-", ""}}},
		{"maxAttempts above 5", policy.OwnerServiceConfig, doc(mc(n("shop.v1.Orders", "Get"), strings.Replace(goodRetry, `"maxAttempts":3`, `"maxAttempts":10`, 1))),
			[]wantFinding{{FindingMaxAttemptsClamped, "methodConfig[0].retryPolicy.maxAttempts", "-", ""}}},
		{"maxAttempts 1", policy.OwnerServiceConfig, doc(mc(n("shop.v1.Orders", "Get"), strings.Replace(goodRetry, `"maxAttempts":3`, `"maxAttempts":1`, 1))),
			[]wantFinding{{FindingInvalidRetryPolicy, "methodConfig[0].retryPolicy.maxAttempts", "-", ""}}},
		{"maxAttempts 2.5", policy.OwnerServiceConfig, doc(mc(n("shop.v1.Orders", "Get"), strings.Replace(goodRetry, `"maxAttempts":3`, `"maxAttempts":2.5`, 1))),
			[]wantFinding{{FindingInvalidRetryPolicy, "methodConfig[0].retryPolicy.maxAttempts", "-", ""}}},
		{"bad durations and multiplier", policy.OwnerServiceConfig, doc(mc(n("shop.v1.Orders", "Get"),
			`"retryPolicy":{"maxAttempts":3,"initialBackoff":"100ms","maxBackoff":"0s","backoffMultiplier":0,"retryableStatusCodes":[]}`)),
			[]wantFinding{
				{FindingInvalidDuration, "methodConfig[0].retryPolicy.initialBackoff", "-", ""},
				{FindingInvalidRetryPolicy, "methodConfig[0].retryPolicy.maxBackoff", "-", ""},
				{FindingInvalidRetryPolicy, "methodConfig[0].retryPolicy.backoffMultiplier", "-", ""},
				{FindingInvalidRetryPolicy, "methodConfig[0].retryPolicy.retryableStatusCodes", "-", ""},
			}},
		{"missing retry fields", policy.OwnerServiceConfig, doc(mc(n("shop.v1.Orders", "Get"), `"retryPolicy":{"maxAttempts":3}`)),
			[]wantFinding{{FindingInvalidRetryPolicy, "methodConfig[0].retryPolicy", "-", ""}}},
		{"hedging", policy.OwnerServiceConfig, doc(mc(n("shop.v1.Orders", "Get"), `"hedgingPolicy":{"maxAttempts":3,"hedgingDelay":"0.05s","nonFatalStatusCodes":["UNAVAILABLE"]}`)),
			[]wantFinding{{FindingHedgingPolicy, "methodConfig[0].hedgingPolicy", "-", ""}}},
		{"retry on non-idempotent", policy.OwnerServiceConfig, doc(mc(n("shop.v1.Orders", "Upload"), goodRetry)),
			[]wantFinding{{FindingRetryNonIdempotent, "methodConfig[0].name[0]", "/shop.v1.Orders/Upload", "/shop.v1.Orders/Upload"}}},
		{"retry on keyed without ledger", policy.OwnerServiceConfig, doc(mc(n("shop.v1.Orders", "Cancel")+","+n("shop.v1.Orders", "Create"), goodRetry)),
			[]wantFinding{{FindingRetryKeyedWithoutLedger, "methodConfig[0].name[0]", "/shop.v1.Orders/Cancel", "/shop.v1.Orders/Cancel"}}},
		{"service-level name covers every method", policy.OwnerServiceConfig, doc(mc(n("shop.v1.Orders", ""), goodRetry)),
			[]wantFinding{
				{FindingRetryKeyedWithoutLedger, "methodConfig[0].name[0]", "/shop.v1.Orders/", "/shop.v1.Orders/Cancel"},
				{FindingRetryNonIdempotent, "methodConfig[0].name[0]", "/shop.v1.Orders/", "/shop.v1.Orders/Chat"},
				{FindingRetryNonIdempotent, "methodConfig[0].name[0]", "/shop.v1.Orders/", "/shop.v1.Orders/Upload"},
			}},
		{"more specific entry wins over the service entry", policy.OwnerServiceConfig,
			doc(mc(n("shop.v1.Orders", ""), goodRetry), mc(n("shop.v1.Orders", "Cancel")+","+n("shop.v1.Orders", "Chat")+","+n("shop.v1.Orders", "Upload"), `"timeout":"1s"`)), nil},
		{"channel default covers every service", policy.OwnerServiceConfig, doc(mc(`{}`, goodRetry)),
			[]wantFinding{
				{FindingRetryKeyedWithoutLedger, "methodConfig[0].name[0]", "", "/shop.v1.Orders/Cancel"},
				{FindingRetryNonIdempotent, "methodConfig[0].name[0]", "", "/shop.v1.Orders/Chat"},
				{FindingRetryNonIdempotent, "methodConfig[0].name[0]", "", "/shop.v1.Orders/Upload"},
			}},
		{"retry when the mesh owns retries", policy.OwnerMesh, doc(mc(n("shop.v1.Orders", "Get")+","+n("shop.v1.Catalog", ""), goodRetry)),
			[]wantFinding{
				{FindingRetryNotOwned, "methodConfig[0].retryPolicy", "/shop.v1.Orders/Get", ""},
				{FindingRetryNotOwned, "methodConfig[0].retryPolicy", "/shop.v1.Catalog/", ""},
			}},
		{"hedging when nobody retries", policy.OwnerNone, doc(mc(n("shop.v1.Orders", "Get"), `"hedgingPolicy":{"maxAttempts":2}`)),
			[]wantFinding{
				{FindingHedgingPolicy, "methodConfig[0].hedgingPolicy", "-", ""},
				{FindingRetryNotOwned, "methodConfig[0].hedgingPolicy", "/shop.v1.Orders/Get", ""},
			}},
		{"retry when the application owns retries", policy.OwnerApplication, doc(mc(n("shop.v1.Orders", "Get"), goodRetry)),
			[]wantFinding{{FindingRetryNotOwned, "methodConfig[0].retryPolicy", "/shop.v1.Orders/Get", ""}}},
		{"missing name", policy.OwnerServiceConfig, `{"methodConfig":[{` + goodRetry + `}]}`,
			[]wantFinding{{FindingMissingName, "methodConfig[0]", "-", ""}}},
		{"throttling without methodConfig", policy.OwnerServiceConfig, `{"retryThrottling":{"maxTokens":1001,"tokenRatio":-1}}`,
			[]wantFinding{
				{FindingInvalidThrottling, "retryThrottling.maxTokens", "-", ""},
				{FindingInvalidThrottling, "retryThrottling.tokenRatio", "-", ""},
			}},
		{"throttling missing field", policy.OwnerServiceConfig, `{"retryThrottling":{"maxTokens":10}}`,
			[]wantFinding{{FindingInvalidThrottling, "retryThrottling.tokenRatio", "-", ""}}},
		{"wrong types", policy.OwnerServiceConfig, `{"methodConfig":{},"loadBalancingPolicy":1,"retryThrottling":[]}`,
			[]wantFinding{
				{FindingWrongType, "methodConfig", "-", ""},
				{FindingWrongType, "loadBalancingPolicy", "-", ""},
				{FindingWrongType, "retryThrottling", "-", ""},
			}},
		{"not json", policy.OwnerServiceConfig, `{"methodConfig":[`, []wantFinding{{FindingSyntax, "", "-", ""}}},
		{"not an object", policy.OwnerServiceConfig, `[]`, []wantFinding{{FindingSyntax, "", "-", ""}}},
		{"trailing data", policy.OwnerServiceConfig, `{} x`, []wantFinding{{FindingSyntax, "", "-", ""}}},
		{"too deep", policy.OwnerServiceConfig, `{"loadBalancingConfig":` + strings.Repeat("[", 100) + strings.Repeat("]", 100) + `}`,
			[]wantFinding{{FindingSyntax, "", "-", ""}}},
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
	if err != nil || len(got) != 1 || got[0].Kind != FindingUnknownMethod {
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
