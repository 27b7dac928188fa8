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

	"github.com/opledger/opledger/dialects"
	"github.com/opledger/opledger/internal/dialectkit"
	"github.com/opledger/opledger/internal/outboxkit"
	"github.com/opledger/opledger/internal/testkit/outboxtest"
	"github.com/opledger/opledger/internal/testkit/testdb"
	"github.com/opledger/opledger/ledger"
	"github.com/opledger/opledger/outbox"
	"github.com/opledger/opledger/txmiddleware"
)

type env struct {
	*testdb.Env
	store  *ledger.Store
	ob     *outbox.Outbox
	runner *txmiddleware.Runner
}

func newEnv(t *testing.T, te *testdb.Env) *env { return newEnvB(t, te) }

func newEnvB(t testing.TB, te *testdb.Env) *env {
	t.Helper()
	store, err := ledger.New(te.Dialect, ledger.WithTable(te.Table))
	if err != nil {
		t.Fatal(err)
	}
	ob, err := outbox.New(te.Dialect, outbox.WithTable(outbox.TableFor(te.Table)))
	if err != nil {
		t.Fatal(err)
	}
	r, err := txmiddleware.New(te.DB, store, txmiddleware.WithTxBackoff(time.Millisecond, 50*time.Millisecond), txmiddleware.WithMaxTxAttempts(50))
	if err != nil {
		t.Fatal(err)
	}
	return &env{Env: te, store: store, ob: ob, runner: r}
}

func (e *env) outboxRows(t testing.TB) int {
	t.Helper()
	return e.Count(t, "SELECT COUNT(*) FROM "+e.Dialect.QuoteIdent(e.ob.Table()))
}

func claim(t testing.TB, key string) ledger.ClaimRequest {
	t.Helper()
	id, err := ledger.NewIdentity("tester", "/test.v1.Events/Emit", key)
	if err != nil {
		t.Fatal(err)
	}
	return ledger.ClaimRequest{Identity: id, Fingerprint: ledger.FingerprintOf([]byte(key))}
}

func msg(key string) outbox.Message {
	return outbox.Message{Name: "Emitted", Topic: "test.events", Key: key, Payload: []byte("payload of " + key)}
}

// TestEnqueue: a message commits with its operation, rolls back with it,
// is not written again by a replay, and gets the id derived from the
// operation and its name; a second message of one name is ErrDuplicate and
// leaves the transaction usable.
func TestEnqueue(t *testing.T) {
	testdb.ForEachParallel(t, 2, func(t *testing.T, te *testdb.Env) {
		e := newEnv(t, te)
		ctx := context.Background()
		rq := claim(t, "enqueue-1")
		work := func(ctx context.Context, tx *sql.Tx) (ledger.Result, error) {
			id, err := e.ob.Enqueue(ctx, tx, msg("k1"))
			if err != nil {
				return ledger.Result{}, err
			}
			if _, err := e.ob.Enqueue(ctx, tx, msg("k1")); !errors.Is(err, outbox.ErrDuplicate) {
				return ledger.Result{}, fmt.Errorf("second message of one name: %v, want ErrDuplicate", err)
			}
			second := msg("k1")
			second.Name = "Audited"
			if _, err := e.ob.Enqueue(ctx, tx, second); err != nil {
				return ledger.Result{}, fmt.Errorf("after a duplicate the transaction must be usable: %w", err)
			}
			return ledger.Result{Response: []byte(id)}, nil
		}
		out, err := e.runner.Run(ctx, rq, work)
		if err != nil || !out.Executed {
			t.Fatalf("run: %+v %v", out, err)
		}
		want, err := outbox.MessageID(rq.Identity, "Emitted")
		if err != nil || string(out.Result.Response) != want {
			t.Fatalf("message id %q, want %q (%v)", out.Result.Response, want, err)
		}
		if n := e.outboxRows(t); n != 2 {
			t.Fatalf("%d messages, want 2", n)
		}
		// A replay runs no handler and enqueues nothing.
		if out, err := e.runner.Run(ctx, rq, work); err != nil || !out.Replayed {
			t.Fatalf("replay: %+v %v", out, err)
		}
		if n := e.outboxRows(t); n != 2 {
			t.Fatalf("%d messages after the replay, want 2", n)
		}
		// A rolled-back operation leaves no message.
		boom := errors.New("boom")
		_, err = e.runner.Run(ctx, claim(t, "enqueue-2"), func(ctx context.Context, tx *sql.Tx) (ledger.Result, error) {
			if _, err := e.ob.Enqueue(ctx, tx, msg("k2")); err != nil {
				return ledger.Result{}, err
			}
			return ledger.Result{}, boom
		})
		if !errors.Is(err, boom) {
			t.Fatalf("got %v", err)
		}
		if n := e.outboxRows(t); n != 2 {
			t.Fatalf("%d messages after a rollback, want 2", n)
		}
		// Outside a keyed call, and with bad messages, nothing is written.
		tx, err := e.DB.BeginTx(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		defer tx.Rollback()
		if _, err := e.ob.Enqueue(ctx, tx, msg("k3")); !errors.Is(err, ledger.ErrNoOperation) {
			t.Fatalf("outside an operation: %v", err)
		}
		opCtx := ledger.ContextWithOperation(ctx, claim(t, "enqueue-3").Identity)
		for _, bad := range []outbox.Message{
			{Topic: "t"}, {Name: "n"}, {Name: "n", Topic: "t\n"}, {Name: "n", Topic: "t", Key: "\xff"},
			{Name: "n", Topic: "t", Payload: make([]byte, outboxkit.MaxPayloadSize+1)},
		} {
			if _, err := e.ob.Enqueue(opCtx, tx, bad); !errors.Is(err, outbox.ErrInvalid) {
				t.Errorf("%+.40v: %v, want ErrInvalid", bad, err)
			}
		}
		if _, err := e.ob.Enqueue(opCtx, nil, msg("k3")); !errors.Is(err, outbox.ErrInvalid) {
			t.Errorf("nil tx: %v", err)
		}
	})
}

func TestNewErrors(t *testing.T) {
	if _, err := outbox.New(nil); !isConfigErr(err) {
		t.Errorf("nil dialect: %v", err)
	}
	if _, err := outbox.New(noOutbox{}); !isConfigErr(err) || !strings.Contains(err.Error(), "has no outbox") {
		t.Errorf("dialect without an outbox: %v", err)
	}
	d := testdb.Targets()[0].Dialect
	if _, err := outbox.New(d, outbox.WithTable("bad name")); !isConfigErr(err) {
		t.Errorf("bad table: %v", err)
	}
	if _, err := outbox.New(d, outbox.WithTable("a"), outbox.WithTable("b")); !isConfigErr(err) {
		t.Errorf("table twice: %v", err)
	}
	ob, err := outbox.New(d)
	if err != nil || ob.Table() != "opledger_operations_outbox" {
		t.Fatalf("default table: %v %v", ob, err)
	}
	for _, opt := range []outbox.RelayOption{outbox.WithBatchSize(0), outbox.WithBatchSize(outboxkit.MaxBatchSize + 1),
		outbox.WithPollInterval(0), outbox.WithBackoff(0, time.Second), outbox.WithBackoff(time.Second, time.Millisecond), outbox.WithPublishTimeout(0)} {
		if _, err := outbox.NewRelay(&sql.DB{}, ob, &outboxtest.Broker{}, opt); !isConfigErr(err) {
			t.Errorf("bad relay option: %v", err)
		}
	}
	if _, err := outbox.NewRelay(nil, ob, &outboxtest.Broker{}); !isConfigErr(err) {
		t.Errorf("nil db: %v", err)
	}
}

type noOutbox struct{ dialects.Dialect }

func (noOutbox) Name() string { return "none" }

// TestHerdOneMessagePerKey: 32 concurrent calls per key, each handler
// enqueueing a message: one message per key in the table.
func TestHerdOneMessagePerKey(t *testing.T) {
	const callers, keys = 32, 8
	testdb.ForEachParallel(t, callers, func(t *testing.T, te *testdb.Env) {
		e := newEnv(t, te)
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		var wg sync.WaitGroup
		errs := make(chan error, callers*keys)
		for k := range keys {
			key := "herd-" + strconv.Itoa(k)
			start := make(chan struct{})
			for w := range callers {
				wg.Add(1)
				go func() {
					defer wg.Done()
					<-start
					_, err := e.runner.Run(ctx, claim(t, key), func(ctx context.Context, tx *sql.Tx) (ledger.Result, error) {
						if err := e.WriteBiz(ctx, tx, key, w); err != nil {
							return ledger.Result{}, err
						}
						id, err := e.ob.Enqueue(ctx, tx, msg(key))
						return ledger.Result{Response: []byte(id)}, err
					})
					if err != nil && !errors.Is(err, ledger.ErrInProgress) {
						errs <- err
					}
				}()
			}
			close(start)
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Fatal(err)
		}
		for k := range keys {
			key := "herd-" + strconv.Itoa(k)
			if n := e.BizRows(t, key); n != 1 {
				t.Errorf("%s: %d business rows", key, n)
			}
			if n := e.Count(t, "SELECT COUNT(*) FROM "+e.Dialect.QuoteIdent(e.ob.Table())+" WHERE partition_key = "+e.Ph(1), key); n != 1 {
				t.Errorf("%s: %d messages, want 1", key, n)
			}
		}
	})
}

// TestRelay: producers on 8 keys (every fifth operation rolled back),
// relays killed mid-batch and restarted (three at once where the dialect
// locks rows, one on SQLite), a broker that fails some publishes and loses
// some acknowledgements: every committed message stored exactly once,
// none of a rolled-back operation, each key in order, the outbox empty.
func TestRelay(t *testing.T) {
	testdb.ForEachParallel(t, 12, func(t *testing.T, te *testdb.Env) {
		relays := 3
		if dialectkit.TraitsOf(te.Dialect).SerialWriters {
			relays = 1
		}
		b := &outboxtest.Broker{FailRate: 0.02, LoseAckRate: 0.02}
		want := outboxtest.Run(t, te, outboxtest.Config{Keys: 8, OpsPerKey: 40, RollbackEvery: 5, Relays: relays, KillAfter: 37, Publisher: b})
		stored, dups := b.Stored()
		outboxtest.Check(t, want, stored)
		if len(want.Committed) != 8*32 || len(want.RolledBack) != 8*8 {
			t.Fatalf("%d committed, %d rolled back", len(want.Committed), len(want.RolledBack))
		}
		if want.Relays <= relays {
			t.Errorf("no relay was killed (%d relays in all)", want.Relays)
		}
		t.Logf("%d messages, %d repeats dropped by the broker, %d relays in all", len(stored), dups, want.Relays)
	})
}

// TestRelayHoldsKeyOrder: while another relay holds a key's first
// message, a relay publishes the other keys and none of that key's; once
// it is released, the key's messages go out in order.
func TestRelayHoldsKeyOrder(t *testing.T) {
	testdb.ForEachParallel(t, 4, func(t *testing.T, te *testdb.Env) {
		testdb.SkipOnTiDB(t, te.Dialect, "TiDB ignores SKIP LOCKED, so the TiDB variant's batch waits for another relay's instead of passing its rows (dialects/mysql TestOutboxBatchSkipsOrWaits)")
		e := newEnv(t, te)
		ctx := context.Background()
		for i, key := range []string{"a", "b", "a", "c", "a"} {
			if _, err := e.runner.Run(ctx, claim(t, "hold-"+strconv.Itoa(i)), func(ctx context.Context, tx *sql.Tx) (ledger.Result, error) {
				m := msg(key)
				m.Payload = []byte(key + ":" + strconv.Itoa(i))
				_, err := e.ob.Enqueue(ctx, tx, m)
				return ledger.Result{}, err
			}); err != nil {
				t.Fatal(err)
			}
		}
		// Another relay holds the first message (key a): lock it as its
		// batch would.
		q := te.Dialect.(dialectkit.Outboxer).OutboxQueries(e.ob.Table())
		other, err := e.DB.BeginTx(ctx, &sql.TxOptions{Isolation: sql.LevelReadCommitted})
		if err != nil {
			t.Fatal(err)
		}
		defer other.Rollback()
		rs, err := other.QueryContext(ctx, q.Batch, 1)
		if err != nil {
			t.Fatal(err)
		}
		for rs.Next() {
		}
		rs.Close()

		b := &outboxtest.Broker{}
		r, err := outbox.NewRelay(e.DB, e.ob, b)
		if err != nil {
			t.Fatal(err)
		}
		n, err := r.RunOnce(ctx)
		if err != nil || n != 2 || r.Stats().Held != 2 {
			t.Fatalf("with key a held: published %d (%v), held %d; want b and c published, a's two others held", n, err, r.Stats().Held)
		}
		stored, _ := b.Stored()
		for _, s := range stored {
			if s.Key == "a" {
				t.Fatalf("a message of the held key went out: %+v", s)
			}
		}
		if err := other.Rollback(); err != nil {
			t.Fatal(err)
		}
		if n, err := r.RunOnce(ctx); err != nil || n != 3 {
			t.Fatalf("after the release: published %d (%v), want 3", n, err)
		}
		stored, _ = b.Stored()
		var order []string
		for _, s := range stored {
			if s.Key == "a" {
				order = append(order, s.Payload)
			}
		}
		if fmt.Sprint(order) != "[a:0 a:2 a:4]" {
			t.Fatalf("key a went out as %v", order)
		}
		if e.outboxRows(t) != 0 {
			t.Fatal("outbox not empty")
		}
	}, "postgres", "mysql")
}

// isConfigErr reports whether err is a configuration error: it matches
// ErrInvalidConfig and, for callers of the old name, ErrInvalid.
func isConfigErr(err error) bool {
	return errors.Is(err, outbox.ErrInvalidConfig) && errors.Is(err, outbox.ErrInvalid)
}
