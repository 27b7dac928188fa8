// Package natstest starts throw-away NATS servers for tests: JetStream
// with a store directory and a port of the test's own, removed with it.
// The machine's shared NATS is never restarted.
package natstest

import (
	"context"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/opledger/opledger/internal/testdb"
)

// Server is a throw-away nats-server with JetStream, its own store
// directory and port, started by the test and removed with it.
type Server struct {
	t    *testing.T
	port int
	dir  string
	cmd  *exec.Cmd
	opts Options
}

// Options configure a throw-away server.
type Options struct {
	// MaxPayload is the server's max_payload in bytes, the largest
	// message (headers and payload) it accepts; 0 keeps its default,
	// 1 MiB.
	MaxPayload int
}

// Start starts a server on a free loopback port, stopped when the test
// ends. Without nats-server on PATH it skips (fails with
// OPLEDGER_TEST_REQUIRE_DBS=1).
func Start(t *testing.T) *Server {
	t.Helper()
	return StartWith(t, Options{})
}

// StartWith is Start with options.
func StartWith(t *testing.T, o Options) *Server {
	t.Helper()
	bin, err := exec.LookPath("nats-server")
	if err != nil {
		if os.Getenv(testdb.EnvRequire) == "1" {
			t.Fatalf("nats-server not found: %v", err)
		}
		t.Skip("nats-server not installed")
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	l.Close()
	s := &Server{t: t, port: port, dir: t.TempDir(), opts: o}
	s.start(bin)
	t.Cleanup(s.Stop)
	return s
}

// URL is the server's nats:// URL.
func (s *Server) URL() string { return "nats://127.0.0.1:" + strconv.Itoa(s.port) }

func (s *Server) start(bin string) {
	s.t.Helper()
	args := []string{"-a", "127.0.0.1", "-p", strconv.Itoa(s.port), "-js", "-sd", filepath.Join(s.dir, "js")}
	if s.opts.MaxPayload > 0 {
		conf := filepath.Join(s.dir, "nats.conf")
		if err := os.WriteFile(conf, []byte("max_payload: "+strconv.Itoa(s.opts.MaxPayload)+"\n"), 0o600); err != nil {
			s.t.Fatal(err)
		}
		args = append(args, "-c", conf)
	}
	s.cmd = exec.Command(bin, args...)
	s.cmd.Stdout, s.cmd.Stderr = nil, nil
	if err := s.cmd.Start(); err != nil {
		s.t.Fatal(err)
	}
	// Ready when JetStream answers.
	deadline := time.Now().Add(20 * time.Second)
	for {
		nc, err := nats.Connect(s.URL(), nats.Timeout(time.Second))
		if err == nil {
			js, _ := jetstream.New(nc)
			_, err = js.AccountInfo(context.Background())
			nc.Close()
			if err == nil {
				return
			}
		}
		if time.Now().After(deadline) {
			s.t.Fatalf("nats-server on %d not ready: %v", s.port, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// Stop stops the server (SIGINT, then SIGKILL after 10 s).
func (s *Server) Stop() {
	if s.cmd == nil || s.cmd.Process == nil {
		return
	}
	_ = s.cmd.Process.Signal(os.Interrupt)
	done := make(chan struct{})
	go func() { _ = s.cmd.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		_ = s.cmd.Process.Kill()
		<-done
	}
	s.cmd = nil
}

// Restart stops the server, keeps it down for down, and starts it again
// on the same port and store.
func (s *Server) Restart(down time.Duration) {
	bin := s.cmd.Path
	s.Stop()
	time.Sleep(down) // the outage itself: publishes fail meanwhile
	s.start(bin)
}

// RestartWith stops the server and starts it again at once on the same
// port and store, with options o (a new max_payload, say).
func (s *Server) RestartWith(o Options) {
	bin := s.cmd.Path
	s.Stop()
	s.opts = o
	s.start(bin)
}

// Connect returns JetStream on a connection to url that reconnects for
// ever, every 20 ms, closed when the test ends.
func Connect(t *testing.T, url string) jetstream.JetStream {
	t.Helper()
	nc, err := nats.Connect(url, nats.MaxReconnects(-1), nats.ReconnectWait(20*time.Millisecond), nats.Timeout(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	return js
}
