package pgxconformance

import (
	"database/sql"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/opledger/opledger/conformance"
	"github.com/opledger/opledger/internal/conformancekit"
)

// Driver and Ledger are the suite's pgx driver and the Store as its
// ledger under test, for the tests' broken ledgers to build on.
type (
	Driver = pgxDriver
	Ledger = pgxLedger
)

// TargetFor is targetFor: the conformance target of the ledgers newLedger
// builds on pool.
func TargetFor(name string, pool *pgxpool.Pool, db *sql.DB, newLedger func(conformancekit.LedgerConfig) (conformancekit.TxLedger[pgx.Tx], error)) conformance.Target {
	return targetFor(name, pool, db, newLedger)
}
