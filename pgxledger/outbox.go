package pgxledger

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/opledger/opledger/internal/outboxkit"
	"github.com/opledger/opledger/internal/pgxkit"
	"github.com/opledger/opledger/outbox"
)

// Enqueue writes msg into o's outbox table in tx, the pgx transaction
// that holds the operation's ledger claim (inside a Runner's work: the tx
// it is given, or TxFromContext), with the checks, the message id and the
// errors of outbox.Outbox's Enqueue: the id is derived from the operation
// ctx carries and msg.Name, and the message commits or rolls back with
// tx. o must be the outbox of the PostgreSQL dialect (outbox.New with
// postgres.New()). The relay publishes it through database/sql: run it on
// stdlib.OpenDBFromPool of the same pool.
func Enqueue(ctx context.Context, o *outbox.Outbox, tx pgx.Tx, msg outbox.Message) (string, error) {
	if tx == nil {
		return "", fmt.Errorf("%w: nil transaction", outbox.ErrInvalid)
	}
	return outboxkit.Enqueue(ctx, o, msg, func(ctx context.Context, query string, args ...any) (int64, error) {
		return pgxkit.Driver{}.Exec(ctx, tx, query, args...)
	})
}
