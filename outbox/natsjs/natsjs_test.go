package natsjs_test

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/opledger/opledger/internal/outboxtest"
	"github.com/opledger/opledger/internal/testdb"
	"github.com/opledger/opledger/outbox"
	"github.com/opledger/opledger/outbox/natsjs"
)

// server is a throw-away nats-server with JetStream, its own store
// directory and port, started by the test and removed with it.
type server struct {
	t    *testing.T
	port int
	dir  string
	cmd  *exec.Cmd
}

func startServer(t *testing.T) *server {
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
	s := &server{t: t, port: port, dir: t.TempDir()}
	s.start(bin)
	t.Cleanup(s.stop)
	return s
}

func (s *server) url() string { return "nats://127.0.0.1:" + strconv.Itoa(s.port) }

func (s *server) start(bin string) {
	s.t.Helper()
	s.cmd = exec.Command(bin, "-a", "127.0.0.1", "-p", strconv.Itoa(s.port), "-js", "-sd", filepath.Join(s.dir, "js"))
	s.cmd.Stdout, s.cmd.Stderr = nil, nil
	if err := s.cmd.Start(); err != nil {
		s.t.Fatal(err)
	}
	// Ready when JetStream answers.
	deadline := time.Now().Add(20 * time.Second)
	for {
		nc, err := nats.Connect(s.url(), nats.Timeout(time.Second))
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

func (s *server) stop() {
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

// restart stops the server, keeps it down for down, and starts it again
// on the same port and store.
func (s *server) restart(down time.Duration) {
	bin := s.cmd.Path
	s.stop()
	time.Sleep(down) // the outage itself: publishes fail meanwhile
	s.start(bin)
}

func connect(t *testing.T, url string) jetstream.JetStream {
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

// streamContents reads every message of the stream in order.
func streamContents(t *testing.T, s jetstream.Stream) []outboxtest.Stored {
	t.Helper()
	ctx := context.Background()
	info, err := s.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var out []outboxtest.Stored
	for seq := info.State.FirstSeq; seq <= info.State.LastSeq && info.State.Msgs > 0; seq++ {
		m, err := s.GetMsg(ctx, seq)
		if err != nil {
			t.Fatalf("stream message %d: %v", seq, err)
		}
		out = append(out, outboxtest.Stored{ID: m.Header.Get(jetstream.MsgIDHeader), Key: m.Header.Get(natsjs.HeaderKey), Payload: string(m.Data)})
	}
	return out
}

// TestRelayToJetStream: producers on 8 keys with every fifth operation
// rolled back, relays killed mid-batch and restarted, and the NATS server
// restarted while they run: every committed operation's message is in
// the stream exactly once (counted by Nats-Msg-Id), none of a rolled-back
// operation, each key's messages in order.
func TestRelayToJetStream(t *testing.T) {
	srv := startServer(t)
	js := connect(t, srv.url())
	for i, tg := range testdb.Targets() {
		t.Run(tg.Name, func(t *testing.T) {
			e := testdb.NewEnv(t, tg.Name, tg.Dialect, tg.Open(t, 10))
			name := fmt.Sprintf("OPLTEST%d", i)
			prefix := fmt.Sprintf("opltest%d.", i)
			stream, err := natsjs.EnsureStream(context.Background(), js, name, []string{prefix + ">"}, 0)
			if err != nil {
				t.Fatal(err)
			}
			pub, err := natsjs.New(js, natsjs.WithSubjectPrefix(prefix), natsjs.WithStream(name))
			if err != nil {
				t.Fatal(err)
			}
			relays := 3
			if tg.Family() == "sqlite" {
				relays = 1
			}
			want := outboxtest.Run(t, e, outboxtest.Config{Keys: 8, OpsPerKey: 30, RollbackEvery: 5, Relays: relays, KillAfter: 29,
				Publisher: pub, RelayOptions: []outbox.RelayOption{outbox.WithPublishTimeout(250 * time.Millisecond)},
				During: func(ctx context.Context) {
					time.Sleep(100 * time.Millisecond) // let some messages through first
					srv.restart(time.Second)
				}})
			stored := streamContents(t, stream)
			outboxtest.Check(t, want, stored)
			st := pub.Stats()
			if st.Duplicates == 0 || st.Failed == 0 {
				t.Errorf("JetStream dropped %d repeats and %d publishes failed: want both (relays killed mid-batch, NATS restarted)", st.Duplicates, st.Failed)
			}
			t.Logf("%d committed, %d rolled back; stream holds %d; %d repeats dropped by JetStream, %d publishes failed; %d relays in all",
				len(want.Committed), len(want.RolledBack), len(stored), st.Duplicates, st.Failed, want.Relays)
		})
	}
}
