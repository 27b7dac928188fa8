package mesh

import (
	"strings"
	"testing"

	"github.com/opledger/opledger/policy"
)

// attemptsSources returns the sources of a method's layer, joined.
func attemptsSources(rep *Report, method string, l Layer) string {
	for _, m := range rep.Methods {
		if m.Method != method {
			continue
		}
		for _, la := range m.Layers {
			if la.Layer == l {
				return strings.Join(la.Sources, " | ")
			}
		}
	}
	return ""
}

// mesh reads YAML given inline.
func meshYAML(t testing.TB, name, data string) *Config {
	t.Helper()
	var c Config
	c.AddMesh(name, []byte(data))
	return &c
}

// findingsOf returns the findings of a kind.
func findingsOf(rep *Report, kind FindingKind) []Finding {
	var out []Finding
	for _, f := range rep.Findings {
		if f.Kind == kind {
			out = append(out, f)
		}
	}
	return out
}

var _ = policy.OwnerMesh
