// Package faultproxy is a TCP proxy for loopback addresses that injects
// network faults between a client and a server: it cuts every open
// connection at once, adds latency to every chunk it forwards, and
// blackholes traffic for a while (bytes and new connections are held, not
// forwarded, until the blackhole ends). The faults come from explicit
// calls (Cut, SetLatency, Blackhole) or from a seeded Schedule (Run), so a
// run can be reproduced. It listens on 127.0.0.1 only and forwards only to
// loopback targets: it is a test tool, never a network component.
package faultproxy

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"time"
)

// ErrNotLoopback is returned for a target that is not a loopback address.
var ErrNotLoopback = errors.New("faultproxy: target is not a loopback address")

// Stats are a proxy's counters.
type Stats struct {
	// Accepted counts connections accepted from clients.
	Accepted int64
	// DialFailures counts accepted connections whose target refused them
	// (the client's connection is closed at once).
	DialFailures int64
	// CutEvents counts calls of Cut (from a Schedule too).
	CutEvents int64
	// Cuts counts connections cut by them.
	Cuts int64
	// LatencySpells counts periods of added latency a Schedule started.
	LatencySpells int64
	// Blackholes counts blackholes (Blackhole calls and scheduled ones).
	Blackholes int64
}

// Proxy forwards TCP connections from its own loopback address to a
// target. It is safe for concurrent use.
type Proxy struct {
	lis    net.Listener
	mu     sync.Mutex
	target string
	conns  map[*pair]struct{}
	closed bool
	wg     sync.WaitGroup

	latency   atomic.Int64 // nanoseconds added before each forwarded chunk
	holdUntil atomic.Int64 // unix nanoseconds: blackholed until then
	done      chan struct{}

	accepted, dialFailures, cutEvents, cuts, spells, blackholes atomic.Int64
}

// pair is one proxied connection: the client's and the target's side.
type pair struct {
	client net.Conn
	gone   chan struct{}

	mu     sync.Mutex
	server net.Conn // nil until dialled
	closed bool
}

// setServer records the target's side; false (and s closed) when the
// pair was closed meanwhile.
func (c *pair) setServer(s net.Conn) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		s.Close()
		return false
	}
	c.server = s
	return true
}

func (c *pair) close() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return
	}
	c.closed = true
	close(c.gone)
	c.client.Close()
	if c.server != nil {
		c.server.Close()
	}
}

// CheckLoopback returns an error wrapping ErrNotLoopback unless addr
// (host:port) names a loopback address: localhost or a loopback IP.
func CheckLoopback(addr string) error {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("faultproxy: target %q: %w", addr, err)
	}
	if host == "localhost" {
		return nil
	}
	if ip := net.ParseIP(host); ip != nil && ip.IsLoopback() {
		return nil
	}
	return fmt.Errorf("%w: %q", ErrNotLoopback, addr)
}

// New listens on a free port of 127.0.0.1 and forwards each connection to
// target (host:port on loopback; it may be down: the client's connection
// is then closed at once). Close the proxy when done.
func New(target string) (*Proxy, error) {
	if err := CheckLoopback(target); err != nil {
		return nil, err
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("faultproxy: listen: %w", err)
	}
	p := &Proxy{lis: lis, target: target, conns: make(map[*pair]struct{}), done: make(chan struct{})}
	p.wg.Add(1)
	go p.serve()
	return p, nil
}

// Addr returns the proxy's address (host:port) for clients.
func (p *Proxy) Addr() string { return p.lis.Addr().String() }

// Target returns the address the proxy forwards to.
func (p *Proxy) Target() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.target
}

// SetTarget makes new connections go to target (a restarted server on
// another port); open connections keep their old target.
func (p *Proxy) SetTarget(target string) error {
	if err := CheckLoopback(target); err != nil {
		return err
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.target = target
	return nil
}

// Cut closes every open connection in both directions, as a reset on the
// network would, and returns how many it closed. New connections are
// accepted as before.
func (p *Proxy) Cut() int {
	p.mu.Lock()
	open := make([]*pair, 0, len(p.conns))
	for c := range p.conns {
		open = append(open, c)
	}
	p.mu.Unlock()
	for _, c := range open {
		c.close()
	}
	p.cutEvents.Add(1)
	p.cuts.Add(int64(len(open)))
	return len(open)
}

// SetLatency adds d before each chunk the proxy forwards, in both
// directions; 0 removes it.
func (p *Proxy) SetLatency(d time.Duration) { p.latency.Store(int64(max(d, 0))) }

// Blackhole holds all traffic for d: bytes read from either side are not
// forwarded, and new connections are not dialled, until d has passed
// (then they flow, as TCP's retransmissions would deliver them after a
// short partition). A client's own timeouts see a silent peer.
func (p *Proxy) Blackhole(d time.Duration) {
	if d <= 0 {
		return
	}
	until := time.Now().Add(d).UnixNano()
	for {
		cur := p.holdUntil.Load()
		if cur >= until || p.holdUntil.CompareAndSwap(cur, until) {
			break
		}
	}
	p.blackholes.Add(1)
}

// Heal ends a blackhole and removes the latency.
func (p *Proxy) Heal() {
	p.holdUntil.Store(0)
	p.latency.Store(0)
}

// Stats returns a snapshot of the proxy's counters.
func (p *Proxy) Stats() Stats {
	return Stats{Accepted: p.accepted.Load(), DialFailures: p.dialFailures.Load(), CutEvents: p.cutEvents.Load(),
		Cuts: p.cuts.Load(), LatencySpells: p.spells.Load(), Blackholes: p.blackholes.Load()}
}

// Close stops listening, closes every connection and waits for the
// proxy's goroutines.
func (p *Proxy) Close() error {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return nil
	}
	p.closed = true
	close(p.done)
	open := make([]*pair, 0, len(p.conns))
	for c := range p.conns {
		open = append(open, c)
	}
	p.mu.Unlock()
	err := p.lis.Close()
	for _, c := range open {
		c.close()
	}
	p.wg.Wait()
	return err
}

func (p *Proxy) serve() {
	defer p.wg.Done()
	for {
		c, err := p.lis.Accept()
		if err != nil {
			return
		}
		p.accepted.Add(1)
		cp := &pair{client: c, gone: make(chan struct{})}
		p.mu.Lock()
		if p.closed {
			p.mu.Unlock()
			c.Close()
			return
		}
		p.conns[cp] = struct{}{}
		p.wg.Add(1)
		p.mu.Unlock()
		go p.handle(cp)
	}
}

func (p *Proxy) handle(c *pair) {
	defer p.wg.Done()
	defer func() {
		c.close()
		p.mu.Lock()
		delete(p.conns, c)
		p.mu.Unlock()
	}()
	if !p.hold(c) {
		return
	}
	s, err := net.DialTimeout("tcp", p.Target(), 5*time.Second)
	if err != nil {
		p.dialFailures.Add(1)
		return
	}
	if !c.setServer(s) {
		return // cut while dialling
	}
	var wg sync.WaitGroup
	wg.Add(2)
	go func() { defer wg.Done(); p.pipe(c, s, c.client); c.close() }()
	go func() { defer wg.Done(); p.pipe(c, c.client, s); c.close() }()
	wg.Wait()
}

// pipe copies src to dst chunk by chunk, with the latency and blackholes
// in force when each chunk was read.
func (p *Proxy) pipe(c *pair, dst io.Writer, src io.Reader) {
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			if d := time.Duration(p.latency.Load()); d > 0 && !p.sleep(c, d) {
				return
			}
			if !p.hold(c) {
				return
			}
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

// hold waits while a blackhole lasts; false when the connection or the
// proxy closed meanwhile.
func (p *Proxy) hold(c *pair) bool {
	for {
		until := p.holdUntil.Load()
		d := time.Until(time.Unix(0, until))
		if until == 0 || d <= 0 {
			return true
		}
		// Look again at least every 10ms: Heal may end the blackhole early.
		if !p.sleep(c, min(d, 10*time.Millisecond)) {
			return false
		}
	}
}

func (p *Proxy) sleep(c *pair, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-c.gone:
		return false
	case <-p.done:
		return false
	}
}

// Run applies s's faults to p until ctx ends, then heals p (no latency,
// no blackhole) and returns ctx's error.
func (p *Proxy) Run(ctx context.Context, s Schedule) error {
	defer p.Heal()
	return s.run(ctx, p)
}
