package timeline

import (
	"bytes"
	"strings"
	"testing"
	"time"
)

// FuzzReadFaults: ReadFaults never panics, and what it reads from a
// picture WriteSVG drew is that picture's faults.
func FuzzReadFaults(f *testing.F) {
	var b bytes.Buffer
	_ = Chart{Calls: []Call{{0, time.Millisecond, OK}}, Faults: []Fault{{Kind: FaultCut, At: time.Second, N: 3}}}.WriteSVG(&b)
	f.Add(b.String())
	f.Add(`<svg xmlns="http://www.w3.org/2000/svg"><g class="fault" data-kind="x" data-at-ms="1.5" data-until-ms="2" data-n="4"/></svg>`)
	f.Add(`<svg xmlns="http://www.w3.org/2000/svg"><g class="fault" data-at-ms="nan"/></svg>`)
	f.Add("<svg")
	f.Fuzz(func(t *testing.T, doc string) {
		faults, err := ReadFaults(strings.NewReader(doc))
		if err != nil {
			return
		}
		for _, x := range faults {
			if x.Kind == "" {
				t.Fatalf("a fault without a kind from %q", doc)
			}
		}
	})
}
