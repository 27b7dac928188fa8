package natsjs_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/opledger/opledger/internal/ledgerkit"
	"github.com/opledger/opledger/internal/outboxkit"
	"github.com/opledger/opledger/internal/testkit/natstest"
	"github.com/opledger/opledger/internal/testkit/outboxtest"
	"github.com/opledger/opledger/internal/testkit/testdb"
	"github.com/opledger/opledger/ledger"
	"github.com/opledger/opledger/outbox"
	"github.com/opledger/opledger/outbox/natsjs"
	"github.com/opledger/opledger/txmiddleware"
)

// enqueuer commits operations that each enqueue one message.
type enqueuer struct {
	t      *testing.T
	ob     *outbox.Outbox
	runner *txmiddleware.Runner
	n      int
}

func newEnqueuer(t *testing.T, e *testdb.Env, opts ...outbox.Option) *enqueuer {
	t.Helper()
	store, err := ledger.New(e.Dialect, ledger.WithTable(e.Table))
	if err != nil {
		t.Fatal(err)
	}
	ob, err := outbox.New(e.Dialect, append([]outbox.Option{outbox.WithTable(outbox.TableFor(e.Table))}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	r, err := txmiddleware.New(e.DB, store)
	if err != nil {
		t.Fatal(err)
	}
	return &enqueuer{t: t, ob: ob, runner: r}
}

// enqueue commits one operation enqueueing m and returns the message's id
// or Enqueue's error.
func (q *enqueuer) enqueue(m outbox.Message) (string, error) {
	q.t.Helper()
	q.n++
	id, err := ledger.NewIdentity("natsjs-test", "/test.v1.Events/Emit", "op-"+strconv.Itoa(q.n))
	if err != nil {
		q.t.Fatal(err)
	}
	var msgID string
	_, err = q.runner.Run(context.Background(), ledger.ClaimRequest{Identity: id, Fingerprint: ledger.FingerprintOf([]byte(strconv.Itoa(q.n)))},
		func(ctx context.Context, tx *sql.Tx) (ledger.Result, error) {
			var err error
			msgID, err = q.ob.Enqueue(ctx, tx, m)
			return ledger.Result{}, err
		})
	return msgID, err
}

// TestEnqueueRefusesWhatNATSCannotTake: with the publisher's limits,
// Enqueue refuses (nothing written) a topic that is no NATS subject and a
// message that with the publisher's headers exceeds the server's
// max_payload, read from the server; a payload of outboxkit.MaxPayloadSize,
// with the longest name and key and an expected stream, passes and is
// stored by a default nats-server.
func TestEnqueueRefusesWhatNATSCannotTake(t *testing.T) {
	srv := natstest.Start(t) // the default max_payload, 1 MiB
	js := natstest.Connect(t, srv.URL())
	if _, err := natstest.CreateStream(context.Background(), js, "LIMITS", []string{"limits.>"}); err != nil {
		t.Fatal(err)
	}
	pub, err := natsjs.New(js, natsjs.WithSubjectPrefix("limits."), natsjs.WithStream("LIMITS"))
	if err != nil {
		t.Fatal(err)
	}
	tg := testdb.Targets()[0]
	e := testdb.NewEnv(t, tg.Name, tg.Dialect, tg.Open(t, 2))
	q := newEnqueuer(t, e, outbox.WithPublisherLimits(pub))

	for _, topic := range []string{"a b", "a..b", ".a", "a.", "a.*.b", ">", "x.>"} {
		_, err := q.enqueue(outbox.Message{Name: "Bad", Topic: topic, Payload: []byte("x")})
		if !errors.Is(err, outbox.ErrUndeliverable) || !errors.Is(err, outbox.ErrInvalid) || !errors.Is(err, nats.ErrBadSubject) {
			t.Errorf("topic %q: %v, want an error matching ErrUndeliverable, ErrInvalid and nats.ErrBadSubject", topic, err)
		}
	}
	name, key := strings.Repeat("n", ledgerkit.MaxNameLen), strings.Repeat("k", outboxkit.MaxKeyLen)
	largest := outbox.Message{Name: name, Topic: "big", Key: key, Payload: make([]byte, outboxkit.MaxPayloadSize)}
	if err := pub.CheckMessage(largest); err != nil {
		t.Fatalf("a payload of MaxPayloadSize with the longest name and key: %v", err)
	}
	// Over the server's limit with the headers: refused at Enqueue.
	headers, buf := 0, make([]byte, 1<<20)
	for n := 0; n < 1<<20; n++ {
		m := largest
		m.Payload = buf[:1<<20-n]
		if pub.CheckMessage(m) == nil {
			headers = n
			break
		}
	}
	if headers != 975+len("LIMITS") {
		t.Errorf("the publisher's headers take %d bytes, want the 975 at most it documents and the stream's name", headers)
	}
	over := outbox.Message{Name: "Over", Topic: "big", Payload: make([]byte, outboxkit.MaxPayloadSize+1)}
	if _, err := q.enqueue(over); !errors.Is(err, outbox.ErrInvalid) {
		t.Errorf("a payload over MaxPayloadSize: %v", err)
	}
	over.Name, over.Key = name, key
	over.Payload = make([]byte, 1<<20-headers+1)
	if err := pub.CheckMessage(over); !errors.Is(err, nats.ErrMaxPayload) {
		t.Errorf("one byte over the server's max_payload: %v, want nats.ErrMaxPayload", err)
	}
	// The server's max_payload, not the outbox's: a smaller one refuses more.
	small := natstest.StartWith(t, natstest.Options{MaxPayload: 4096})
	pubSmall, err := natsjs.New(natstest.Connect(t, small.URL()))
	if err != nil {
		t.Fatal(err)
	}
	qs := newEnqueuer(t, e, outbox.WithPublisherLimits(pubSmall))
	if _, err := qs.enqueue(outbox.Message{Name: "Small", Topic: "x", Payload: make([]byte, 4096)}); !errors.Is(err, nats.ErrMaxPayload) || !errors.Is(err, outbox.ErrUndeliverable) {
		t.Errorf("4 KiB to a server of max_payload 4096: %v", err)
	}
	if n := e.Count(t, "SELECT COUNT(*) FROM "+e.Dialect.QuoteIdent(outbox.TableFor(e.Table))); n != 0 {
		t.Fatalf("%d refused messages written", n)
	}

	// The largest message goes in and reaches the stream of a default server.
	if _, err := q.enqueue(largest); err != nil {
		t.Fatalf("enqueue the largest message: %v", err)
	}
	r, err := outbox.NewRelay(e.DB, q.ob, pub)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := r.Drain(ctx); err != nil || r.Stats().Published != 1 {
		t.Fatalf("relay the largest message: %v, %+v", err, r.Stats())
	}
	s, err := js.Stream(ctx, "LIMITS")
	if err != nil {
		t.Fatal(err)
	}
	stored := streamContents(t, s)
	if len(stored) != 1 || len(stored[0].Payload) != outboxkit.MaxPayloadSize {
		t.Fatalf("stream holds %d messages", len(stored))
	}
}

// TestPermanentErrors: the errors natsjs classifies as undeliverable
// (outbox.ErrUndeliverable), against a real server, and one it retries.
func TestPermanentErrors(t *testing.T) {
	srv := natstest.Start(t)
	js := natstest.Connect(t, srv.URL())
	ctx := context.Background()
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "TINY", Subjects: []string{"tiny.>"}, MaxMsgSize: 512, Duplicates: time.Minute}); err != nil {
		t.Fatal(err)
	}
	if _, err := natstest.CreateStream(ctx, js, "OTHER", []string{"other.>"}); err != nil {
		t.Fatal(err)
	}
	plain, err := natsjs.New(js)
	if err != nil {
		t.Fatal(err)
	}
	expectTiny, err := natsjs.New(js, natsjs.WithStream("TINY"))
	if err != nil {
		t.Fatal(err)
	}
	env := func(topic string, size int) outbox.Envelope {
		return outbox.Envelope{Message: outbox.Message{Name: "E", Topic: topic, Payload: make([]byte, size)}, ID: fmt.Sprintf("%064d", size), Seq: 1}
	}
	for _, c := range []struct {
		what      string
		pub       *natsjs.Publisher
		e         outbox.Envelope
		permanent bool
	}{
		{"stored", plain, env("tiny.a", 8), false},
		{"over the stream's maximum message size (10054)", plain, env("tiny.b", 1000), true},
		{"captured by another stream than the expected one (10060)", expectTiny, env("other.a", 8), true},
		{"an empty token", plain, env("tiny..c", 8), true},
		{"a space", plain, env("tiny. c", 8), true},
		{"over the server's max_payload", plain, env("tiny.d", 2<<20), true},
		{"no stream captures it (retried: a stream may be created)", plain, env("nowhere.a", 8), false},
	} {
		pctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		err := c.pub.Publish(pctx, c.e)
		cancel()
		if c.what == "stored" {
			if err != nil {
				t.Errorf("%s: %v", c.what, err)
			}
			continue
		}
		if err == nil || errors.Is(err, outbox.ErrUndeliverable) != c.permanent {
			t.Errorf("%s: %v, want undeliverable %v", c.what, err, c.permanent)
		}
		t.Logf("%s: %v", c.what, err)
	}
}

// TestDeadMessageInJetStream, on every database: the server's max_payload
// is 4 KiB and a message of 8 KiB was enqueued (without the publisher's
// limits) in the middle of 1,000 messages of 8 other keys, with two more
// of its own key behind it. The relays (three at once where rows lock,
// killed mid-batch now and then) set it aside: the 1,000 reach the stream
// exactly once each and in order per key, while the two wait. The server
// is restarted with a max_payload of 1 MiB; retried, the message goes out,
// then the two behind it, in order.
func TestDeadMessageInJetStream(t *testing.T) {
	for i, tg := range testdb.Targets() {
		t.Run(tg.Name, func(t *testing.T) {
			srv := natstest.StartWith(t, natstest.Options{MaxPayload: 4096})
			js := natstest.Connect(t, srv.URL())
			e := testdb.NewEnv(t, tg.Name, tg.Dialect, tg.Open(t, 12))
			name := fmt.Sprintf("OPLDEAD%d", i)
			stream, err := natstest.CreateStream(context.Background(), js, name, []string{outboxtest.Topic})
			if err != nil {
				t.Fatal(err)
			}
			pub, err := natsjs.New(js, natsjs.WithStream(name))
			if err != nil {
				t.Fatal(err)
			}
			relays := 3
			if tg.Family() == "sqlite" {
				relays = 1
			}
			q := newEnqueuer(t, e)
			var bigID string
			want := outboxtest.Run(t, e, outboxtest.Config{Keys: 8, OpsPerKey: 125, Relays: relays, KillAfter: 97, Publisher: pub,
				RelayOptions: []outbox.RelayOption{outbox.WithPublishTimeout(time.Second)},
				Leave:        3, Dead: 1,
				During: func(ctx context.Context) {
					var err error
					if bigID, err = q.enqueue(outbox.Message{Name: "Big", Topic: outboxtest.Topic, Key: "big", Payload: []byte("big:0:" + strings.Repeat("x", 8<<10))}); err != nil {
						t.Error(err)
					}
					for j := 1; j <= 2; j++ {
						if _, err := q.enqueue(outbox.Message{Name: "Big", Topic: outboxtest.Topic, Key: "big", Payload: []byte("big:" + strconv.Itoa(j))}); err != nil {
							t.Error(err)
						}
					}
				}})
			stored := streamContents(t, stream)
			var others, big []outboxtest.Stored
			for _, s := range stored {
				if s.Key == "big" {
					big = append(big, s)
				} else {
					others = append(others, s)
				}
			}
			if len(want.Committed) != 1000 || len(others) != 1000 {
				t.Fatalf("%d committed, %d stored", len(want.Committed), len(others))
			}
			outboxtest.Check(t, want, others)
			if len(big) != 0 {
				t.Fatalf("%d messages of the dead message's key went out", len(big))
			}
			dead, err := q.ob.Dead(context.Background(), e.DB, 10)
			if err != nil || len(dead) != 1 || dead[0].ID != bigID || dead[0].Waiting != 2 || !strings.Contains(dead[0].Reason, nats.ErrMaxPayload.Error()) {
				t.Fatalf("dead: %+v %v", dead, err)
			}

			// The limit raised: retried, the message and its key go out in order.
			srv.RestartWith(natstest.Options{})
			for js.Conn().MaxPayload() != 1<<20 { // the client has the new server's INFO
				time.Sleep(10 * time.Millisecond)
			}
			if _, err := q.ob.RetryDead(context.Background(), e.DB, bigID); err != nil {
				t.Fatal(err)
			}
			r, err := outbox.NewRelay(e.DB, q.ob, pub, outbox.WithBackoff(10*time.Millisecond, 200*time.Millisecond))
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			if err := r.Drain(ctx); err != nil {
				t.Fatalf("drain after the retry: %v", err)
			}
			big = nil
			for _, s := range streamContents(t, stream) {
				if s.Key == "big" {
					big = append(big, s)
				}
			}
			if len(big) != 3 || big[0].ID != bigID || big[1].Payload != "big:1" || big[2].Payload != "big:2" {
				t.Fatalf("the dead message's key went out as %d messages", len(big))
			}
			t.Logf("%d relays in all; %d repeats dropped by JetStream, %d publishes failed", want.Relays, pub.Stats().Duplicates, pub.Stats().Failed)
		})
	}
}
