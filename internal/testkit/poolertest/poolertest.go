// Package poolertest puts a driver's prepared statements in the way of a
// transaction pooler on purpose, for the tests that each statement the kit
// sends reports the pooler's error as postgres.ErrStatementPooling
// (docs/poolers.md): a throw-away PostgreSQL behind a throw-away PgBouncer
// in transaction mode with a single server connection, which every client
// of the pooler is handed in turn.
//
// A second client of the pooler (pgx in exec mode, which prepares nothing
// under a name) deallocates, between two transactions of the client under
// test, the statements that client's driver prepared there (Forget), or
// leaves another client's statements there (a client opened without
// Reset). The client under test then meets what a client of a
// transaction pooler meets when its next transaction runs on another
// server connection: its statement is missing (SQLSTATE 26000, "prepared
// statement … does not exist") or one of the same name is there already
// (42P05, "… already exists"). It meets it at the statement the test
// chose, every time: no race decides it.
package poolertest

import (
	"context"
	"database/sql"
	"errors"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/opledger/opledger/dialects/postgres"
	"github.com/opledger/opledger/internal/harness/throwaway"
	"github.com/opledger/opledger/internal/testkit/testdb"
	"github.com/opledger/opledger/txmiddleware"
)

// Pooler is a throw-away PostgreSQL behind a throw-away PgBouncer in
// transaction mode with one server connection, and a ledger table on it.
type Pooler struct {
	// PgBouncer is the pooler: its DSN() opens a client of it with the
	// driver's defaults.
	PgBouncer *throwaway.Server
	// Table is a ledger table (with its outbox, outbox.TableFor(Table)),
	// migrated over a direct connection (the migrations refuse the pooler).
	Table string

	other *sql.DB
}

// New starts the servers for t and migrates the table. Without pgbouncer
// or PostgreSQL's binaries t skips, or fails when
// OPLEDGER_TEST_REQUIRE_DBS=1.
func New(t testing.TB) *Pooler {
	t.Helper()
	pg := throwaway.Postgres(t)
	pb := throwaway.PgBouncer(t, pg, throwaway.PgBouncerOptions{PoolSize: 1})
	direct := testdb.OpenDSN(t, "pgx", pg.DSN(), 2)
	table := testdb.NewTable(t, direct, postgres.New())
	other := testdb.OpenDSN(t, "pgx", pb.DriverDSN("pgx"), 1)
	return &Pooler{PgBouncer: pb, Table: table, other: other}
}

// Reset deallocates every statement prepared on the server connection:
// call it before a client opens, so that it meets none of an earlier
// client's.
func (p *Pooler) Reset(t testing.TB) { p.exec(t, "DEALLOCATE ALL") }

// Forget deallocates the statements prepared on the server connection (by
// any client, under any name) whose text is one of queries. It fails t
// when there is none: what ran before it should have prepared them.
func (p *Pooler) Forget(t testing.TB, queries ...string) {
	t.Helper()
	rows, err := p.other.QueryContext(context.Background(), "SELECT name FROM pg_prepared_statements WHERE statement = ANY($1)", queries)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var names []string
	for rows.Next() {
		var n string
		if err := rows.Scan(&n); err != nil {
			t.Fatal(err)
		}
		names = append(names, n)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	rows.Close()
	if len(names) == 0 {
		t.Fatalf("no statement %q is prepared on the server connection: the warm-up did not prepare it", queries)
	}
	for _, n := range names {
		p.exec(t, "DEALLOCATE "+pgx.Identifier{n}.Sanitize())
	}
}

// Query reads one value through the second client (on the same server
// connection, in exec mode: it meets no pooler error).
func (p *Pooler) Query(t testing.TB, dest any, query string, args ...any) {
	t.Helper()
	if err := p.other.QueryRowContext(context.Background(), query, args...).Scan(dest); err != nil {
		t.Fatalf("%s: %v", query, err)
	}
}

func (p *Pooler) exec(t testing.TB, query string) {
	t.Helper()
	if _, err := p.other.ExecContext(context.Background(), query); err != nil {
		t.Fatalf("%s: %v", query, err)
	}
}

// Want fails t unless err is the pooler's error with SQLSTATE code as
// docs/poolers.md promises it: it matches postgres.ErrStatementPooling,
// its message names the setting (default_query_exec_mode=exec), the
// driver's *pgconn.PgError is still reachable with errors.As, and it is no
// ErrCommitUnknown (the database refused the statement: nothing
// committed).
func Want(t testing.TB, err error, code string) {
	t.Helper()
	var pgErr *pgconn.PgError
	switch {
	case err == nil:
		t.Fatalf("no error; the statement the pooler lost should have failed with SQLSTATE %s", code)
	case !errors.As(err, &pgErr) || pgErr.Code != code:
		t.Fatalf("%v\n(%T) does not reach the driver's error with SQLSTATE %s", err, err, code)
	case !errors.Is(err, postgres.ErrStatementPooling):
		t.Fatalf("%v\n(%T) does not match postgres.ErrStatementPooling", err, err)
	case !strings.Contains(err.Error(), "default_query_exec_mode=exec"):
		t.Fatalf("%v\ndoes not name default_query_exec_mode=exec", err)
	case errors.Is(err, txmiddleware.ErrCommitUnknown):
		t.Fatalf("%v\nmatches ErrCommitUnknown: the database refused the statement, nothing committed", err)
	}
	t.Logf("%v", err)
}
