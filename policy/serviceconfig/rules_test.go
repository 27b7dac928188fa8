package serviceconfig

import (
	"errors"
	"strings"
	"testing"

	"github.com/opledger/opledger/policy"
)

// checkRulesAgree parses js with the typed parser and runs the validator on
// it, and checks that they apply the same rules: the parser fails exactly
// when the validator reports a finding of kind, and every such finding's
// problem (its message up to the first ";") is in the parser's error.
func checkRulesAgree(t *testing.T, label, js string, kind FindingKind) {
	t.Helper()
	_, perr := parseDocument([]byte(js))
	if perr != nil && !errors.Is(perr, ErrInvalid) {
		t.Errorf("%s: Parse error %v does not wrap ErrInvalid", label, perr)
	}
	findings, err := Validate([]byte(js), testCatalog(t), policy.OwnerServiceConfig)
	if err != nil {
		t.Fatalf("%s: Validate: %v", label, err)
	}
	var broken []Finding
	for _, f := range findings {
		if f.Kind == kind {
			broken = append(broken, f)
		}
	}
	if (perr != nil) != (len(broken) > 0) {
		t.Errorf("%s: Parse error %v, but %d %s findings %v", label, perr, len(broken), kind, findings)
		return
	}
	for _, f := range broken {
		problem, _, _ := strings.Cut(f.Message, ";")
		if !strings.Contains(perr.Error(), problem) {
			t.Errorf("%s: Parse error %q does not state the validator's problem %q", label, perr, problem)
		}
	}
}

func TestRetryPolicyRulesAgree(t *testing.T) {
	cases := []struct{ attempts, initial, max, mult, codes string }{
		{"3", `"0.1s"`, `"1s"`, "2", `"UNAVAILABLE"`},
		{"2", `"0.000000001s"`, `"0.000000001s"`, "0.5", `"UNAVAILABLE","ABORTED"`},
		{"5", `"1s"`, `"0.1s"`, "1", `14`},
		{"10", `"0.1s"`, `"1s"`, "2", `"UNAVAILABLE"`}, // clamped by grpc-go, not an error
		{"1", `"0.1s"`, `"1s"`, "2", `"UNAVAILABLE"`},
		{"0", `"0.1s"`, `"1s"`, "2", `"UNAVAILABLE"`},
		{"-3", `"0.1s"`, `"1s"`, "2", `"UNAVAILABLE"`},
		{"3", `"0s"`, `"1s"`, "2", `"UNAVAILABLE"`},
		{"3", `"-1s"`, `"1s"`, "2", `"UNAVAILABLE"`},
		{"3", `"0.1s"`, `"0s"`, "2", `"UNAVAILABLE"`},
		{"3", `"0.1s"`, `"-0.5s"`, "2", `"UNAVAILABLE"`},
		{"3", `"0.1s"`, `"1s"`, "0", `"UNAVAILABLE"`},
		{"3", `"0.1s"`, `"1s"`, "-1", `"UNAVAILABLE"`},
		{"3", `"0.1s"`, `"1s"`, "1e-300", `"UNAVAILABLE"`},
		{"3", `"0.1s"`, `"1s"`, "2", ``},
		{"1", `"0s"`, `"-1s"`, "0", ``},
	}
	for _, c := range cases {
		rp := `{"maxAttempts":` + c.attempts + `,"initialBackoff":` + c.initial + `,"maxBackoff":` + c.max +
			`,"backoffMultiplier":` + c.mult + `,"retryableStatusCodes":[` + c.codes + `]}`
		js := `{"methodConfig":[{"name":[{"service":"shop.v1.Orders","method":"Get"}],"retryPolicy":` + rp + `}]}`
		checkRulesAgree(t, rp, js, findingInvalidRetryPolicy)
	}
}

func TestThrottlingRulesAgree(t *testing.T) {
	cases := []struct{ maxTokens, tokenRatio string }{
		{"10", "0.1"}, {"1000", "1000"}, {"0.001", "0.001"},
		{"0", "0.1"}, {"-1", "0.1"}, {"1000.5", "0.1"}, {"1001", "1"},
		{"10", "0"}, {"10", "-0.1"}, {"0", "0"},
	}
	for _, c := range cases {
		rt := `{"maxTokens":` + c.maxTokens + `,"tokenRatio":` + c.tokenRatio + `}`
		checkRulesAgree(t, rt, `{"retryThrottling":`+rt+`}`, findingInvalidThrottling)
		checkRulesAgree(t, rt, `{"methodConfig":[],"retryThrottling":`+rt+`}`, findingInvalidThrottling)
	}
}

func TestTypedValidateListsEveryProblem(t *testing.T) {
	err := (&retryPolicy{MaxAttempts: 1, InitialBackoff: 0, MaxBackoff: -1, BackoffMultiplier: 0}).Validate()
	if !errors.Is(err, ErrInvalid) {
		t.Fatalf("RetryPolicy.Validate = %v", err)
	}
	for _, field := range []string{"maxAttempts 1", "initialBackoff 0s", "maxBackoff -0.000000001s", "backoffMultiplier 0", "retryableStatusCodes"} {
		if !strings.Contains(err.Error(), field) {
			t.Errorf("%q does not mention %q", err, field)
		}
	}
	err = (&RetryThrottling{MaxTokens: 2000, TokenRatio: -1}).validate()
	if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), "maxTokens 2000") || !strings.Contains(err.Error(), "tokenRatio -1") {
		t.Errorf("RetryThrottling.Validate = %v", err)
	}
	good := retryPolicy{MaxAttempts: 7, InitialBackoff: 1, MaxBackoff: 1, BackoffMultiplier: 1e-3, RetryableStatusCodes: []statusCode{14}}
	if err := good.Validate(); err != nil {
		t.Errorf("valid policy: %v", err)
	}
}
