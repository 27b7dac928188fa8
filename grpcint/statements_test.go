package grpcint_test

import (
	"context"
	"testing"

	"github.com/opledger/opledger/internal/testkit/testdb"
	"github.com/opledger/opledger/internal/testkit/wallet/walletpb"
	"github.com/opledger/opledger/keyed"
)

// keyedCallStatements is what a keyed unary call over loopback costs in
// statements on the server, per database family, with grpcint's default
// lock-wait bound: "WORK" is the handler's own INSERT, so the bare
// handler transaction is BEGIN, WORK, COMMIT. No path takes a SAVEPOINT.
var keyedCallStatements = map[string]map[string][]string{
	// The bound is set inside the claim's plain insert (a CTE: "WITH"),
	// at commit inside the record's insert (a CTE too); a replay reads
	// the stored entry with a SELECT of its own after the conflict.
	"postgres": {
		"call":             {"BEGIN", "WITH", "WORK", "UPDATE", "COMMIT"},
		"replay":           {"BEGIN", "WITH", "SELECT", "ROLLBACK"},
		"call at commit":   {"BEGIN", "WORK", "WITH", "COMMIT"},
		"replay at commit": {"BEGIN", "WORK", "WITH", "SELECT", "ROLLBACK"},
	},
	// The bound is a session setting: set (keeping the session's value
	// in a user variable) before BEGIN, put back after the transaction.
	"mysql": {
		"call":             {"SET", "BEGIN", "INSERT", "WORK", "UPDATE", "COMMIT", "SET"},
		"replay":           {"SET", "BEGIN", "INSERT", "SELECT", "ROLLBACK", "SET"},
		"call at commit":   {"SET", "BEGIN", "WORK", "INSERT", "COMMIT", "SET"},
		"replay at commit": {"SET", "BEGIN", "WORK", "INSERT", "SELECT", "ROLLBACK", "SET"},
	},
	// busy_timeout is a setting of the connection, and the wait is at
	// BEGIN: read, set, and put back after the transaction (in-process
	// calls, no round trip).
	"sqlite": {
		"call":             {"PRAGMA", "PRAGMA", "BEGIN", "INSERT", "WORK", "UPDATE", "COMMIT", "PRAGMA"},
		"replay":           {"PRAGMA", "PRAGMA", "BEGIN", "INSERT", "SELECT", "ROLLBACK", "PRAGMA"},
		"call at commit":   {"PRAGMA", "PRAGMA", "BEGIN", "WORK", "INSERT", "COMMIT", "PRAGMA"},
		"replay at commit": {"PRAGMA", "PRAGMA", "BEGIN", "WORK", "INSERT", "SELECT", "ROLLBACK", "PRAGMA"},
	},
}

// TestKeyedCallStatements counts, through a counting driver wrapper on
// the real database, the statements the server runs for a keyed unary
// call of the example service over loopback, and for its retry (a
// replay): at most the bare handler transaction plus the ledger's
// statements; and the same for the method run claim at commit
// (WithClaimAtCommit), on PostgreSQL one statement over the bare handler
// transaction.
func TestKeyedCallStatements(t *testing.T) {
	for _, tg := range targets() {
		t.Run(tg.Name, func(t *testing.T) {
			testdb.Parallel(t, tg.Family(), 1)
			db, c := tg.OpenCounting(t, 1)
			table, biz := newTables(t, db, tg.Dialect)
			e := serve(t, db, tg.Dialect, table, biz)
			ctx := as(context.Background(), "alice", "count-key-1")
			want := keyedCallStatements[tg.Family()]
			for _, path := range []string{"call", "replay"} {
				c.Reset()
				if _, err := e.pc.Deposit(ctx, deposit("r1", 100)); err != nil {
					t.Fatal(err)
				}
				testdb.CheckStatements(t, path, c, biz, want[path])
			}
			atCommit := serve(t, db, tg.Dialect, table, biz, keyed.WithClaimAtCommit(walletpb.DepositMethod))
			ctx = as(context.Background(), "alice", "count-key-2")
			for _, path := range []string{"call at commit", "replay at commit"} {
				c.Reset()
				if _, err := atCommit.pc.Deposit(ctx, deposit("r2", 100)); err != nil {
					t.Fatal(err)
				}
				testdb.CheckStatements(t, path, c, biz, want[path])
			}
		})
	}
}
