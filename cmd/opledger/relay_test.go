package main

import (
	"bytes"
	"context"
	"database/sql"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/opledger/opledger/dialects/sqlite"
	"github.com/opledger/opledger/internal/testkit/natstest"
	"github.com/opledger/opledger/ledger"
	"github.com/opledger/opledger/outbox"
	"github.com/opledger/opledger/txmiddleware"
)

// enqueueIn commits one operation per message into the SQLite ledger at
// path, each enqueueing its message; it returns the messages' ids.
func enqueueIn(t *testing.T, path string, msgs []outbox.Message) []string {
	t.Helper()
	db, err := sql.Open("sqlite3", sqlite.DSN(path, 5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	store, err := ledger.New(sqlite.New())
	if err != nil {
		t.Fatal(err)
	}
	ob, err := outbox.New(sqlite.New())
	if err != nil {
		t.Fatal(err)
	}
	r, err := txmiddleware.New(db, store)
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, m := range msgs {
		id, err := ledger.NewIdentity("cli", "/test.v1.Events/Emit", "key-"+strconv.Itoa(len(ids))+"-"+t.Name()+"-"+strconv.FormatInt(time.Now().UnixNano(), 36))
		if err != nil {
			t.Fatal(err)
		}
		var msgID string
		if _, err := r.Run(context.Background(), ledger.ClaimRequest{Identity: id, Fingerprint: ledger.FingerprintOf(m.Payload)},
			func(ctx context.Context, tx *sql.Tx) (ledger.Result, error) {
				var err error
				msgID, err = ob.Enqueue(ctx, tx, m)
				return ledger.Result{}, err
			}); err != nil {
			t.Fatal(err)
		}
		ids = append(ids, msgID)
	}
	return ids
}

// migrated returns a fresh SQLite file with the kit's tables.
func migrated(t *testing.T) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "relay.db")
	if code, out, errs := runCmd(t, "migrate", "up", "--dsn", path); code != 0 {
		t.Fatalf("migrate: %d %s %s", code, out, errs)
	}
	return path
}

// relayOutbox migrates a SQLite ledger at path and commits n messages
// to topic into its outbox, on three keys, each through the ledger.
func relayOutbox(t *testing.T, path string, n int, topic string) {
	t.Helper()
	if code, out, errs := runCmd(t, "migrate", "up", "--dsn", path); code != 0 {
		t.Fatalf("migrate: %d %s %s", code, out, errs)
	}
	var msgs []outbox.Message
	for i := range n {
		msgs = append(msgs, outbox.Message{Name: "Emitted", Topic: topic, Key: "k" + strconv.Itoa(i%3), Payload: []byte{byte(i)}})
	}
	enqueueIn(t, path, msgs)
}

// TestRelayCommand: messages committed through the ledger into an SQLite
// outbox; `opledger relay --drain` publishes them to a throw-away
// JetStream; running it again publishes nothing more.
func TestRelayCommand(t *testing.T) {
	srv := natstest.Start(t)
	path := filepath.Join(t.TempDir(), "relay.db")
	const n = 25
	relayOutbox(t, path, n, "relaytest.events")
	args := []string{"relay", "--dsn", path, "--to", srv.URL(), "--stream", "RELAYTEST", "--subjects", "relaytest.>", "--drain"}
	code, out, errs := runCmd(t, args...)
	if code != 0 || !strings.Contains(out, "published "+strconv.Itoa(n)+" (stored "+strconv.Itoa(n)) {
		t.Fatalf("relay: %d\n%s\n%s", code, out, errs)
	}
	code, out, _ = runCmd(t, args...)
	if code != 0 || !strings.Contains(out, "published 0") {
		t.Fatalf("second relay: %d\n%s", code, out)
	}
	js := natstest.Connect(t, srv.URL())
	s, err := js.Stream(context.Background(), "RELAYTEST")
	if err != nil {
		t.Fatal(err)
	}
	info, err := s.Info(context.Background())
	if err != nil || info.State.Msgs != n {
		t.Fatalf("stream holds %d messages (%v), want %d", info.State.Msgs, err, n)
	}
}

// TestRelayDeadCommands: a message over the server's max_payload and one
// to a subject NATS does not accept, among others: `relay --drain`
// publishes the others, sets both aside and exits 1 with a one-line
// reason; `relay --dead` lists them; with the limit raised,
// `--retry-dead ID` gets the first delivered, its key after it;
// `--discard-dead ID` deletes the second and lets its key through.
func TestRelayDeadCommands(t *testing.T) {
	srv := natstest.StartWith(t, natstest.Options{MaxPayload: 2048})
	path := migrated(t)
	var msgs []outbox.Message
	for i := range 12 {
		msgs = append(msgs, outbox.Message{Name: "Emitted", Topic: "deadtest.events", Key: "k" + strconv.Itoa(i%3), Payload: []byte{byte(i)}})
	}
	msgs = append(msgs,
		outbox.Message{Name: "Big", Topic: "deadtest.events", Key: "big", Payload: make([]byte, 4096)},
		outbox.Message{Name: "After", Topic: "deadtest.events", Key: "big", Payload: []byte("after big")},
		outbox.Message{Name: "Misnamed", Topic: "deadtest..events", Key: "misnamed", Payload: []byte("never")},
		outbox.Message{Name: "After", Topic: "deadtest.events", Key: "misnamed", Payload: []byte("after misnamed")})
	ids := enqueueIn(t, path, msgs)
	big, misnamed := ids[12], ids[14]
	relay := []string{"relay", "--dsn", path, "--to", srv.URL(), "--stream", "DEADTEST", "--subjects", "deadtest.>", "--drain"}

	code, out, errs := runCmdTimeout(t, relay...)
	if code != 1 || !strings.Contains(out, "published 12 ") || !strings.Contains(out, "2 set aside as undeliverable") ||
		strings.Count(errs, "\n") != 1 || !strings.Contains(errs, "2 messages set aside as undeliverable (dead), 2 more waiting behind them") ||
		!strings.Contains(errs, "opledger relay --dead") {
		t.Fatalf("relay --drain with undeliverable messages: exit %d\n%s\n%s", code, out, errs)
	}
	code, out, errs = runCmd(t, "relay", "--dsn", path, "--dead")
	if code != 0 || !strings.Contains(out, big) || !strings.Contains(out, misnamed) || !strings.Contains(out, "maximum payload exceeded") ||
		!strings.Contains(out, "empty token") || !strings.Contains(out, `"big"`) {
		t.Fatalf("relay --dead: exit %d\n%s\n%s", code, out, errs)
	}

	srv.RestartWith(natstest.Options{}) // max_payload back to 1 MiB
	code, out, errs = runCmd(t, "relay", "--dsn", path, "--retry-dead", big)
	if code != 0 || !strings.Contains(out, "retried dead message "+big) || !strings.Contains(out, "then the 1 message of its key") {
		t.Fatalf("relay --retry-dead: exit %d\n%s\n%s", code, out, errs)
	}
	code, out, errs = runCmd(t, "relay", "--dsn", path, "--discard-dead", misnamed)
	if code != 0 || !strings.Contains(out, "discarded dead message "+misnamed) || !strings.Contains(out, "never be published") {
		t.Fatalf("relay --discard-dead: exit %d\n%s\n%s", code, out, errs)
	}
	code, out, errs = runCmdTimeout(t, relay...)
	if code != 0 || !strings.Contains(out, "published 3 ") || errs != "" {
		t.Fatalf("relay --drain after the retry and the discard: exit %d\n%s\n%s", code, out, errs)
	}
	code, out, _ = runCmd(t, "relay", "--dsn", path, "--dead")
	if code != 0 || !strings.Contains(out, "no dead messages") {
		t.Fatalf("relay --dead at the end: exit %d\n%s", code, out)
	}
	js := natstest.Connect(t, srv.URL())
	s, err := js.Stream(context.Background(), "DEADTEST")
	if err != nil {
		t.Fatal(err)
	}
	if info, err := s.Info(context.Background()); err != nil || info.State.Msgs != 15 {
		t.Fatalf("stream holds %d messages (%v), want 15", info.State.Msgs, err)
	}
	for _, c := range []struct {
		args []string
		code int
	}{
		{[]string{"--discard-dead", big}, 1}, // delivered: no longer dead
		{[]string{"--retry-dead", "xyz"}, 2},
		{[]string{"--dead", "--retry-dead", big}, 2},
		{[]string{"--dead", "--to", srv.URL()}, 2},
		{[]string{"--dead", "--drain"}, 2},
		{[]string{"--dead", "extra"}, 2},
	} {
		code, out, errs := runCmd(t, append([]string{"relay", "--dsn", path}, c.args...)...)
		if code != c.code || strings.Count(errs, "\n") != 1 {
			t.Errorf("relay %v: exit %d, want %d\n%s\n%s", c.args, code, c.code, out, errs)
		}
	}
}

func TestRelayBadFlags(t *testing.T) {
	for _, args := range [][]string{
		{"relay"},
		{"relay", "--to", "http://x"},
		{"relay", "--to", "nats://127.0.0.1:1", "--subjects", "a.>"},
		{"relay", "--to", "nats://127.0.0.1:1", "extra"},
		{"relay", "--to", "nats://127.0.0.1:1", "--batch", "0", "--dsn", filepath.Join(t.TempDir(), "x.db")},
	} {
		var out, errb bytes.Buffer
		if code := run(context.Background(), args, &out, &errb); code != 2 {
			t.Errorf("%v: exit %d, want 2 (stderr %q)", args, code, errb.String())
		}
	}
}

func TestDemoChain(t *testing.T) {
	t.Chdir(t.TempDir())
	var out, errb bytes.Buffer
	code := run(context.Background(), []string{"demo", "--chain", "--calls", "200", "--outage-calls", "0"}, &out, &errb)
	if code != 0 {
		t.Fatalf("exit %d\nstdout:\n%s\nstderr:\n%s", code, out.String(), errb.String())
	}
	for _, want := range []string{"chain: fraud checks replayed", "chain: duplicate checks (must be 0)", "outbox: TransferCompleted events published", "outbox: duplicate events (must be 0)", "OK:"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("output lacks %q:\n%s", want, out.String())
		}
	}
	if code := run(context.Background(), []string{"demo", "--to", "nats://127.0.0.1:4222"}, &out, &errb); code != 2 {
		t.Errorf("--to without --chain: exit %d, want 2", code)
	}
}
