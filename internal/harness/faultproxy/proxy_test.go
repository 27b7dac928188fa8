package faultproxy

import (
	"bufio"
	"context"
	"errors"
	"io"
	"net"
	"os"
	"slices"
	"sync"
	"testing"
	"time"
)

// echoServer answers every line with the same line, until the test ends.
func echoServer(t *testing.T) string {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	t.Cleanup(func() { lis.Close(); wg.Wait() })
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := lis.Accept()
			if err != nil {
				return
			}
			wg.Add(1)
			go func() { defer wg.Done(); defer c.Close(); _, _ = io.Copy(c, c) }()
		}
	}()
	return lis.Addr().String()
}

func newProxy(t *testing.T, target string) *Proxy {
	t.Helper()
	p, err := New(target)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	return p
}

func dial(t *testing.T, addr string) (net.Conn, *bufio.Reader) {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c, bufio.NewReader(c)
}

func roundTrip(t *testing.T, c net.Conn, r *bufio.Reader, line string) {
	t.Helper()
	if _, err := io.WriteString(c, line+"\n"); err != nil {
		t.Fatal(err)
	}
	got, err := r.ReadString('\n')
	if err != nil || got != line+"\n" {
		t.Fatalf("echo of %q: %q, %v", line, got, err)
	}
}

func TestForwardAndCut(t *testing.T) {
	t.Parallel()
	p := newProxy(t, echoServer(t))
	var conns []net.Conn
	for i := range 3 {
		c, r := dial(t, p.Addr())
		roundTrip(t, c, r, "hello")
		conns = append(conns, c)
		_ = i
	}
	if n := p.Cut(); n != 3 {
		t.Fatalf("Cut closed %d connections, want 3", n)
	}
	for _, c := range conns {
		c.SetReadDeadline(time.Now().Add(10 * time.Second))
		if _, err := c.Read(make([]byte, 1)); err == nil || errors.Is(err, os.ErrDeadlineExceeded) {
			t.Fatalf("read after the cut: %v, want the connection closed", err)
		}
	}
	// New connections work after a cut.
	c, r := dial(t, p.Addr())
	roundTrip(t, c, r, "again")
	st := p.Stats()
	if st.Accepted != 4 || st.CutEvents != 1 || st.Cuts != 3 {
		t.Fatalf("stats %+v, want 4 accepted, 1 cut event, 3 cuts", st)
	}
}

func TestLatency(t *testing.T) {
	t.Parallel()
	p := newProxy(t, echoServer(t))
	c, r := dial(t, p.Addr())
	roundTrip(t, c, r, "warm")
	p.SetLatency(50 * time.Millisecond)
	start := time.Now()
	roundTrip(t, c, r, "slow")
	// Both directions wait: at least twice the latency, a lower bound
	// that holds on any machine.
	if d := time.Since(start); d < 100*time.Millisecond {
		t.Fatalf("round trip with 50ms latency each way took %v", d)
	}
}

func TestBlackholeHoldsThenDelivers(t *testing.T) {
	t.Parallel()
	p := newProxy(t, echoServer(t))
	c, r := dial(t, p.Addr())
	roundTrip(t, c, r, "before")
	p.Blackhole(time.Hour)
	if _, err := io.WriteString(c, "held\n"); err != nil {
		t.Fatal(err)
	}
	c.SetReadDeadline(time.Now().Add(200 * time.Millisecond))
	if _, err := r.ReadString('\n'); !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("read in a blackhole: %v, want a timeout", err)
	}
	// A new connection is held too, and both flow once healed.
	c2, r2 := dial(t, p.Addr())
	if _, err := io.WriteString(c2, "queued\n"); err != nil {
		t.Fatal(err)
	}
	p.Heal()
	c.SetReadDeadline(time.Time{})
	if got, err := r.ReadString('\n'); err != nil || got != "held\n" {
		t.Fatalf("after the blackhole: %q, %v", got, err)
	}
	if got, err := r2.ReadString('\n'); err != nil || got != "queued\n" {
		t.Fatalf("new connection after the blackhole: %q, %v", got, err)
	}
	if st := p.Stats(); st.Blackholes != 1 {
		t.Fatalf("blackholes %d, want 1", st.Blackholes)
	}
}

func TestTargetDownAndSetTarget(t *testing.T) {
	t.Parallel()
	// A port nobody listens on: take one and close it.
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	down := lis.Addr().String()
	lis.Close()
	p := newProxy(t, down)
	c, _ := dial(t, p.Addr())
	c.SetReadDeadline(time.Now().Add(10 * time.Second))
	if _, err := c.Read(make([]byte, 1)); err == nil || errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("read through a proxy to a closed port: %v, want closed", err)
	}
	if err := p.SetTarget(echoServer(t)); err != nil {
		t.Fatal(err)
	}
	c2, r2 := dial(t, p.Addr())
	roundTrip(t, c2, r2, "up")
	if st := p.Stats(); st.DialFailures != 1 {
		t.Fatalf("dial failures %d, want 1", st.DialFailures)
	}
}

func TestLoopbackOnly(t *testing.T) {
	t.Parallel()
	for _, addr := range []string{"10.0.0.1:5432", "example.com:80", "0.0.0.0:1", "[::]:1"} {
		if _, err := New(addr); !errors.Is(err, ErrNotLoopback) {
			t.Errorf("New(%q): %v, want ErrNotLoopback", addr, err)
		}
	}
	if _, err := New("no-port"); err == nil {
		t.Error("New without a port: no error")
	}
	for _, addr := range []string{"127.0.0.1:5432", "localhost:1", "[::1]:2", "127.1.2.3:4"} {
		if err := CheckLoopback(addr); err != nil {
			t.Errorf("CheckLoopback(%q): %v", addr, err)
		}
	}
	p := newProxy(t, "127.0.0.1:1")
	if err := p.SetTarget("192.168.1.1:1"); !errors.Is(err, ErrNotLoopback) {
		t.Errorf("SetTarget to a LAN address: %v", err)
	}
	if p.Target() != "127.0.0.1:1" {
		t.Errorf("target changed to %q after a refused SetTarget", p.Target())
	}
}

func TestScheduleIsSeeded(t *testing.T) {
	t.Parallel()
	s := Schedule{Seed: 42, Every: 10 * time.Millisecond}
	g1, f1 := s.Sequence(50)
	g2, f2 := s.Sequence(50)
	if !slices.Equal(g1, g2) || !slices.Equal(f1, f2) {
		t.Fatal("the same seed gave two sequences")
	}
	g3, f3 := Schedule{Seed: 43, Every: 10 * time.Millisecond}.Sequence(50)
	if slices.Equal(g1, g3) && slices.Equal(f1, f3) {
		t.Fatal("two seeds gave the same sequence")
	}
	seen := map[Fault]int{}
	for i, f := range f1 {
		seen[f]++
		if g1[i] < 5*time.Millisecond || g1[i] > 15*time.Millisecond {
			t.Fatalf("gap %v outside [Every/2, 3·Every/2]", g1[i])
		}
	}
	if len(seen) != 3 {
		t.Fatalf("faults %v, want all three kinds in 50", seen)
	}
	_, only := Schedule{Seed: 1, Cut: 1}.Sequence(20)
	for _, f := range only {
		if f != FaultCut {
			t.Fatalf("weights cut-only gave %v", f)
		}
	}
	// FirstCut: the first fault is a cut, whatever the weights draw; the
	// gaps and the later faults are the sequence's.
	noCut := Schedule{Seed: 7, Latency: 1}
	firstCut := noCut
	firstCut.FirstCut = true
	gn, fn := noCut.Sequence(10)
	gc, fc := firstCut.Sequence(10)
	if fn[0] == FaultCut || fc[0] != FaultCut || !slices.Equal(gn, gc) || !slices.Equal(fn[1:], fc[1:]) {
		t.Fatalf("FirstCut: %v %v, without it %v %v", gc, fc, gn, fn)
	}
}

func TestRunAppliesTheSchedule(t *testing.T) {
	t.Parallel()
	p := newProxy(t, echoServer(t))
	c, r := dial(t, p.Addr())
	roundTrip(t, c, r, "x")
	ctx, cancel := context.WithCancel(context.Background())
	var mu sync.Mutex
	applied := map[Fault]int{}
	s := Schedule{Seed: 7, Every: 2 * time.Millisecond, LatencyFor: time.Millisecond, BlackholeFor: time.Millisecond,
		Observe: func(f Fault) {
			mu.Lock()
			defer mu.Unlock()
			applied[f]++
			if applied[FaultCut] >= 3 && applied[FaultLatency] >= 1 && applied[FaultBlackhole] >= 1 {
				cancel()
			}
		}}
	if err := p.Run(ctx, s); !errors.Is(err, context.Canceled) {
		t.Fatalf("Run: %v", err)
	}
	st := p.Stats()
	mu.Lock()
	defer mu.Unlock()
	if st.CutEvents != int64(applied[FaultCut]) || st.Blackholes != int64(applied[FaultBlackhole]) ||
		st.LatencySpells != int64(applied[FaultLatency]) {
		t.Fatalf("stats %+v, applied %v", st, applied)
	}
	if st.Cuts < 1 {
		t.Fatalf("no connection cut: %+v", st)
	}
	// Healed after Run: a new connection round-trips.
	c2, r2 := dial(t, p.Addr())
	roundTrip(t, c2, r2, "healed")
}
