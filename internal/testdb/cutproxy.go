package testdb

import (
	"bytes"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"testing"
)

// CutProxy forwards TCP to a database server. Armed, it forwards the next
// client chunk that contains COMMIT and then cuts that connection in both
// directions: the database gets the COMMIT, the client never gets the
// answer. That is a real commit with an unknown outcome.
type CutProxy struct {
	lis    net.Listener
	target string
	armed  atomic.Bool
	cuts   atomic.Int32
	wg     sync.WaitGroup
}

// NewCutProxy listens on a loopback port and forwards to target
// (host:port) until the test ends.
func NewCutProxy(t testing.TB, target string) *CutProxy {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &CutProxy{lis: lis, target: target}
	p.wg.Add(1)
	go p.serve()
	t.Cleanup(func() { lis.Close(); p.wg.Wait() })
	return p
}

// Addr returns the proxy's address, host:port.
func (p *CutProxy) Addr() string { return p.lis.Addr().String() }

// Arm makes the proxy cut the connection that sends the next COMMIT.
func (p *CutProxy) Arm() { p.armed.Store(true) }

// Cuts returns how many connections the proxy cut.
func (p *CutProxy) Cuts() int { return int(p.cuts.Load()) }

func (p *CutProxy) serve() {
	defer p.wg.Done()
	for {
		c, err := p.lis.Accept()
		if err != nil {
			return
		}
		s, err := net.Dial("tcp", p.target)
		if err != nil {
			c.Close()
			continue
		}
		p.wg.Add(2)
		go func() { defer p.wg.Done(); _, _ = io.Copy(c, s); c.Close() }()
		go func() {
			defer p.wg.Done()
			defer s.Close()
			defer c.Close()
			buf := make([]byte, 64<<10)
			for {
				n, err := c.Read(buf)
				if n > 0 {
					if _, werr := s.Write(buf[:n]); werr != nil {
						return
					}
					if bytes.Contains(bytes.ToLower(buf[:n]), []byte("commit")) && p.armed.CompareAndSwap(true, false) {
						p.cuts.Add(1)
						return // the COMMIT went out; its answer never comes back
					}
				}
				if err != nil {
					return
				}
			}
		}()
	}
}
