package natsjs_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/opledger/opledger/internal/testkit/natstest"
	"github.com/opledger/opledger/internal/testkit/outboxtest"
	"github.com/opledger/opledger/internal/testkit/testdb"
	"github.com/opledger/opledger/outbox"
	"github.com/opledger/opledger/outbox/natsjs"
)

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
		out = append(out, outboxtest.Stored{ID: m.Header.Get(jetstream.MsgIDHeader), Key: m.Header.Get("Opledger-Partition-Key"), Payload: string(m.Data)})
	}
	return out
}

// TestRelayToJetStream: producers on 8 keys with every fifth operation
// rolled back, relays killed mid-batch and restarted, and the NATS server
// restarted while they run: every committed operation's message is in
// the stream exactly once (counted by Nats-Msg-Id), none of a rolled-back
// operation, each key's messages in order.
func TestRelayToJetStream(t *testing.T) {
	srv := natstest.Start(t)
	js := natstest.Connect(t, srv.URL())
	for i, tg := range testdb.Targets() {
		t.Run(tg.Name, func(t *testing.T) {
			e := testdb.NewEnv(t, tg.Name, tg.Dialect, tg.Open(t, 10))
			name := fmt.Sprintf("OPLTEST%d", i)
			prefix := fmt.Sprintf("opltest%d.", i)
			stream, err := natstest.CreateStream(context.Background(), js, name, []string{prefix + ">"})
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
					srv.Restart(time.Second)
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
