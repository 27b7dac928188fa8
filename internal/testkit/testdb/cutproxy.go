package testdb

import (
	"bytes"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// CutProxy forwards TCP to a database server. Armed, it forwards the next
// client chunk that contains COMMIT and then cuts that connection in both
// directions: the database gets the COMMIT, the client never gets the
// answer. That is a real commit with an unknown outcome. (The match is on
// the bytes "commit" in any case: no key or name a test sends through it
// may contain them.)
type CutProxy struct {
	lis    net.Listener
	target string
	armed  atomic.Pointer[func(forward func() <-chan struct{})]
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

// Arm makes the proxy cut the connection that sends the next COMMIT,
// after forwarding it and once the server has answered it (dropping the
// answer), or after armAnswerWait without an answer: so the commit is
// done, and visible to other sessions, when the client learns its
// connection broke (cut at once, the server could still be executing it
// when a test reads what it committed).
func (p *CutProxy) Arm() {
	p.ArmFunc(func(forward func() <-chan struct{}) {
		t := time.NewTimer(armAnswerWait)
		defer t.Stop()
		select {
		case <-forward():
		case <-t.C:
		}
	})
}

// armAnswerWait bounds Arm's wait for the server's answer to the COMMIT.
const armAnswerWait = 10 * time.Second

// ArmFunc makes the proxy stop at the next client chunk containing COMMIT
// and call hit, then cut that connection. From the moment it stops, no
// answer of the server reaches the client. hit decides whether the chunk
// reaches the server: forward sends it and returns a channel closed once
// the server's answer arrived (and was dropped). A test can thus make a
// commit that happened, or one that did not, look the same to the client,
// and kill the server in between.
func (p *CutProxy) ArmFunc(hit func(forward func() <-chan struct{})) { p.armed.Store(&hit) }

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
		var cut atomic.Bool // set before COMMIT is forwarded: its answer never reaches the client
		answered := make(chan struct{})
		var answeredOnce sync.Once
		p.wg.Add(2)
		go func() {
			defer p.wg.Done()
			defer c.Close()
			buf := make([]byte, 64<<10)
			for {
				n, err := s.Read(buf)
				if n > 0 && cut.Load() {
					answeredOnce.Do(func() { close(answered) })
				}
				if n > 0 && !cut.Load() {
					if _, werr := c.Write(buf[:n]); werr != nil {
						return
					}
				}
				if err != nil {
					return
				}
			}
		}()
		go func() {
			defer p.wg.Done()
			defer s.Close()
			defer c.Close()
			buf := make([]byte, 64<<10)
			for {
				n, err := c.Read(buf)
				if n > 0 {
					if bytes.Contains(bytes.ToLower(buf[:n]), []byte("commit")) {
						if hit := p.armed.Swap(nil); hit != nil {
							cut.Store(true)
							p.cuts.Add(1)
							(*hit)(func() <-chan struct{} { _, _ = s.Write(buf[:n]); return answered })
							return // the client's connection is cut; the server's closes with it
						}
					}
					if _, werr := s.Write(buf[:n]); werr != nil {
						return
					}
				}
				if err != nil {
					return
				}
			}
		}()
	}
}
