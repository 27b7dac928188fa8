package chaos

import (
	"fmt"
	"strings"
	"testing"
	"time"
)

// FuzzCommitLine: a line the replica wrote is read back as written, and
// any line read is three fields that format back to it.
func FuzzCommitLine(f *testing.F) {
	f.Add(int64(1764626400123456789), "chaos-12-7", int64(4242), "")
	f.Add(int64(1), "x y", int64(-3), "1 2")
	f.Add(int64(0), "", int64(0), "garbage")
	f.Fuzz(func(t *testing.T, ns int64, ref string, id int64, line string) {
		written := fmt.Sprintf("%d %s %d", ns, ref, id)
		r, ok := parseCommitLine(written)
		if plain := ns > 0 && id != 0 && len(strings.Fields(ref)) == 1 && strings.Fields(ref)[0] == ref; plain &&
			(!ok || r.ref != ref || r.id != id || !r.at.Equal(time.Unix(0, ns))) {
			t.Fatalf("%q read as %+v, %v", written, r, ok)
		}
		if r, ok := parseCommitLine(line); ok {
			if f := strings.Fields(line); len(f) != 3 || f[1] != r.ref || r.id == 0 || r.at.UnixNano() <= 0 {
				t.Fatalf("%q read as %+v", line, r)
			}
		}
	})
}

func TestWindows(t *testing.T) {
	t0 := time.Unix(1000, 0)
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	commits := []commitRecord{{at: at(5)}, {at: at(12)}, {at: at(900)}, {at: at(2500)}}
	got := windows([]failoverTimes{{killAt: at(10), killed: at(20)}, {killAt: at(2000), killed: at(2600)}}, commits)
	if len(got) != 2 || got[0] != 890 || got[1] != -1 {
		t.Fatalf("windows %v, want [890 -1]: the first commit after the kill was over, none after the second", got)
	}
}
