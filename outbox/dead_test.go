package outbox_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/opledger/opledger/internal/harness/otelread"
	"github.com/opledger/opledger/internal/testkit/outboxtest"
	"github.com/opledger/opledger/internal/testkit/testdb"
	"github.com/opledger/opledger/ledger"
	"github.com/opledger/opledger/outbox"
)

// refusing is a broker that refuses, as undeliverable, every message whose
// payload starts with "poison" while poisoned, after failing it
// transiently a few times first; everything else it passes to the
// in-memory broker.
type refusing struct {
	outboxtest.Broker
	transient int // transient failures of a poison message before it is refused

	mu       sync.Mutex
	poisoned bool
	tries    map[string]int
}

var errRefused = errors.New("broker: this message is too large for me")

func (b *refusing) Publish(ctx context.Context, e outbox.Envelope) error {
	b.mu.Lock()
	if b.poisoned && strings.HasPrefix(string(e.Payload), "poison") {
		if b.tries == nil {
			b.tries = map[string]int{}
		}
		b.tries[e.ID]++
		n := b.tries[e.ID]
		b.mu.Unlock()
		if n <= b.transient {
			return errors.New("broker: try again later")
		}
		return fmt.Errorf("%w: %w", outbox.ErrUndeliverable, errRefused)
	}
	b.mu.Unlock()
	return b.Broker.Publish(ctx, e)
}

func (b *refusing) heal() {
	b.mu.Lock()
	b.poisoned = false
	b.mu.Unlock()
}

// enqueueAll commits one operation per payload, each enqueueing one
// message of key key(payload) = the part before ":".
func (e *env) enqueueAll(t *testing.T, prefix string, payloads []string) map[string]string {
	t.Helper()
	ids := map[string]string{}
	for i, p := range payloads {
		key, _, _ := strings.Cut(p, ":")
		if strings.HasPrefix(key, "poison") {
			key = strings.TrimPrefix(key, "poison")
		}
		out, err := e.runner.Run(context.Background(), claim(t, prefix+strconv.Itoa(i)), func(ctx context.Context, tx *sql.Tx) (ledger.Result, error) {
			id, err := e.ob.Enqueue(ctx, tx, outbox.Message{Name: "Emitted", Topic: "test.events", Key: key, Payload: []byte(p)})
			return ledger.Result{Response: []byte(id)}, err
		})
		if err != nil {
			t.Fatal(err)
		}
		ids[p] = string(out.Result.Response)
	}
	return ids
}

// payloadsOf returns the stored payloads of key, in the broker's order.
func payloadsOf(stored []outboxtest.Stored, key string) []string {
	var out []string
	for _, s := range stored {
		if s.Key == key {
			out = append(out, s.Payload)
		}
	}
	return out
}

// TestDeadMessage, on every database: a message the publisher refuses as
// undeliverable (after two transient failures) is set aside with its
// reason and attempts, logged and counted; the later messages of its key
// wait behind it while every other key's messages go out, once each and
// in order; Drain ends with a DeadError. Retried once the publisher
// accepts it, it goes out first and its key follows in order. A second
// dead message, discarded, lets its key's later messages through.
func TestDeadMessage(t *testing.T) {
	testdb.ForEachParallel(t, 4, func(t *testing.T, te *testdb.Env) {
		e := newEnv(t, te)
		ctx := context.Background()
		var payloads []string
		for i := range 5 {
			if i == 1 {
				payloads = append(payloads, "poisonbad:"+strconv.Itoa(i))
			} else {
				payloads = append(payloads, "bad:"+strconv.Itoa(i))
			}
			for k := range 4 {
				payloads = append(payloads, "k"+strconv.Itoa(k)+":"+strconv.Itoa(i))
			}
		}
		ids := e.enqueueAll(t, "dead-", payloads)

		b := &refusing{poisoned: true, transient: 2}
		m, logs := otelread.NewMetrics(), otelread.NewLogs()
		r, err := outbox.NewRelay(e.DB, e.ob, b, outbox.WithBatchSize(7), outbox.WithBackoff(time.Millisecond, 5*time.Millisecond),
			outbox.WithLogger(logs.Logger), outbox.WithMeterProvider(m.Provider))
		if err != nil {
			t.Fatal(err)
		}
		dctx, cancel := context.WithTimeout(ctx, time.Minute)
		defer cancel()
		err = r.Drain(dctx)
		var de *outbox.DeadError
		if !errors.Is(err, outbox.ErrDead) || !errors.As(err, &de) || de.Dead != 1 || de.Waiting != 3 {
			t.Fatalf("Drain: %v (%+v), want 1 dead and 3 waiting", err, de)
		}
		stored, _ := b.Stored()
		for k := range 4 {
			key := "k" + strconv.Itoa(k)
			if got := fmt.Sprint(payloadsOf(stored, key)); got != fmt.Sprintf("[%s:0 %s:1 %s:2 %s:3 %s:4]", key, key, key, key, key) {
				t.Errorf("key %s went out as %s", key, got)
			}
		}
		if got := fmt.Sprint(payloadsOf(stored, "bad")); got != "[bad:0]" {
			t.Errorf("key bad went out as %s, want only the message before the dead one", got)
		}
		if st := r.Stats(); st.Dead != 1 || st.Failures != 2 || st.Published != 21 {
			t.Errorf("stats %+v, want 1 dead, 2 failed batches, 21 published", st)
		}
		dead, err := e.ob.Dead(ctx, e.DB, 10)
		if err != nil || len(dead) != 1 {
			t.Fatalf("Dead: %+v %v", dead, err)
		}
		d := dead[0]
		if d.ID != ids["poisonbad:1"] || d.Key != "bad" || d.Topic != "test.events" || d.Name != "Emitted" || d.PayloadSize != int64(len("poisonbad:1")) ||
			d.Attempts != 3 || !strings.Contains(d.Reason, errRefused.Error()) || d.Waiting != 3 || d.DeadAt.Before(d.EnqueuedAt) {
			t.Errorf("dead message %+v", d)
		}
		points, err := m.Collect(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if n := otelread.Sum(points, "opledger.outbox.dead"); n != 1 {
			t.Errorf("opledger.outbox.dead = %v, want 1", n)
		}
		if n := otelread.Sum(points, "opledger.outbox.failed_batches"); n != 2 {
			t.Errorf("opledger.outbox.failed_batches = %v, want 2", n)
		}
		if n := otelread.Sum(points, "opledger.outbox.published"); n != 21 {
			t.Errorf("opledger.outbox.published = %v, want 21", n)
		}
		if n := logs.Count(map[string]string{"msg": "outbox relay: message set aside as undeliverable", "level": "ERROR", "id": d.ID, "attempts": "3"}); n != 1 {
			t.Errorf("%d events for the dead message:\n%s", n, logs.Text())
		}
		if n := logs.Count(map[string]string{"msg": "outbox relay: batch failed", "level": "WARN"}); n != 2 {
			t.Errorf("Drain logged %d failed batches, want 2:\n%s", n, logs.Text())
		}
		if strings.Contains(logs.Text(), "poisonbad:1") {
			t.Errorf("a payload was logged:\n%s", logs.Text())
		}

		// Retried once the broker takes it: it goes out first, its key in order.
		b.heal()
		got, err := e.ob.RetryDead(ctx, e.DB, d.ID)
		if err != nil || got.ID != d.ID || got.Seq != d.Seq {
			t.Fatalf("RetryDead: %+v %v", got, err)
		}
		if _, err := e.ob.RetryDead(ctx, e.DB, d.ID); !errors.Is(err, outbox.ErrNotDead) {
			t.Errorf("retried twice: %v, want ErrNotDead", err)
		}
		if err := r.Drain(dctx); err != nil {
			t.Fatalf("Drain after the retry: %v", err)
		}
		stored, _ = b.Stored()
		if got := fmt.Sprint(payloadsOf(stored, "bad")); got != "[bad:0 poisonbad:1 bad:2 bad:3 bad:4]" {
			t.Errorf("after the retry key bad went out as %s", got)
		}
		if len(stored) != len(payloads) {
			t.Errorf("%d messages stored, want %d", len(stored), len(payloads))
		}
		if n := e.outboxRows(t); n != 0 {
			t.Errorf("%d messages left", n)
		}

		// A dead message discarded: its key's later messages follow.
		b.mu.Lock()
		b.poisoned = true
		b.mu.Unlock()
		ids = e.enqueueAll(t, "discard-", []string{"poisonlost:0", "lost:1", "lost:2"})
		if err := r.Drain(dctx); !errors.Is(err, outbox.ErrDead) {
			t.Fatalf("Drain with a second poison message: %v", err)
		}
		got, err = e.ob.DiscardDead(ctx, e.DB, ids["poisonlost:0"])
		if err != nil || got.Key != "lost" || got.Waiting != 2 {
			t.Fatalf("DiscardDead: %+v %v", got, err)
		}
		if err := r.Drain(dctx); err != nil {
			t.Fatalf("Drain after the discard: %v", err)
		}
		stored, _ = b.Stored()
		if got := fmt.Sprint(payloadsOf(stored, "lost")); got != "[lost:1 lost:2]" {
			t.Errorf("after the discard key lost went out as %s", got)
		}
		for _, bad := range []string{ids["poisonlost:0"], ids["lost:1"]} {
			if _, err := e.ob.DiscardDead(ctx, e.DB, bad); !errors.Is(err, outbox.ErrNotDead) {
				t.Errorf("discard of %s, not dead: %v, want ErrNotDead", bad, err)
			}
		}
		for _, bad := range []string{"", "xyz", strings.Repeat("0", 63)} {
			if _, err := e.ob.RetryDead(ctx, e.DB, bad); !errors.Is(err, outbox.ErrInvalid) {
				t.Errorf("retry of id %q: %v, want ErrInvalid", bad, err)
			}
		}
		if _, err := e.ob.Dead(ctx, e.DB, 0); !errors.Is(err, outbox.ErrInvalid) {
			t.Errorf("Dead with limit 0: %v", err)
		}
		if dead, err := e.ob.Dead(ctx, e.DB, 10); err != nil || len(dead) != 0 {
			t.Errorf("dead messages left: %+v %v", dead, err)
		}
	})
}

// TestDeadKeyDoesNotStarve, on every database: with far more messages
// waiting behind a dead one than a batch holds, every batch still
// publishes other keys' messages (the batch skips the dead key's).
func TestDeadKeyDoesNotStarve(t *testing.T) {
	testdb.ForEachParallel(t, 4, func(t *testing.T, te *testdb.Env) {
		e := newEnv(t, te)
		payloads := []string{"poisonx:0"}
		for i := 1; i <= 30; i++ {
			payloads = append(payloads, "x:"+strconv.Itoa(i))
		}
		payloads = append(payloads, "y:0", "y:1")
		e.enqueueAll(t, "starve-", payloads)
		b := &refusing{poisoned: true}
		r, err := outbox.NewRelay(e.DB, e.ob, b, outbox.WithBatchSize(5))
		if err != nil {
			t.Fatal(err)
		}
		ctx := context.Background()
		if n, err := r.RunOnce(ctx); err != nil || n != 0 || r.Stats().Dead != 1 {
			t.Fatalf("first batch: %d published, %v, %+v; want the poison message set aside", n, err, r.Stats())
		}
		if n, err := r.RunOnce(ctx); err != nil || n != 2 {
			t.Fatalf("second batch: %d published, %v; want y's two", n, err)
		}
		stored, _ := b.Stored()
		if got := fmt.Sprint(payloadsOf(stored, "y")); got != "[y:0 y:1]" || len(stored) != 2 {
			t.Fatalf("stored %v", stored)
		}
		if n, err := r.RunOnce(ctx); err != nil || n != 0 || r.Stats().Batches != 3 {
			t.Fatalf("third batch: %d published, %v", n, err)
		}
	})
}

// checker refuses topics with a space.
type checker struct{}

func (checker) CheckMessage(m outbox.Message) error {
	if strings.Contains(m.Topic, " ") {
		return errors.New("no spaces in topics here")
	}
	return nil
}

// TestEnqueueChecksPublisherLimits: with WithPublisherLimits, a message
// the checker refuses is an UndeliverableError (ErrUndeliverable and
// ErrInvalid) and nothing is written; others are enqueued.
func TestEnqueueChecksPublisherLimits(t *testing.T) {
	testdb.ForEachParallel(t, 2, func(t *testing.T, te *testdb.Env) {
		e := newEnv(t, te)
		ob, err := outbox.New(te.Dialect, outbox.WithTable(outbox.TableFor(te.Table)), outbox.WithPublisherLimits(checker{}))
		if err != nil {
			t.Fatal(err)
		}
		_, err = e.runner.Run(context.Background(), claim(t, "limits-1"), func(ctx context.Context, tx *sql.Tx) (ledger.Result, error) {
			_, err := ob.Enqueue(ctx, tx, outbox.Message{Name: "Bad", Topic: "a b", Payload: []byte("x")})
			var ue *outbox.UndeliverableError
			if !errors.Is(err, outbox.ErrUndeliverable) || !errors.Is(err, outbox.ErrInvalid) || !errors.As(err, &ue) || ue.Name != "Bad" ||
				!strings.Contains(err.Error(), "no spaces") {
				return ledger.Result{}, fmt.Errorf("refused message: %v", err)
			}
			_, err = ob.Enqueue(ctx, tx, outbox.Message{Name: "Good", Topic: "a.b", Payload: []byte("x")})
			return ledger.Result{}, err
		})
		if err != nil {
			t.Fatal(err)
		}
		if n := e.Count(t, "SELECT COUNT(*) FROM "+te.Dialect.QuoteIdent(ob.Table())+" WHERE name = "+te.Ph(1), "Bad"); n != 0 {
			t.Fatalf("%d refused messages written", n)
		}
		if n := e.outboxRows(t); n != 1 {
			t.Fatalf("%d messages, want 1", n)
		}
	})
	if _, err := outbox.New(testdb.Targets()[0].Dialect, outbox.WithPublisherLimits(nil)); !errors.Is(err, outbox.ErrInvalid) {
		t.Errorf("nil checker: %v", err)
	}
}

// TestDrainReportsFailedBatches: Drain logs each failed batch, as Run
// does, and ends once the publisher takes the messages.
func TestDrainReportsFailedBatches(t *testing.T) {
	testdb.ForEachParallel(t, 2, func(t *testing.T, te *testdb.Env) {
		e := newEnv(t, te)
		e.enqueueAll(t, "drainlog-", []string{"poisona:0", "a:1"})
		b := &refusing{poisoned: true, transient: 3}
		logs := otelread.NewLogs()
		r, err := outbox.NewRelay(e.DB, e.ob, b, outbox.WithBackoff(time.Millisecond, 2*time.Millisecond), outbox.WithLogger(logs.Logger))
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if err := r.Drain(ctx); !errors.Is(err, outbox.ErrDead) {
			t.Fatalf("Drain: %v", err)
		}
		if n := logs.Count(map[string]string{"msg": "outbox relay: batch failed", "failures_in_a_row": "3"}); n != 1 {
			t.Fatalf("Drain's failed batches not logged as Run's are:\n%s", logs.Text())
		}
	})
}
