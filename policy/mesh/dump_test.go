package mesh

import (
	"os"
	"testing"

	"github.com/opledger/opledger/policy"
)

func TestDump(t *testing.T) {
	if os.Getenv("DUMP") == "" {
		t.Skip()
	}
	for _, f := range []string{"istio-default.yaml", "istio-virtualservice.yaml", "istio-mesh-off.yaml", "istio-operator.yaml", "istio-mistakes.yaml", "envoy-route.json", "envoy-bootstrap.yaml", "linkerd-profile.yaml", "linkerd-annotations.yaml", "gateway-httproute.yaml", "xds:xds-route.json", "xds:xds-mistakes.yaml", "unknown.yaml"} {
		rep := check(t, load(t, f), Options{Owner: policy.OwnerMesh})
		t.Logf("==== %s", f)
		for _, fi := range rep.Findings {
			t.Logf("  %s", fi)
		}
		for _, m := range rep.Methods {
			s := ""
			for _, l := range m.Layers {
				s += " " + string(l.Layer) + "=" + l.Attempts.String()
			}
			t.Logf("  %s %s:%s total %s", m.Method, m.Kind, s, m.Amplification)
		}
	}
}
