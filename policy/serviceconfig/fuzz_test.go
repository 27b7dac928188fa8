package serviceconfig

import (
	"bytes"
	"strings"
	"testing"

	"github.com/opledger/opledger/policy"
)

var fuzzSeeds = []string{
	``,
	`{}`,
	`null`,
	`[]`,
	`{"methodConfig":[{"name":[{"service":"shop.v1.Orders","method":"Get"}],` + goodRetry + `}],"retryThrottling":{"maxTokens":10,"tokenRatio":0.1}}`,
	`{"methodConfig":[{"name":[{"service":"shop.v1.Orders"}],` + goodRetry + `}]}`,
	`{"methodConfig":[{"name":[{}],` + goodRetry + `}]}`,
	`{"methodConfig":[{"name":[{"method":"Get"}],` + goodRetry + `}]}`,
	`{"methodConfig":[{"name":[{"service":"a.B","method":"C"},{"service":"a.B","method":"C"}]}]}`,
	`{"methodConfig":[{"name":[{"service":"shop.v1.Orders","method":"Get"}],"retryPolicyy":{}}]}`,
	`{"methodConfig":[{"name":[{"service":"shop.v1.Orders","method":"Get"}],"RetryPolicy":{"MaxAttempts":10,"initialBackoff":"0.1s","maxBackoff":"1s","backoffMultiplier":2,"retryableStatusCodes":["unavailable",14]}}]}`,
	`{"methodConfig":[{"name":[{"service":"shop.v1.Orders","method":"Get"}],"retryPolicy":{"maxAttempts":2.5,"initialBackoff":"100ms","maxBackoff":"-1s","backoffMultiplier":0,"retryableStatusCodes":[]}}]}`,
	`{"methodConfig":[{"name":[{"service":"shop.v1.Orders","method":"Get"}],"hedgingPolicy":{"maxAttempts":3,"hedgingDelay":"0.05s","nonFatalStatusCodes":["UNAVAILABLE"]}}]}`,
	`{"methodConfig":[{"name":[{"service":"shop.v1.Orders","method":"Get"}],"timeout":"1.000000001s","waitForReady":true,"maxRequestMessageBytes":1024}]}`,
	`{"retryThrottling":{"maxTokens":0,"tokenRatio":0.1}}`,
	`{"retryThrottling":{"maxTokens":1000,"tokenRatio":0.0001}}`,
	`{"methodConfig":[null,{"name":null},{"name":[null]}]}`,
	`{"loadBalancingPolicy":"round_robin","healthCheckConfig":{"serviceName":"x"}}`,
	`{"methodConfig":[{"name":[{"service":"shop.v1.Orders","method":"Get"}],"retryPolicy":{"maxAttempts":99999999999999999999,"initialBackoff":"0.1s","maxBackoff":"1s","backoffMultiplier":1e999,"retryableStatusCodes":["UNAVAILABLE"]}}]}`,
}

// FuzzParse checks that the typed parser never panics, that
// what it accepts marshals back to a config it reads identically, and that
// grpc-go accepts that output.
func FuzzParse(f *testing.F) {
	for _, s := range fuzzSeeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		sc, err := parseDocument(data)
		if err != nil {
			return
		}
		js, err := sc.JSON()
		if err != nil {
			t.Fatalf("accepted config does not marshal: %v", err)
		}
		back, err := parseDocument([]byte(js))
		if err != nil {
			t.Fatalf("marshalled config does not parse: %v\n%s", err, js)
		}
		js2, err := back.JSON()
		if err != nil || js2 != js {
			t.Fatalf("round trip not stable:\n%s\n%s", js, js2)
		}
		if sc.LoadBalancingConfig == nil { // this package does not check load-balancing configs
			if err := grpcAccepts(t, js); err != nil {
				t.Fatalf("grpc-go rejects what Parse accepted: %v\n%s", err, js)
			}
		}
	})
}

// FuzzValidate checks that the validator never panics, always explains its
// findings on one line, and is never more lenient than grpc-go: whatever
// grpc-go rejects gets at least one finding.
func FuzzValidate(f *testing.F) {
	for _, s := range fuzzSeeds {
		f.Add([]byte(s), uint8(policy.OwnerServiceConfig))
		f.Add([]byte(s), uint8(policy.OwnerMesh))
	}
	c := testCatalog(f)
	f.Fuzz(func(t *testing.T, data []byte, owner uint8) {
		o := policy.RetryOwner(owner%4 + 1)
		findings, err := Validate(data, c, o)
		if err != nil {
			t.Fatalf("Validate error: %v", err)
		}
		for _, fd := range findings {
			if fd.Kind == "" || fd.Message == "" || strings.ContainsAny(fd.String(), "\n\r") {
				t.Fatalf("bad finding %+v", fd)
			}
		}
		if len(findings) > 0 || bytes.Contains(bytes.ToLower(data), []byte("loadbalancingconfig")) {
			return // the validator does not check load-balancing configs
		}
		if err := grpcAccepts(t, string(data)); err != nil {
			t.Fatalf("grpc-go rejects a config with no findings: %v\n%s", err, data)
		}
	})
}
