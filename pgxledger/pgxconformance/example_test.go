package pgxconformance_test

import (
	"context"
	"fmt"
	"log"
	"os"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/pgx/v5/stdlib"

	"github.com/opledger/opledger/conformance"
	"github.com/opledger/opledger/pgxledger/pgxconformance"
)

// The suite over pgx, in its four forms, from a tool (Check) rather than
// a test (Run). It needs a PostgreSQL database: compiled, not run.
func Example() {
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, os.Getenv("DATABASE_URL"))
	if err != nil {
		log.Fatal(err)
	}
	defer pool.Close()
	db := stdlib.OpenDBFromPool(pool) // the suite's own statements
	defer db.Close()

	tg := pgxconformance.NewTarget("pgx", pool, db)
	for _, form := range []conformance.Target{tg, tg.AtCommit(), tg.Pipelined(), tg.Pipelined().AtCommit()} {
		rep := conformance.Check(ctx, form, conformance.WithKeys(20))
		fmt.Println(form.Name, "failed:", rep.Failures())
	}
}
