package pgdialect

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/opledger/opledger/internal/dialectkit"
)

var (
	_ dialectkit.PoolingChecker = Dialect{}
	_ dialectkit.ErrorExplainer = Dialect{}
)

// ExplainError is ExplainPooling (the ledger and txmiddleware report a
// driver error that a transaction pooler causes as ErrStatementPooling),
// and names the sweep in the error of a claim whose birth no partition of
// a table partitioned by birth holds (SQLSTATE 23514, "no partition of
// relation … found for row").
func (Dialect) ExplainError(err error) error { return explainNoBucket(ExplainPooling(err)) }

// explainNoBucket wraps err, when it is PostgreSQL's "no partition of
// relation … found for row", with what it means for the ledger and what
// to do; it returns err otherwise.
func explainNoBucket(err error) error {
	var s sqlStater
	if err == nil || !errors.As(err, &s) || s.SQLState() != "23514" || !strings.Contains(err.Error(), "no partition of relation") {
		return err
	}
	return fmt.Errorf("postgres: the ledger table is partitioned by the keys' birth and has no bucket for this key's: "+
		"run Store.Sweep (opledger sweep) at least once a day, which creates the coming buckets ahead (docs/operations.md): %w", err)
}

var (
	// ErrStatementPooling is matched (errors.Is) by the error of
	// CheckPooling, and of ExplainPooling, when the driver's prepared
	// statements do not survive between transactions: a pooler in
	// transaction mode (PgBouncer pool_mode=transaction, before 1.21 or
	// without max_prepared_statements) sits between the driver and
	// PostgreSQL. The fix is a driver setting in the DSN: pgx
	// default_query_exec_mode=exec (or simple_protocol), lib/pq
	// binary_parameters=yes. See docs/poolers.md.
	ErrStatementPooling = errors.New("postgres: the driver's prepared statements are lost between transactions: " +
		"a connection pooler in transaction mode (PgBouncer pool_mode=transaction) sits between the driver and PostgreSQL; " +
		"add default_query_exec_mode=exec to a pgx DSN or binary_parameters=yes to a lib/pq DSN (docs/poolers.md)")

	// ErrTransactionPooling is matched (errors.Is) by the error of the
	// migrations' lock when the session that took it is not the one the
	// next statement runs on: a pooler in transaction mode hands the
	// server connection to another client after each transaction, so a
	// session-level advisory lock protects nothing. Run migrations over a
	// direct connection to PostgreSQL (or a session-mode pool).
	ErrTransactionPooling = errors.New("postgres: the session changed between transactions: " +
		"a connection pooler in transaction mode (PgBouncer pool_mode=transaction) sits between the client and PostgreSQL, " +
		"and session state such as the migrations' advisory lock does not survive it; " +
		"run migrations over a direct connection (or a session-mode pool) (docs/poolers.md)")
)

// ExplainPooling returns err wrapped with ErrStatementPooling when it is
// an error a transaction pooler gives a driver that prepares statements
// (SQLSTATE 26000, "prepared statement … does not exist"; 42P05,
// "prepared statement … already exists"; 08P01, a Bind that reached a
// statement of another parameter count), and err itself otherwise.
func ExplainPooling(err error) error {
	if err == nil || errors.Is(err, ErrStatementPooling) {
		return err
	}
	var s sqlStater
	if !errors.As(err, &s) {
		return err
	}
	switch s.SQLState() {
	case "26000", "42P05":
		if strings.Contains(err.Error(), "prepared statement") {
			return fmt.Errorf("%w: %w", ErrStatementPooling, err)
		}
	case "08P01":
		if strings.Contains(err.Error(), "bind message") {
			return fmt.Errorf("%w: %w", ErrStatementPooling, err)
		}
	}
	return err
}

// Probe sizes: probeWorkers goroutines (at most the pool's size less one),
// probeRounds statements each.
const (
	probeWorkers = 8
	probeRounds  = 30
)

// CheckPooling runs concurrent parameterised statements on db, half of
// them with a text shared by every worker and half with a text of each
// worker's own, each checked for its own answer, outside transactions and
// inside them. A driver that prepares statements (pgx's default statement
// cache, lib/pq's Parse/Describe round trip before the Bind) behind a
// pooler in transaction mode fails this within a few statements, with an
// error or with another statement's answer; it returns ErrStatementPooling
// then, wrapping the first error seen. It is a probe, not a proof: a db
// limited to one connection (SetMaxOpenConns(1)) cannot show two clients
// colliding, and passes it.
func (Dialect) CheckPooling(ctx context.Context, db *sql.DB) error {
	if db == nil {
		return errors.New("postgres: check pooling: nil database")
	}
	workers := probeWorkers
	if max := db.Stats().MaxOpenConnections; max > 0 && workers > max-1 {
		workers = max - 1
	}
	if workers < 2 {
		workers = 2
	}
	// The first failure stops the other workers between statements, not
	// by cancelling their context: a transaction whose context ends is
	// rolled back by database/sql in the background, so its connection
	// could still be in use when CheckPooling returns.
	var (
		mu      sync.Mutex
		first   error
		stopped atomic.Bool
		wg      sync.WaitGroup
	)
	fail := func(err error) {
		mu.Lock()
		if first == nil {
			first = err
		}
		mu.Unlock()
		stopped.Store(true)
	}
	for w := range workers {
		wg.Go(func() {
			for i := range probeRounds {
				if stopped.Load() || ctx.Err() != nil {
					return
				}
				inTx := i%2 == 1 // rounds 0-3 cover each text in and outside a transaction
				if err := probeOnce(ctx, db, w, i, inTx); err != nil {
					fail(err)
					return
				}
			}
		})
	}
	wg.Wait()
	if first == nil {
		return nil
	}
	var s sqlStater
	if errors.Is(first, ErrStatementPooling) || !errors.As(first, &s) {
		return fmt.Errorf("postgres: check pooling: %w", first)
	}
	if e := ExplainPooling(first); errors.Is(e, ErrStatementPooling) {
		return fmt.Errorf("postgres: check pooling: %w", e)
	}
	return fmt.Errorf("postgres: check pooling: %w", first)
}

// probeOnce runs worker w's statement i and checks its answer. Every
// other statement has a text shared by all workers (two client
// connections that prepare it under one name on one server connection
// collide: pgx's cache), the others a text of the worker's own with as
// many parameters (a Bind that reaches another client's unnamed statement
// answers for that one: lib/pq's two round trips).
func probeOnce(ctx context.Context, db *sql.DB, w, i int, inTx bool) error {
	q, args := "SELECT $1::bigint * 1000 + $2::bigint /* opledger pooling probe */", []any{i, w}
	if i%4 >= 2 {
		q, args = fmt.Sprintf("SELECT $1::bigint * 1000 + %d /* opledger pooling probe %d */", w, w), []any{i}
	}
	want := int64(i)*1000 + int64(w)
	check := func(got int64, err error) error {
		if err == nil && got != want {
			err = fmt.Errorf("%w: a statement answered %d instead of %d (the Bind reached another client's statement)", ErrStatementPooling, got, want)
		}
		return ExplainPooling(err)
	}
	var got int64
	if !inTx {
		err := db.QueryRowContext(ctx, q, args...).Scan(&got)
		return check(got, err)
	}
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return ExplainPooling(err)
	}
	for range 2 {
		err := tx.QueryRowContext(ctx, q, args...).Scan(&got)
		if err := check(got, err); err != nil {
			_ = tx.Rollback()
			return err
		}
	}
	return ExplainPooling(tx.Commit())
}
