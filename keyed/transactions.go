package keyed

import (
	"database/sql"

	"github.com/opledger/opledger/internal/keyedtx"
	"github.com/opledger/opledger/ledger"
)

// Transactions is how a keyed server gets its transactions: [SQL] for
// database/sql, pgxledger.Transactions for pgx's native API. The
// transports' NewServerFor (grpcint, connectint) and httpint.NewFor take
// one; its methods are the kit's own.
type Transactions = keyedtx.Transactions

// SQL returns the Transactions of database/sql: a txmiddleware runner
// over db, the database that holds both the ledger's table and the
// handlers' tables, with ledger l. Handlers find their *sql.Tx with
// txmiddleware.TxFromContext.
func SQL(db *sql.DB, l ledger.Ledger) Transactions { return keyedtx.SQL(db, l) }
