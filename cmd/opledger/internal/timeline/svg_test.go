package timeline

import (
	"bytes"
	"encoding/xml"
	"fmt"
	"io"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"
)

// sample is a chart with every kind of fault and outcome: 12 s of calls,
// a failover in the middle with nothing answered during it.
func sample() Chart {
	r := rand.New(rand.NewPCG(1, 2))
	c := Chart{Title: "postgres, synchronous replication (pgx)", Subtitle: "10,000 logical calls · 3 replicas · seed 1 · retry owner application"}
	fo, promoted := 5*time.Second, 5*time.Second+900*time.Millisecond
	for i := range 10000 {
		start := time.Duration(r.Int64N(int64(12 * time.Second)))
		lat := time.Duration(3+r.ExpFloat64()*8) * time.Millisecond
		o := OK
		switch x := r.Float64(); {
		case x < 0.02:
			o = Resolved
		case x < 0.03:
			o = Replayed
		case x < 0.032:
			o = Definite
		}
		if start > fo-200*time.Millisecond && start < promoted {
			lat = promoted - start + time.Duration(r.Int64N(int64(300*time.Millisecond)))
		}
		if i == 17 {
			o = Ambiguous
		}
		c.Calls = append(c.Calls, Call{Start: start, End: start + lat, Outcome: o})
	}
	c.Faults = []Fault{
		{Kind: FaultReplicaKill, At: 1300 * time.Millisecond, Label: "replica 2 killed"},
		{Kind: FaultCommitKill, At: 2100 * time.Millisecond},
		{Kind: FaultDBCrash, At: 3 * time.Second, Until: 3400 * time.Millisecond},
		{Kind: FaultFailover, At: fo, Until: promoted},
		{Kind: FaultRejoin, At: promoted + 200*time.Millisecond, Until: promoted + 2500*time.Millisecond},
		{Kind: FaultOutage, At: 9 * time.Second, Until: 10 * time.Second},
		{Kind: FaultDBRestart, At: 10500 * time.Millisecond, Until: 11 * time.Second},
		{Kind: FaultAnswerLost, At: 2 * time.Second, Until: 2100 * time.Millisecond, N: 5},
		{Kind: FaultSendFailed, At: 2100 * time.Millisecond, Until: 2200 * time.Millisecond, N: 2},
	}
	for t := 300 * time.Millisecond; t < 12*time.Second; t += 700 * time.Millisecond {
		c.Faults = append(c.Faults, Fault{Kind: FaultCut, At: t, N: int(t/time.Second) % 7})
		c.Faults = append(c.Faults, Fault{Kind: FaultBlackhole, At: t + 300*time.Millisecond, Until: t + 450*time.Millisecond})
		c.Faults = append(c.Faults, Fault{Kind: FaultLatency, At: t + 100*time.Millisecond, Until: t + 400*time.Millisecond})
	}
	c.Totals = []Total{{Label: "logical calls", N: 10000}, {Label: "attempts", N: 10412}, {Label: "amplification", Text: "1.04×"},
		{Label: "duplicate effects", MustBeZero: true}, {Label: "lost effects", MustBeZero: true},
		{Label: "acknowledged and lost", MustBeZero: true}, {Label: "ambiguous", N: 1, MustBeZero: true}}
	return c
}

// element is an SVG element as encoding/xml reads it.
type element struct {
	XMLName  xml.Name
	Attrs    []xml.Attr `xml:",any,attr"`
	Children []element  `xml:",any"`
	Text     string     `xml:",chardata"`
}

func (e element) attr(name string) string {
	for _, a := range e.Attrs {
		if a.Name.Local == name {
			return a.Value
		}
	}
	return ""
}

// walk calls f on e and every element below it.
func (e element) walk(f func(element)) {
	f(e)
	for _, c := range e.Children {
		c.walk(f)
	}
}

// Parse reads an SVG document for a test.
func parse(t *testing.T, r io.Reader) element {
	t.Helper()
	var root element
	if err := xml.NewDecoder(r).Decode(&root); err != nil {
		t.Fatalf("the SVG does not parse: %v", err)
	}
	return root
}

func TestWriteSVG(t *testing.T) {
	t.Parallel()
	c := sample()
	var buf bytes.Buffer
	if err := c.WriteSVG(&buf); err != nil {
		t.Fatal(err)
	}
	root := parse(t, bytes.NewReader(buf.Bytes()))
	if root.XMLName.Local != "svg" || root.XMLName.Space != "http://www.w3.org/2000/svg" {
		t.Fatalf("root %v", root.XMLName)
	}
	kinds := map[string]int{}
	totals := map[string]string{}
	root.walk(func(e element) {
		switch name := e.XMLName.Local; {
		case name == "script" || name == "image" || name == "foreignObject" || name == "use":
			t.Errorf("a %s element: the picture must be self-contained", name)
		case e.attr("href") != "":
			t.Errorf("a reference %q", e.attr("href"))
		case e.attr("class") == "fault":
			kinds[e.attr("data-kind")]++
		case e.attr("class") == "total":
			totals[e.attr("data-label")] = e.attr("data-must-be-zero")
		}
		for _, a := range e.Attrs {
			if strings.HasPrefix(a.Name.Local, "on") {
				t.Errorf("an event handler %s", a.Name.Local)
			}
		}
	})
	want := map[string]int{}
	for _, f := range c.Faults {
		want[f.Kind]++
	}
	read, err := ReadFaults(bytes.NewReader(buf.Bytes()))
	if err != nil || len(read) != len(c.Faults) {
		t.Fatalf("ReadFaults: %d faults (%v), want %d", len(read), err, len(c.Faults))
	}
	// In lane order, not the chart's: compare sorted.
	key := func(f Fault) string {
		return fmt.Sprintf("%s %v %v %d", f.Kind, f.At.Round(time.Millisecond), f.Until.Round(time.Millisecond), f.N)
	}
	var got, wantKeys []string
	for i := range read {
		w := c.Faults[i]
		w.Label = ""
		got, wantKeys = append(got, key(read[i])), append(wantKeys, key(w))
	}
	slices.Sort(got)
	slices.Sort(wantKeys)
	if !slices.Equal(got, wantKeys) {
		t.Errorf("ReadFaults:\n%v\nwant\n%v", got, wantKeys)
	}
	if _, err := ReadFaults(strings.NewReader("<html/>")); err == nil {
		t.Error("ReadFaults took an HTML document")
	}
	for k, n := range want {
		if kinds[k] != n {
			t.Errorf("%d fault markers of kind %s, want %d", kinds[k], k, n)
		}
	}
	if len(kinds) != len(want) || len(totals) != len(c.Totals) || totals["duplicate effects"] != "true" || totals["attempts"] != "false" {
		t.Errorf("markers %v, totals %v", kinds, totals)
	}
	if err := (Chart{}).WriteSVG(io.Discard); err != ErrEmpty {
		t.Errorf("an empty chart: %v", err)
	}
}

func TestSeries(t *testing.T) {
	t.Parallel()
	c := Chart{Calls: []Call{{0, 10 * time.Millisecond, OK}, {0, 30 * time.Millisecond, Replayed},
		{50 * time.Millisecond, 150 * time.Millisecond, Definite}}}
	s := c.series()
	if len(s.counts) != 2 || s.counts[0][OK] != 1 || s.counts[0][Replayed] != 1 || s.counts[1][Definite] != 1 ||
		s.p50[0] != 30*time.Millisecond || s.p99[1] != 100*time.Millisecond {
		t.Fatalf("series %+v", s)
	}
	if p50, p99, _ := Percentiles(c.Calls); p50 != 30*time.Millisecond || p99 != 100*time.Millisecond {
		t.Fatalf("percentiles %v %v", p50, p99)
	}
}
