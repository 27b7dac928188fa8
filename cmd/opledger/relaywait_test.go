package main

import (
	"bytes"
	"context"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/opledger/opledger/internal/outboxkit"
	"github.com/opledger/opledger/internal/testkit/natstest"
	"github.com/opledger/opledger/outbox"
)

// lockedBuffer is a bytes.Buffer that a command writes while the test
// reads it.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// backgroundRelay is an opledger command running in the background, as
// a supervisor runs it, until its context is cancelled (an interrupt).
type backgroundRelay struct {
	out, errs lockedBuffer
	cancel    context.CancelFunc
	done      chan int // its exit code
}

// startRelay runs opledger with args in the background; the test's end
// cancels it and waits for it.
func startRelay(t *testing.T, args ...string) *backgroundRelay {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	r := &backgroundRelay{cancel: cancel, done: make(chan int, 1)}
	go func() { r.done <- run(ctx, args, &r.out, &r.errs) }()
	t.Cleanup(func() {
		cancel()
		select {
		case <-r.done:
		case <-time.After(30 * time.Second):
			t.Error("the relay did not stop within 30 s of its cancel")
		}
	})
	return r
}

// exit cancels the command (an interrupt) and returns its exit code.
func (r *backgroundRelay) exit(t *testing.T) int {
	t.Helper()
	r.cancel()
	select {
	case code := <-r.done:
		r.done <- code // for the cleanup
		return code
	case <-time.After(10 * time.Second):
		t.Fatalf("the relay did not exit within 10 s of its cancel\nstdout: %s\nstderr: %s", r.out.String(), r.errs.String())
		return 0
	}
}

// exited returns the command's exit code once it has exited by itself.
func (r *backgroundRelay) exited() (int, bool) {
	select {
	case code := <-r.done:
		r.done <- code
		return code, true
	default:
		return 0, false
	}
}

// waitForAttempts returns once the relay has logged n failed attempts
// to reach its broker; it fails t if the relay exits meanwhile.
func (r *backgroundRelay) waitForAttempts(t *testing.T, n int) {
	t.Helper()
	waitUntil(t, 30*time.Second, strconv.Itoa(n)+" attempts to reach the broker", func() bool {
		if code, ok := r.exited(); ok {
			t.Fatalf("the relay exited (%d) while its broker was down\nstdout: %s\nstderr: %s", code, r.out.String(), r.errs.String())
		}
		attempts, _ := waitingLines(t, r.errs.String())
		return len(attempts) >= n
	})
}

// waitingLine is relay's log line for an attempt to reach its broker
// that failed: slog's text format, as relay -v's other lines.
var waitingLine = regexp.MustCompile(`^time=\S+ level=WARN msg="opledger relay: waiting for broker" to=(\S+) attempt=(\d+) backoff=(\S+) error="[^"]+"$`)

// waitingLines returns the attempts relay logged on stderr while its
// broker was down, and fails t for a line of another shape that names
// the broker.
func waitingLines(t *testing.T, errs string) (attempts []int, backoffs []time.Duration) {
	t.Helper()
	for _, l := range strings.Split(errs, "\n") {
		if !strings.Contains(l, "waiting for broker") {
			continue
		}
		m := waitingLine.FindStringSubmatch(l)
		if m == nil {
			t.Fatalf("a waiting line of another shape than %s:\n%s", waitingLine, l)
		}
		n, _ := strconv.Atoi(m[2])
		d, err := time.ParseDuration(m[3])
		if err != nil {
			t.Fatalf("backoff %q: %v", m[3], err)
		}
		attempts, backoffs = append(attempts, n), append(backoffs, d)
	}
	return attempts, backoffs
}

// waitUntil polls cond every 20 ms until it holds; after limit it fails
// t, naming what it waited for.
func waitUntil(t *testing.T, limit time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(limit)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %s", what, limit)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// streamMsgs returns how many messages the stream holds (0 while it does
// not exist).
func streamMsgs(js jetstream.JetStream, name string) uint64 {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	s, err := js.Stream(ctx, name)
	if err != nil {
		return 0
	}
	info, err := s.Info(ctx)
	if err != nil {
		return 0
	}
	return info.State.Msgs
}

// checkAttempts fails t unless the attempts are 1, 2, … in order, each
// logged with the relay's backoff for that many failures in a row:
// outboxkit.DefaultBackoffBase doubled per failure up to
// outboxkit.DefaultBackoffMax, jittered to between half and all of it.
func checkAttempts(t *testing.T, attempts []int, backoffs []time.Duration) {
	t.Helper()
	for i, n := range attempts {
		if n != i+1 {
			t.Fatalf("attempts logged %v, want 1, 2, … (one line per attempt)", attempts)
		}
		full := outboxkit.DefaultBackoffBase
		for range i {
			full = min(2*full, outboxkit.DefaultBackoffMax)
		}
		if d := backoffs[i]; d < full/2 || d > full {
			t.Errorf("attempt %d: backoff %s, want between %s and %s (the relay's backoff)", n, d, full/2, full)
		}
	}
}

// TestRelayWaitsForBroker: `opledger relay` started before its broker (a
// pod and its broker coming up together) waits for it, logging one line
// per attempt with the relay's backoff and the servers as the banner
// shows them (the token of --to never printed). A throw-away nats-server
// started on that port once the relay has tried a few times gets the
// stream created and the messages enqueued before, then those enqueued
// after; interrupted, the relay exits 0 with its count.
func TestRelayWaitsForBroker(t *testing.T) {
	const token = "Wt9relayWaitsToken9Wt"
	port := natstest.FreePort(t)
	path := migrated(t)
	first := relayMessages(10, "waittest.events")
	enqueueIn(t, path, first)
	to := "nats://" + token + "@127.0.0.1:" + strconv.Itoa(port)
	r := startRelay(t, "relay", "--dsn", path, "--to", to, "--stream", "WAITTEST", "--subjects", "waittest.>")

	const downAttempts = 4 // 100 ms, 200 ms, 400 ms, 800 ms at most, as a later outage backs off
	r.waitForAttempts(t, downAttempts)
	srv := natstest.StartWith(t, natstest.Options{Port: port, Auth: natstest.Auth{Token: token}})
	js := natstest.Connect(t, srv.AuthURL())
	waitUntil(t, 30*time.Second, "the messages enqueued before the broker came, in WAITTEST", func() bool {
		return streamMsgs(js, "WAITTEST") == uint64(len(first))
	})
	enqueueIn(t, path, relayMessages(5, "waittest.events"))
	waitUntil(t, 30*time.Second, "the messages enqueued after, in WAITTEST", func() bool {
		return streamMsgs(js, "WAITTEST") == uint64(len(first)+5)
	})

	attempts, backoffs := waitingLines(t, r.errs.String())
	if len(attempts) < downAttempts {
		t.Fatalf("%d waiting lines, want at least %d\n%s", len(attempts), downAttempts, r.errs.String())
	}
	checkAttempts(t, attempts, backoffs)
	if code := r.exit(t); code != 0 || !strings.Contains(r.out.String(), "published 15 (stored 15") {
		t.Fatalf("interrupted relay: exit %d, want 0 and 15 published\nstdout: %s\nstderr: %s", code, r.out.String(), r.errs.String())
	}
	shown := "nats://xxxxx@127.0.0.1:" + strconv.Itoa(port)
	if !strings.Contains(r.errs.String(), "to="+shown+" ") || !strings.Contains(r.out.String(), "→ "+shown+"\n") {
		t.Errorf("the banner and the waiting lines should name the broker as %s\nstdout: %s\nstderr: %s", shown, r.out.String(), r.errs.String())
	}
	if strings.Contains(r.out.String()+r.errs.String(), token) {
		t.Errorf("the token of --to was printed\nstdout: %s\nstderr: %s", r.out.String(), r.errs.String())
	}
}

// TestRelayDrainWaitsForBroker: `relay --drain` started before its
// broker waits for it too (it has drained nothing yet), then drains and
// exits 0.
func TestRelayDrainWaitsForBroker(t *testing.T) {
	port := natstest.FreePort(t)
	path := migrated(t)
	enqueueIn(t, path, relayMessages(6, "drainwait.events"))
	to := "nats://127.0.0.1:" + strconv.Itoa(port)
	r := startRelay(t, "relay", "--dsn", path, "--to", to, "--stream", "DRAINWAIT", "--subjects", "drainwait.>", "--drain")
	r.waitForAttempts(t, 2)
	srv := natstest.StartWith(t, natstest.Options{Port: port})
	var code int
	waitUntil(t, 30*time.Second, "relay --drain's exit once its broker came", func() bool {
		var ok bool
		code, ok = r.exited()
		return ok
	})
	if code != 0 || !strings.Contains(r.out.String(), "published 6 (stored 6") {
		t.Fatalf("relay --drain: exit %d, want 0 and 6 published\nstdout: %s\nstderr: %s", code, r.out.String(), r.errs.String())
	}
	if n := streamMsgs(natstest.Connect(t, srv.URL()), "DRAINWAIT"); n != 6 {
		t.Fatalf("DRAINWAIT holds %d messages, want 6", n)
	}
	attempts, backoffs := waitingLines(t, r.errs.String())
	checkAttempts(t, attempts, backoffs)
}

// TestRelayInterruptedWhileWaiting: a relay whose broker never comes
// waits until it is interrupted, and then exits as an interrupted relay
// does: 0 with its (empty) count; with --drain, 2 with one line, as it
// did not drain. Neither prints the password of --to.
func TestRelayInterruptedWhileWaiting(t *testing.T) {
	const password = "Pw9relayInterrupted9Pw"
	path := migrated(t)
	enqueueIn(t, path, relayMessages(3, "nowhere.events"))
	to := "nats://relay:" + password + "@127.0.0.1:" + strconv.Itoa(natstest.FreePort(t))
	for _, c := range []struct {
		flags []string
		code  int
	}{{nil, 0}, {[]string{"--drain"}, 2}} {
		r := startRelay(t, append([]string{"relay", "--dsn", path, "--to", to}, c.flags...)...)
		r.waitForAttempts(t, 1)
		code := r.exit(t)
		out, errs := r.out.String(), r.errs.String()
		if code != c.code || !strings.Contains(out, "nats://relay:xxxxx@") || strings.Contains(out+errs, password) {
			t.Errorf("relay %v interrupted while waiting: exit %d, want %d, the banner, no password\nstdout: %s\nstderr: %s", c.flags, code, c.code, out, errs)
		}
		lines := strings.Split(strings.TrimSpace(errs), "\n")
		last := lines[len(lines)-1]
		switch {
		case c.code == 0 && !strings.Contains(out, "published 0 "):
			t.Errorf("relay interrupted while waiting: want its count\nstdout: %s", out)
		case c.code == 2 && last != "opledger relay: context canceled":
			t.Errorf("relay --drain interrupted while waiting: want one last line saying so\nstderr: %s", errs)
		}
	}
}

// relayMessages returns n messages to topic on three keys.
func relayMessages(n int, topic string) []outbox.Message {
	var msgs []outbox.Message
	for i := range n {
		msgs = append(msgs, outbox.Message{Name: "Emitted", Topic: topic, Key: "k" + strconv.Itoa(i%3), Payload: []byte{byte(i)}})
	}
	return msgs
}
