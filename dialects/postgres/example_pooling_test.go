package postgres_test

import (
	"context"
	"database/sql"
	"errors"
	"log"

	"github.com/opledger/opledger/dialects/postgres"
	"github.com/opledger/opledger/migrations"
)

// Behind PgBouncer in transaction mode, pgx needs
// default_query_exec_mode=exec (lib/pq: binary_parameters=yes) in its DSN;
// CheckPooling tells when a DSN lacks it.
func ExampleCheckPooling() {
	db, err := sql.Open("pgx", "postgres://app@pgbouncer.internal:6432/app?default_query_exec_mode=exec")
	if err != nil {
		log.Fatal(err)
	}
	defer db.Close()
	err = postgres.CheckPooling(context.Background(), db)
	if errors.Is(err, postgres.ErrStatementPooling) {
		log.Fatal(err) // the message names the setting to add
	}
}

// Migrations take a session-level advisory lock, which a pooler in
// transaction mode cannot keep: run them over a direct connection to
// PostgreSQL, not through the pooler.
func ExampleErrTransactionPooling() {
	direct, err := sql.Open("pgx", "postgres://app@db.internal:5432/app")
	if err != nil {
		log.Fatal(err)
	}
	defer direct.Close()
	m, err := migrations.New(direct, postgres.New())
	if err != nil {
		log.Fatal(err)
	}
	if _, err := m.Up(context.Background()); errors.Is(err, postgres.ErrTransactionPooling) {
		log.Fatal("migrate over a direct connection, not through PgBouncer in transaction mode")
	} else if err != nil {
		log.Fatal(err)
	}
}
