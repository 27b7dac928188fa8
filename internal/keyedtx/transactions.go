// Package keyedtx is the seam through which the kit's keyed servers get
// their transaction runners: [Transactions], one implementation per
// transaction API ([SQL] for database/sql; pgxledger's for pgx), used by
// every transport through package keyed's alias keyed.Transactions.
package keyedtx

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/opledger/opledger/dialects"
	"github.com/opledger/opledger/internal/txledger"
	"github.com/opledger/opledger/ledger"
	"github.com/opledger/opledger/txmiddleware"
)

// Work is a keyed call's handler as the core runs it: it finds its
// transaction in ctx (txmiddleware.TxFromContext for database/sql, the
// transaction API's own function for another), with the operation's
// identity (ledger.OperationFromContext), and returns the result to record
// or an error. It may run more than once before one run commits.
type Work func(ctx context.Context) (ledger.Result, error)

// Runner runs keyed units on one transaction API: the one transaction of
// claim, work and completion (either order), with the behaviour of
// txmiddleware.Runner.Run, and the reads a resolve needs. A Transactions
// builds them; a Runner must be safe for concurrent use.
type Runner interface {
	// Run claims req's identity and, when this call acquires it, runs work
	// and records its result in one transaction, as txmiddleware.Runner's
	// Run does (its RunResult, its errors). work finds the transaction in
	// its context.
	Run(ctx context.Context, req ledger.ClaimRequest, work Work) (txmiddleware.RunResult, error)
	// Lookup reads the committed entry of id without claiming it, its wait
	// for a connection bounded as the runner's claims are (see
	// txmiddleware.Runner.Lookup).
	Lookup(ctx context.Context, id ledger.Identity) (*ledger.Entry, error)
	// InFlight reports whether a Run of id is in progress on the runner.
	InFlight(id ledger.Identity) bool
}

// Transactions is the seam through which a transport gets its runners:
// one implementation per transaction API, used by every transport. [SQL]
// is database/sql's; another API (pgx's native one) plugs in once, here,
// and every transport takes it (grpcint.NewServerFor, httpint.NewFor).
//
// NewRunner builds a runner with txmiddleware's options: the transport's
// own (its error codec, the lock-wait bound, claim at commit, telemetry)
// after the ones its user passed. A Transactions may also implement
// txledger.ResultSizer, when its ledger bounds the results it stores.
type Transactions interface {
	// NewRunner returns a runner with opts; configuration errors wrap
	// txmiddleware.ErrInvalidConfig.
	NewRunner(opts ...txmiddleware.Option) (Runner, error)
	// Dialect is the dialect of the database, with which the core tells
	// the database's failures from the handler's.
	Dialect() dialects.Dialect
}

// SQL returns the Transactions of database/sql: txmiddleware.Runner over
// db, the database that holds both the ledger's table and the handlers'
// tables, with ledger l. Handlers find their *sql.Tx with
// txmiddleware.TxFromContext. It implements txledger.ResultSizer when l
// states its result limit (see txledger.MaxResultSize).
func SQL(db *sql.DB, l ledger.Ledger) Transactions {
	if n, ok := txledger.MaxResultSize(l); ok {
		return sizedSQL{sqlTransactions{db, l}, maxResultSize(n)}
	}
	return sqlTransactions{db, l}
}

type sqlTransactions struct {
	db *sql.DB
	l  ledger.Ledger
}

type sizedSQL struct {
	sqlTransactions
	txledger.ResultSizer
}

// maxResultSize is a ledger's result limit as a txledger.ResultSizer.
type maxResultSize int

func (n maxResultSize) MaxResultSize() int { return int(n) }

// ErrNoDialect is returned (wrapped) for a Transactions without a dialect.
var ErrNoDialect = errors.New("keyed: no dialect")

// LedgerWindow passes on the window of the ledger, when it states one
// (txledger.Window), so that a server over these Transactions learns it.
func (s sqlTransactions) LedgerWindow() (retention, skew time.Duration, ok bool) {
	return txledger.Window(s.l)
}

func (s sqlTransactions) Dialect() dialects.Dialect {
	if s.l == nil {
		return nil
	}
	return s.l.Dialect()
}

func (s sqlTransactions) NewRunner(opts ...txmiddleware.Option) (Runner, error) {
	r, err := txmiddleware.New(s.db, s.l, opts...)
	if err != nil {
		return nil, err
	}
	return sqlRunner{r}, nil
}

// sqlRunner is a txmiddleware.Runner as a Runner.
type sqlRunner struct{ *txmiddleware.Runner }

func (r sqlRunner) Run(ctx context.Context, req ledger.ClaimRequest, work Work) (txmiddleware.RunResult, error) {
	if work == nil {
		return r.Runner.Run(ctx, req, nil)
	}
	return r.Runner.Run(ctx, req, func(ctx context.Context, _ *sql.Tx) (ledger.Result, error) { return work(ctx) })
}

// Check refuses a nil Transactions or one without a dialect.
func Check(tx Transactions) (dialects.Dialect, error) {
	if tx == nil {
		return nil, fmt.Errorf("%w: nil Transactions", txmiddleware.ErrInvalidConfig)
	}
	d := tx.Dialect()
	if d == nil {
		return nil, fmt.Errorf("%w: %w", txmiddleware.ErrInvalidConfig, ErrNoDialect)
	}
	return d, nil
}
