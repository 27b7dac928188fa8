package payments_test

import (
	"context"
	"database/sql"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/opledger/opledger/dialects/sqlite"
	"github.com/opledger/opledger/examples/payments"
	"github.com/opledger/opledger/keyed"
	"github.com/opledger/opledger/migrations"
	"github.com/opledger/opledger/policy"
)

// Example runs 200 transfers over loopback gRPC with a third of the
// responses dropped after the server committed, on SQLite in a temporary
// directory, and checks the business table.
func Example() {
	dir, err := os.MkdirTemp("", "payments-example-")
	if err != nil {
		fmt.Println(err)
		return
	}
	defer os.RemoveAll(dir)
	db, err := sql.Open("sqlite3", sqlite.DSN(filepath.Join(dir, "pay.db"), 10*time.Second))
	if err != nil {
		fmt.Println(err)
		return
	}
	defer db.Close()
	ctx := context.Background()
	m, err := migrations.New(db, sqlite.New()) // the ledger's table
	if err != nil {
		fmt.Println(err)
		return
	}
	if _, err := m.Up(ctx); err != nil {
		fmt.Println(err)
		return
	}
	budget, _ := policy.NewBudget(policy.BudgetSettings{Percent: 10})
	rep, err := payments.Scenario{
		DB: db, Dialect: sqlite.New(), Calls: 200,
		Faults: payments.FaultSettings{DropAfterCommit: 0.33},
		ClientOptions: []keyed.ClientOption{keyed.WithBudget(budget), keyed.WithMaxAttempts(12),
			keyed.WithBackoff(policy.Backoff{Initial: time.Millisecond, Max: 10 * time.Millisecond})},
	}.Run(ctx)
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println("calls:", rep.Calls, "succeeded:", rep.Succeeded, "executed:", rep.Executed)
	fmt.Println("duplicates:", rep.Duplicates, "lost:", rep.Lost, "wrong responses:", rep.WrongResponses)
	fmt.Println("resolved some dropped responses:", rep.Resolved > 0)
	// Output:
	// calls: 200 succeeded: 200 executed: 200
	// duplicates: 0 lost: 0 wrong responses: 0
	// resolved some dropped responses: true
}
