// Package natstest starts throw-away NATS servers for tests: JetStream
// with a store directory and a port of the test's own, removed with it.
// The machine's shared NATS is never restarted.
package natstest

import (
	"context"
	"net"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/opledger/opledger/internal/testkit/testdb"
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
	// Auth is what the server requires of its clients (nothing when
	// zero).
	Auth Auth
	// Port is the loopback port the server listens on (0: a free one):
	// FreePort's, for a test that starts a client before its server.
	Port int
}

// Auth is what a server started by StartAuth requires of its clients:
// a token, or a user and a password.
type Auth struct {
	Token          string
	User, Password string
}

// Start starts a server on a free loopback port, stopped when the test
// ends. Without nats-server on PATH it skips (fails with
// OPLEDGER_TEST_REQUIRE_DBS=1).
func Start(t *testing.T) *Server {
	t.Helper()
	return StartWith(t, Options{})
}

// StartAuth is Start for a server that requires auth of every client
// (none when auth is zero). URL stays without the credentials;
// AuthURL holds them.
func StartAuth(t *testing.T, auth Auth) *Server {
	t.Helper()
	return StartWith(t, Options{Auth: auth})
}

// StartWith is Start with options.
func StartWith(t *testing.T, o Options) *Server {
	t.Helper()
	bin := binary(t)
	port := o.Port
	if port == 0 {
		port = FreePort(t)
	}
	s := &Server{t: t, port: port, dir: t.TempDir(), opts: o}
	s.start(bin)
	t.Cleanup(s.Stop)
	return s
}

// FreePort returns a loopback port that nothing listens on, for a server
// a test starts later (Options.Port). Without nats-server on PATH it
// skips, as Start does, before the test starts anything.
func FreePort(t *testing.T) int {
	t.Helper()
	binary(t)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// binary returns the path of nats-server; without it, the test skips
// (fails with OPLEDGER_TEST_REQUIRE_DBS=1).
func binary(t *testing.T) string {
	t.Helper()
	bin, err := exec.LookPath("nats-server")
	if err != nil {
		if os.Getenv(testdb.EnvRequire) == "1" {
			t.Fatalf("nats-server not found: %v", err)
		}
		t.Skip("nats-server not installed")
	}
	return bin
}

// URL is the server's nats:// URL, without credentials.
func (s *Server) URL() string { return "nats://127.0.0.1:" + strconv.Itoa(s.port) }

// AuthURL is the server's nats:// URL with the credentials it requires:
// nats://TOKEN@host:port or nats://USER:PASSWORD@host:port (URL when it
// requires none).
func (s *Server) AuthURL() string {
	u := url.URL{Scheme: "nats", Host: "127.0.0.1:" + strconv.Itoa(s.port)}
	switch {
	case s.opts.Auth.Token != "":
		u.User = url.User(s.opts.Auth.Token)
	case s.opts.Auth.User != "":
		u.User = url.UserPassword(s.opts.Auth.User, s.opts.Auth.Password)
	}
	return u.String()
}

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
	switch {
	case s.opts.Auth.Token != "":
		args = append(args, "--auth", s.opts.Auth.Token)
	case s.opts.Auth.User != "":
		args = append(args, "--user", s.opts.Auth.User, "--pass", s.opts.Auth.Password)
	}
	s.cmd = exec.Command(bin, args...)
	s.cmd.Stdout, s.cmd.Stderr = nil, nil
	if err := s.cmd.Start(); err != nil {
		s.t.Fatal(err)
	}
	// Ready when JetStream answers.
	deadline := time.Now().Add(20 * time.Second)
	for {
		nc, err := nats.Connect(s.AuthURL(), nats.Timeout(time.Second))
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

// CreateStream creates the stream called name on js, capturing subjects,
// with file storage and JetStream's default duplicate window (two
// minutes), which the outbox's publisher needs to drop the relay's
// re-sends.
func CreateStream(ctx context.Context, js jetstream.JetStream, name string, subjects []string) (jetstream.Stream, error) {
	return js.CreateStream(ctx, jetstream.StreamConfig{Name: name, Subjects: subjects,
		Storage: jetstream.FileStorage, Duplicates: 2 * time.Minute})
}
