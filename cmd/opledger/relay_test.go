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
	"github.com/opledger/opledger/internal/natstest"
	"github.com/opledger/opledger/ledger"
	"github.com/opledger/opledger/outbox"
	"github.com/opledger/opledger/txmiddleware"
)

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

// relayOutbox migrates a SQLite ledger at path and commits n messages
// to topic into its outbox, on three keys, each through the ledger.
func relayOutbox(t *testing.T, path string, n int, topic string) {
	t.Helper()
	if code, out, errs := runCmd(t, "migrate", "up", "--dsn", path); code != 0 {
		t.Fatalf("migrate: %d %s %s", code, out, errs)
	}
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
	for i := range n {
		id, err := ledger.NewIdentity("cli", "/test.v1.Events/Emit", "key-"+strconv.Itoa(i))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := r.Run(context.Background(), ledger.ClaimRequest{Identity: id, Fingerprint: ledger.FingerprintOf([]byte{byte(i)})},
			func(ctx context.Context, tx *sql.Tx) (ledger.Result, error) {
				_, err := ob.Enqueue(ctx, tx, outbox.Message{Name: "Emitted", Topic: topic, Key: "k" + strconv.Itoa(i%3), Payload: []byte{byte(i)}})
				return ledger.Result{}, err
			}); err != nil {
			t.Fatal(err)
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
