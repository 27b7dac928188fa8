// Package outboxtest is the traffic of the outbox's tests: producers that
// enqueue through the ledger (some of their operations rolled back),
// relays that are killed mid-batch and restarted, and the checks of what
// reached the broker. It is shared by the outbox's own tests (an
// in-memory broker) and the NATS publisher's (a real JetStream).
package outboxtest

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/opledger/opledger/internal/testkit/testdb"
	"github.com/opledger/opledger/ledger"
	"github.com/opledger/opledger/outbox"
	"github.com/opledger/opledger/txmiddleware"
)

// Topic is the topic of every test message.
const Topic = "opledger.test.events"

// Config is one run of the traffic.
type Config struct {
	// Keys is how many partition keys produce at once, each sequentially.
	Keys int
	// OpsPerKey is how many operations each key runs.
	OpsPerKey int
	// RollbackEvery makes every n-th operation of a key fail after its
	// Enqueue, so that its transaction rolls back (0: none).
	RollbackEvery int
	// Relays is how many relays run at once.
	Relays int
	// KillAfter kills a relay (cancels it mid-batch, after the broker
	// accepted a message and before the batch deleted it) once every so
	// many publishes through it, and starts a new one (0: never).
	KillAfter int
	// Publisher is where the relays publish.
	Publisher outbox.Publisher
	// RelayOptions are added to the relays' options.
	RelayOptions []outbox.RelayOption
	// During, when not nil, runs once while the producers run (a broker
	// restart, for example).
	During func(ctx context.Context)
	// Timeout bounds the whole run (default 2 minutes).
	Timeout time.Duration
	// Leave is how many messages the relays leave in the outbox, Dead of
	// them dead (set aside as undeliverable) and the others waiting
	// behind them: Run returns once exactly these are left (default
	// none).
	Leave, Dead int
}

// Want is what the producers committed.
type Want struct {
	// Committed maps each committed operation's message id to its
	// payload, "key:n".
	Committed map[string]string
	// RolledBack holds the message ids of operations that rolled back.
	RolledBack map[string]bool
	// Relays is how many relays ran in all, restarts included.
	Relays int
	// Published is what the relays reported publishing.
	Published int64
}

// Run produces, relays until the outbox is empty, and returns what was
// committed. e is the target (a migrated ledger and its outbox).
func Run(t *testing.T, e *testdb.Env, cfg Config) Want {
	t.Helper()
	if cfg.Timeout <= 0 {
		cfg.Timeout = 2 * time.Minute
	}
	ctx, cancel := context.WithTimeout(context.Background(), cfg.Timeout)
	defer cancel()
	store, err := ledger.New(e.Dialect, ledger.WithTable(e.Table))
	if err != nil {
		t.Fatal(err)
	}
	ob, err := outbox.New(e.Dialect, outbox.WithTable(outbox.TableFor(e.Table)))
	if err != nil {
		t.Fatal(err)
	}
	runner, err := txmiddleware.New(e.DB, store, txmiddleware.WithTxBackoff(time.Millisecond, 50*time.Millisecond), txmiddleware.WithMaxTxAttempts(50))
	if err != nil {
		t.Fatal(err)
	}

	var (
		mu   sync.Mutex
		want = Want{Committed: map[string]string{}, RolledBack: map[string]bool{}}
	)
	// Relays: each runs until killed or until the producers are done and
	// the outbox is empty.
	relayCtx, stopRelays := context.WithCancel(ctx)
	defer stopRelays()
	var (
		relays    sync.WaitGroup
		started   atomic.Int64
		published atomic.Int64
	)
	var startRelay func()
	startRelay = func() {
		started.Add(1)
		rctx, kill := context.WithCancel(relayCtx)
		pub := &killing{Publisher: cfg.Publisher, every: cfg.KillAfter, kill: kill}
		opts := append([]outbox.RelayOption{outbox.WithPollInterval(5 * time.Millisecond), outbox.WithBackoff(5*time.Millisecond, 200*time.Millisecond),
			outbox.WithBatchSize(20)}, cfg.RelayOptions...)
		r, err := outbox.NewRelay(e.DB, ob, pub, opts...)
		if err != nil {
			t.Error(err)
			return
		}
		relays.Add(1)
		go func() {
			defer relays.Done()
			_ = r.Run(rctx)
			published.Add(r.Stats().Published)
			kill()
			if relayCtx.Err() == nil {
				startRelay() // killed: a new relay takes its place
			}
		}()
	}
	for range cfg.Relays {
		startRelay()
	}

	var producers sync.WaitGroup
	errs := make(chan error, cfg.Keys)
	for k := range cfg.Keys {
		producers.Add(1)
		go func() {
			defer producers.Done()
			key := "p" + strconv.Itoa(k)
			for i := range cfg.OpsPerKey {
				rollback := cfg.RollbackEvery > 0 && i%cfg.RollbackEvery == cfg.RollbackEvery-1
				id, err := ledger.NewIdentity("outboxtest", "/test.v1.Events/Emit", fmt.Sprintf("%s-%d", key, i))
				if err != nil {
					errs <- err
					return
				}
				payload := key + ":" + strconv.Itoa(i)
				var msgID string
				_, err = runner.Run(ctx, ledger.ClaimRequest{Identity: id, Fingerprint: ledger.FingerprintOf([]byte(payload))},
					func(ctx context.Context, tx *sql.Tx) (ledger.Result, error) {
						if err := e.WriteBiz(ctx, tx, payload, k); err != nil {
							return ledger.Result{}, err
						}
						mid, err := ob.Enqueue(ctx, tx, outbox.Message{Name: "Emitted", Topic: Topic, Key: key, Payload: []byte(payload)})
						if err != nil {
							return ledger.Result{}, err
						}
						msgID = mid
						if rollback {
							return ledger.Result{}, errRollback
						}
						return ledger.Result{Response: []byte(mid)}, nil
					})
				switch {
				case rollback && errors.Is(err, errRollback):
					mu.Lock()
					want.RolledBack[msgID] = true
					mu.Unlock()
				case err != nil:
					errs <- fmt.Errorf("%s: %w", payload, err)
					return
				default:
					mu.Lock()
					want.Committed[msgID] = payload
					mu.Unlock()
				}
			}
		}()
	}
	if cfg.During != nil {
		cfg.During(ctx)
	}
	producers.Wait()
	close(errs)
	for err := range errs {
		t.Fatalf("producer: %v", err)
	}
	// Wait for the relays to empty the outbox (but for what they leave),
	// on the database's own view.
	q := "SELECT COUNT(*), COALESCE(SUM(CASE WHEN dead_at IS NOT NULL THEN 1 ELSE 0 END), 0) FROM " + e.Dialect.QuoteIdent(outbox.TableFor(e.Table))
	for {
		var n, dead int
		if err := e.DB.QueryRowContext(ctx, q).Scan(&n, &dead); err != nil {
			t.Fatalf("count the outbox: %v", err)
		}
		if n == cfg.Leave && dead == cfg.Dead {
			break
		}
		if err := ctx.Err(); err != nil {
			t.Fatalf("%d messages (%d dead) still in the outbox, want %d (%d dead): %v", n, dead, cfg.Leave, cfg.Dead, err)
		}
		time.Sleep(10 * time.Millisecond)
	}
	stopRelays()
	relays.Wait()
	want.Relays = int(started.Load())
	want.Published = published.Load()
	return want
}

var errRollback = errors.New("outboxtest: roll this operation back")

// killing passes publishes on and, every so many, kills its relay right
// after the broker accepted a message: the batch then never deletes it.
type killing struct {
	outbox.Publisher
	every int
	n     atomic.Int64
	kill  context.CancelFunc
}

func (k *killing) Publish(ctx context.Context, e outbox.Envelope) error {
	if err := k.Publisher.Publish(ctx, e); err != nil {
		return err
	}
	if k.every > 0 && k.n.Add(1)%int64(k.every) == 0 {
		k.kill()
		return errors.New("outboxtest: relay killed mid-batch")
	}
	return nil
}

// Stored is one message as the broker stored it, in the broker's order.
type Stored struct {
	ID      string
	Key     string
	Payload string
}

// Check compares what the broker stored, in its order, with what was
// committed: every committed message exactly once (counted by id), none of
// a rolled-back operation, and each key's messages in the order they
// were enqueued.
func Check(t *testing.T, want Want, stored []Stored) {
	t.Helper()
	count := map[string]int{}
	last := map[string]int{}
	for _, s := range stored {
		count[s.ID]++
		if want.RolledBack[s.ID] {
			t.Errorf("message %s of a rolled-back operation was stored", s.ID)
			continue
		}
		p, ok := want.Committed[s.ID]
		if !ok {
			t.Errorf("stored message %s (%q) was never committed", s.ID, s.Payload)
			continue
		}
		if p != s.Payload {
			t.Errorf("message %s: payload %q, want %q", s.ID, s.Payload, p)
		}
		key, n, _ := strings.Cut(s.Payload, ":")
		i, _ := strconv.Atoi(n)
		if prev, seen := last[key]; seen && i <= prev {
			t.Errorf("key %s: message %d stored after message %d", key, i, prev)
		}
		last[key] = i
	}
	for id, p := range want.Committed {
		if c := count[id]; c != 1 {
			t.Errorf("committed message %s (%s) stored %d times, want 1", id, p, c)
		}
	}
}

// Broker is an in-memory deduplicating broker: it stores a message the
// first time its id is published and acknowledges repeats without storing
// them, as JetStream does within its duplicate window. It fails some
// publishes before storing and loses the acknowledgement of others after
// storing, at the given rates.
type Broker struct {
	FailRate, LoseAckRate float64

	mu     sync.Mutex
	seen   map[string]bool
	stored []Stored
	dups   int
}

// Publish stores e unless its id was seen.
func (b *Broker) Publish(ctx context.Context, e outbox.Envelope) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if rand.Float64() < b.FailRate {
		return errors.New("broker: injected failure before storing")
	}
	b.mu.Lock()
	if b.seen == nil {
		b.seen = map[string]bool{}
	}
	if b.seen[e.ID] {
		b.dups++
	} else {
		b.seen[e.ID] = true
		b.stored = append(b.stored, Stored{ID: e.ID, Key: e.Key, Payload: string(e.Payload)})
	}
	b.mu.Unlock()
	if rand.Float64() < b.LoseAckRate {
		return errors.New("broker: injected loss of the acknowledgement")
	}
	return nil
}

// Stored returns the stored messages in order and how many repeats were
// dropped.
func (b *Broker) Stored() ([]Stored, int) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return append([]Stored(nil), b.stored...), b.dups
}
