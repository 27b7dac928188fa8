package payments

import (
	"context"
	"errors"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"google.golang.org/protobuf/proto"

	"github.com/opledger/opledger/dialects"
	"github.com/opledger/opledger/dialects/postgres"
	"github.com/opledger/opledger/examples/payments/paymentspb"
	"github.com/opledger/opledger/keyed"
	"github.com/opledger/opledger/ledger"
	"github.com/opledger/opledger/outbox"
	"github.com/opledger/opledger/pgxledger"
)

// transferPgx is Transfer on pgx: the transfer's row, and with
// WithEvents its TransferCompleted event, written through tx, the pgx.Tx
// that holds the ledger claim (pgxledger.TxFromContext), so that they
// commit with it (pipelined with the completion and COMMIT).
func (s *Service) transferPgx(ctx context.Context, tx pgx.Tx, req *paymentspb.TransferRequest, checkID int64) (*paymentspb.TransferReply, error) {
	r := &paymentspb.TransferReply{TransferId: newTransferID(), FromAccount: req.GetFromAccount(), ToAccount: req.GetToAccount(),
		AmountCents: req.GetAmountCents(), Reference: req.GetReference()}
	if _, err := tx.Exec(ctx, s.insert, r.TransferId, r.FromAccount, r.ToAccount, r.AmountCents, r.Reference); err != nil {
		return nil, err
	}
	if s.events != nil {
		ev, err := proto.Marshal(&paymentspb.TransferCompleted{TransferId: r.TransferId, FromAccount: r.FromAccount,
			ToAccount: r.ToAccount, AmountCents: r.AmountCents, Reference: r.Reference, FraudCheckId: checkID})
		if err != nil {
			return nil, err
		}
		msg := outbox.Message{Name: "TransferCompleted", Topic: TransferCompletedTopic, Key: r.FromAccount, Payload: ev}
		if _, err := pgxledger.Enqueue(ctx, s.events, tx, msg); err != nil {
			return nil, err
		}
	}
	return r, nil
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
// path needs). Dialects are comparable values.
func isPostgres(d dialects.Dialect) bool {
	return d == postgres.New()
}
