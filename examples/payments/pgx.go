package payments

import (
	"context"
	"errors"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/opledger/opledger/dialects"
	"github.com/opledger/opledger/dialects/postgres"
	"github.com/opledger/opledger/examples/payments/paymentspb"
	"github.com/opledger/opledger/keyed"
	"github.com/opledger/opledger/ledger"
	"github.com/opledger/opledger/outbox"
	"github.com/opledger/opledger/pgxledger"
)

// writePgx is Transfer on pgx: the transfer's row, and its event with
// WithEvents, written through tx, the pgx.Tx that holds the ledger claim
// (pgxledger.TxFromContext), so that they commit with it, pipelined with
// the completion and COMMIT.
func (s *Service) writePgx(ctx context.Context, tx pgx.Tx, id int64, req *paymentspb.TransferRequest, ev *outbox.Message) error {
	if _, err := tx.Exec(ctx, s.insert, id, req.GetFromAccount(), req.GetToAccount(), req.GetAmountCents(), req.GetReference()); err != nil {
		return err
	}
	if ev != nil {
		if _, err := pgxledger.Enqueue(ctx, s.events, tx, *ev); err != nil {
			return err
		}
	}
	return nil
}

// PgxTransactions returns the keyed.Transactions that serve Transfer in
// pipelined pgx transactions on pool (pgxledger.Transactions), with a
// pgxledger.Store on ledgerTable (ledger.DefaultTable when empty): give
// it to grpcint.NewServerFor or httpint.NewFor, and the Service's
// Transfer writes through the pgx.Tx it finds in its context. Build that
// Service with NewService on stdlib.OpenDBFromPool(pool) and
// postgres.New().
func PgxTransactions(pool *pgxpool.Pool, ledgerTable string) (keyed.Transactions, error) {
	if pool == nil {
		return nil, errors.New("payments: nil pgx pool")
	}
	s, err := pgxStore(ledgerTable, nil)
	if err != nil {
		return nil, err
	}
	return pgxledger.Transactions(pool, s), nil
}

// pgxStore is the pgxledger.Store on ledgerTable with opts.
func pgxStore(ledgerTable string, opts []ledger.Option) (*pgxledger.Store, error) {
	if ledgerTable != "" {
		opts = append([]ledger.Option{ledger.WithTable(ledgerTable)}, opts...)
	}
	return pgxledger.New(opts...)
}

// isPostgres reports whether d is the PostgreSQL dialect (what the pgx
// path needs).
func isPostgres(d dialects.Dialect) bool {
	_, ok := d.(postgres.Dialect)
	return ok
}
