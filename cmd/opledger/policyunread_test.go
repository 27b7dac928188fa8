package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestPolicyCheckNotUnderstood: configuration the mesh checker does not
// model (here an Envoy Listener whose routes come from RDS, which are not
// in the input) is a problem: exit status 1 and a note that the attempts
// may be too low, never exit 0 with a table of single attempts (issue 37).
func TestPolicyCheckNotUnderstood(t *testing.T) {
	dir := t.TempDir()
	desc := writePolicyDescriptors(t, dir)
	lds := filepath.Join(dir, "lds.yaml")
	if err := os.WriteFile(lds, []byte(`"@type": type.googleapis.com/envoy.config.listener.v3.Listener
name: egress
filter_chains:
- filters:
  - name: envoy.filters.network.http_connection_manager
    typed_config:
      "@type": type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager
      stat_prefix: egress
      rds: {route_config_name: orders-routes, config_source: {ads: {}}}
`), 0o600); err != nil {
		t.Fatal(err)
	}
	var out, errOut bytes.Buffer
	code := runPolicy(context.Background(), []string{"check", "--descriptors", desc, "--owner", "mesh", "--mesh", lds}, &out, &errOut)
	if code != 1 {
		t.Fatalf("exit %d\n%s%s", code, out.String(), errOut.String())
	}
	for _, want := range []string{
		lds + `: not-understood: Listener egress (document 1) filter_chains[0].filters[0].typed_config.rds: the HttpConnectionManager takes its routes from RDS (route_config_name "orders-routes")`,
		"1 finding(s) not-understood or invalid-resource: where they apply the mesh may retry more than the table shows",
	} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("output lacks %q:\n%s", want, out.String())
		}
	}
	if !strings.Contains(errOut.String(), "1 finding(s) (owner mesh), 1 of them not understood or invalid: the attempts shown may be too low") {
		t.Errorf("stderr %q", errOut.String())
	}
}
