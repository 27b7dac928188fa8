// Package pgxkit holds what the kit's pgx packages share: the ledger's
// driver of pgx ([Driver]), which package pgxledger's Store and Enqueue
// run on and the kit's pgx tests build their test ledgers with, the
// mapping of database/sql's isolation levels ([IsoLevel]), and package
// pgxledger's claim-at-commit steps ([StoreBegin], [StoreRecordCommit]),
// which the conformance suite's pipelined pgx target runs.
package pgxkit

import (
	"context"
	"database/sql"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/opledger/opledger/dialects/postgres"
	"github.com/opledger/opledger/internal/ledgerkit"
	"github.com/opledger/opledger/ledger"
)

// Driver is the ledger's driver (ledgerkit.Driver) of pgx: the ledger's
// statements run with pgx.Tx's Exec and QueryRow. Exec's errors pass
// through postgres.ExplainPooling, so that whatever writes through it (the
// outbox's Enqueue) reports the errors a transaction pooler gives pgx's
// default exec mode as postgres.ErrStatementPooling, naming the setting
// (docs/poolers.md).
type Driver struct{}

var _ ledgerkit.Driver[pgx.Tx] = Driver{}

// Exec runs query in tx and returns the rows it affected.
func (Driver) Exec(ctx context.Context, tx pgx.Tx, query string, args ...any) (int64, error) {
	tag, err := tx.Exec(ctx, query, args...)
	if err != nil {
		return tag.RowsAffected(), postgres.ExplainPooling(err)
	}
	return tag.RowsAffected(), nil
}

// QueryRow runs query in tx. Its row's Scan error is the driver's: the
// ledger explains the errors of its reads itself, and a row wrapped here
// would cost an allocation on every claim.
func (Driver) QueryRow(ctx context.Context, tx pgx.Tx, query string, args ...any) ledgerkit.Row {
	return tx.QueryRow(ctx, query, args...)
}

// IsoLevel returns pgx's name of database/sql's isolation level l
// ("" for sql.LevelDefault, the database's default), or an error for a
// level PostgreSQL has not.
func IsoLevel(l sql.IsolationLevel) (pgx.TxIsoLevel, error) {
	switch l {
	case sql.LevelDefault:
		return "", nil
	case sql.LevelReadUncommitted:
		return pgx.ReadUncommitted, nil
	case sql.LevelReadCommitted:
		return pgx.ReadCommitted, nil
	case sql.LevelRepeatableRead:
		return pgx.RepeatableRead, nil
	case sql.LevelSerializable:
		return pgx.Serializable, nil
	}
	return "", fmt.Errorf("pgxledger: PostgreSQL has no isolation level %v", l)
}

// StoreBegin and StoreRecordCommit are package pgxledger's Store's
// pipelined claim-at-commit steps (s is a *pgxledger.Store): a
// transaction begun on pool whose record and COMMIT then go in one round
// trip. Package pgxledger sets them when it is initialised.
var (
	StoreBegin        func(s any, ctx context.Context, pool *pgxpool.Pool, opts pgx.TxOptions) (pgx.Tx, error)
	StoreRecordCommit func(s any, ctx context.Context, tx pgx.Tx, req ledger.ClaimRequest, r ledger.Result) (*ledger.Claim, error)
)
