package outbox_test

import (
	"context"
	"testing"
	"time"

	"github.com/opledger/opledger/internal/pgdialect"
	"github.com/opledger/opledger/internal/testkit/poolertest"
	"github.com/opledger/opledger/internal/testkit/testdb"
	"github.com/opledger/opledger/ledger"
	"github.com/opledger/opledger/outbox"
)

// TestPgBouncerEnqueue: Outbox.Enqueue called in the caller's own
// *sql.Tx, outside any runner, over database/sql with pgx's driver in its
// default exec mode behind PgBouncer in transaction mode, meets the
// pooler's error (poolertest: the insert it prepared is gone from the
// server connection the next time). The error matches
// postgres.ErrStatementPooling and names default_query_exec_mode, as
// docs/poolers.md promises for every statement the kit sends.
func TestPgBouncerEnqueue(t *testing.T) {
	t.Parallel()
	p := poolertest.New(t)
	d := pgdialect.New()
	ob, err := outbox.New(d, outbox.WithTable(outbox.TableFor(p.Table)))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	db := testdb.OpenDSN(t, "pgx", p.PgBouncer.DSN(), 1) // pgx's defaults
	enqueue := func(key string) error {
		opCtx := ledger.ContextWithOperation(ctx, testdb.ID(t, "svc-a", "/pay.v1.Payments/Create", key))
		tx, err := db.BeginTx(ctx, nil)
		if err != nil {
			return err
		}
		defer tx.Rollback()
		if _, err := ob.Enqueue(opCtx, tx, outbox.Message{Name: "Created", Topic: "payments.created", Key: key}); err != nil {
			return err
		}
		return tx.Commit()
	}
	p.Reset(t)
	if err := enqueue("enqueue-1"); err != nil {
		t.Fatalf("warm-up: %v", err)
	}
	p.Forget(t, d.OutboxQueries(outbox.TableFor(p.Table)).Insert)
	poolertest.Want(t, enqueue("enqueue-2"), "26000")
}
