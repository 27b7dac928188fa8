package pgxledger_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/opledger/opledger/dialects/postgres"
	"github.com/opledger/opledger/internal/testkit/testdb"
	"github.com/opledger/opledger/ledger"
	"github.com/opledger/opledger/outbox"
	"github.com/opledger/opledger/pgxledger"
)

// TestEnqueue: a message enqueued in a Runner's work commits with it,
// once per operation (a replay enqueues nothing, a second message of the
// same name is ErrDuplicate), and only inside a keyed call; with the
// outbox of the migrations' table beside the ledger's.
func TestEnqueue(t *testing.T) {
	testdb.Parallel(t, "postgres", 2)
	e := newEnv(t, 2)
	ctx := context.Background()
	ob, err := outbox.New(postgres.New(), outbox.WithTable(outbox.TableFor(e.table)))
	if err != nil {
		t.Fatal(err)
	}
	rows := func() int { return e.count(t, "SELECT COUNT(*) FROM "+pgxQuote(outbox.TableFor(e.table))) }
	for _, order := range orders {
		r := e.runner(t, order.opts...)
		key := "enqueue-" + order.name
		var ids atomic.Value
		work := func(ctx context.Context, tx pgx.Tx) (ledger.Result, error) {
			id, err := pgxledger.Enqueue(ctx, ob, tx, outbox.Message{Name: "Created", Topic: "payments.created", Key: key, Payload: []byte("p")})
			if err != nil {
				return ledger.Result{}, err
			}
			ids.Store(id)
			if _, err := pgxledger.Enqueue(ctx, ob, tx, outbox.Message{Name: "Created", Topic: "payments.created", Key: key}); !errors.Is(err, outbox.ErrDuplicate) {
				return ledger.Result{}, errors.New("a second message of the same name was not ErrDuplicate")
			}
			return result(key), nil
		}
		before := rows()
		if out, err := r.Run(ctx, req(t, key), work); err != nil || !out.Executed {
			t.Fatalf("%s: %+v %v", order.name, out, err)
		}
		want, _ := outbox.MessageID(req(t, key).Identity, "Created")
		if got := ids.Load(); got != want || rows() != before+1 {
			t.Fatalf("%s: id %v (want %s), %d messages (want %d)", order.name, got, want, rows(), before+1)
		}
		if order.opts != nil {
			// At commit a retry runs the work again, whose Enqueue meets the
			// committed message (ErrDuplicate) before the record could find
			// the replay: as on database/sql.
			continue
		}
		if out, err := r.Run(ctx, req(t, key), work); err != nil || !out.Replayed || rows() != before+1 {
			t.Fatalf("%s replay: %+v %v, %d messages", order.name, out, err, rows())
		}
	}
	tx, err := e.pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx)
	if _, err := pgxledger.Enqueue(ctx, ob, tx, outbox.Message{Name: "X", Topic: "t"}); !errors.Is(err, ledger.ErrNoOperation) {
		t.Fatalf("outside a keyed call: %v, want ErrNoOperation", err)
	}
	if _, err := pgxledger.Enqueue(ctx, ob, nil, outbox.Message{Name: "X", Topic: "t"}); !errors.Is(err, outbox.ErrInvalid) {
		t.Fatalf("nil transaction: %v, want ErrInvalid", err)
	}
}
