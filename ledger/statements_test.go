package ledger_test

import (
	"context"
	"database/sql"
	"testing"

	"github.com/opledger/opledger/internal/testkit/testdb"
	"github.com/opledger/opledger/ledger"
)

// ledgerStatements is what each path of the ledger costs in statements,
// per database family, BEGIN and COMMIT included (the caller's own; the
// test's transaction writes nothing else). The bare transaction it is
// measured against is BEGIN, the caller's write and COMMIT.
var ledgerStatements = map[string]map[string][]string{
	// The claim is the plain INSERT, the entry read after a conflict
	// only: an acquisition, the common case, costs one plain statement.
	"postgres": {
		"happy":  {"BEGIN", "INSERT", "UPDATE", "COMMIT"},
		"replay": {"BEGIN", "INSERT", "SELECT", "COMMIT"},
		"waited": {"BEGIN", "INSERT", "SELECT", "COMMIT"},
		// Record (claim at commit) is the plain insert, optimised for
		// recording: a replay reads the entry with a separate SELECT.
		"record":        {"BEGIN", "INSERT", "COMMIT"},
		"record replay": {"BEGIN", "INSERT", "SELECT", "COMMIT"},
		"record waited": {"BEGIN", "INSERT", "SELECT", "COMMIT"},
	},
	// ledger.WithOneStatementClaim: one statement claims (a CTE: "WITH"),
	// and replays; when the claim waited for the holder, its snapshot
	// cannot show the holder's row, so the entry is read with a separate
	// SELECT.
	"postgres one statement": {
		"happy":         {"BEGIN", "WITH", "UPDATE", "COMMIT"},
		"replay":        {"BEGIN", "WITH", "COMMIT"},
		"waited":        {"BEGIN", "WITH", "SELECT", "COMMIT"},
		"record":        {"BEGIN", "INSERT", "COMMIT"},
		"record replay": {"BEGIN", "INSERT", "SELECT", "COMMIT"},
		"record waited": {"BEGIN", "INSERT", "SELECT", "COMMIT"},
	},
	"mysql": {
		"happy":         {"BEGIN", "INSERT", "UPDATE", "COMMIT"},
		"replay":        {"BEGIN", "INSERT", "SELECT", "COMMIT"},
		"waited":        {"BEGIN", "INSERT", "SELECT", "COMMIT"},
		"record":        {"BEGIN", "INSERT", "COMMIT"},
		"record replay": {"BEGIN", "INSERT", "SELECT", "COMMIT"},
		"record waited": {"BEGIN", "INSERT", "SELECT", "COMMIT"},
	},
	// TiDB: each claim and record first checks the transaction's mode (a
	// SELECT of tidb_txn_mode, mysql.NewTiDB's dialectkit.TxChecker).
	"tidb": {
		"happy":         {"BEGIN", "SELECT", "INSERT", "UPDATE", "COMMIT"},
		"replay":        {"BEGIN", "SELECT", "INSERT", "SELECT", "COMMIT"},
		"waited":        {"BEGIN", "SELECT", "INSERT", "SELECT", "COMMIT"},
		"record":        {"BEGIN", "SELECT", "INSERT", "COMMIT"},
		"record replay": {"BEGIN", "SELECT", "INSERT", "SELECT", "COMMIT"},
		"record waited": {"BEGIN", "SELECT", "INSERT", "SELECT", "COMMIT"},
	},
	"sqlite": {
		"happy":         {"BEGIN", "INSERT", "UPDATE", "COMMIT"},
		"replay":        {"BEGIN", "INSERT", "SELECT", "COMMIT"},
		"record":        {"BEGIN", "INSERT", "COMMIT"},
		"record replay": {"BEGIN", "INSERT", "SELECT", "COMMIT"},
	},
}

// TestStatementCounts counts, through a counting driver wrapper on the
// real database, the statements of a claim that acquires and completes
// (the happy path), of a claim that replays, and of one that replays
// after waiting for a holder, on every target; and the same for Record
// (claim at commit). On PostgreSQL also with WithOneStatementClaim.
func TestStatementCounts(t *testing.T) {
	type variant struct {
		tg     testdb.Target
		name   string
		server string
		opts   []ledger.Option
	}
	var variants []variant
	for _, tg := range testdb.Targets() {
		variants = append(variants, variant{tg, tg.Name, tg.Server(), nil})
		if tg.Name == "postgres/pgx" {
			variants = append(variants, variant{tg, tg.Name + "/one-statement", "postgres one statement", []ledger.Option{ledger.WithOneStatementClaim()}})
		}
	}
	for _, v := range variants {
		tg := v.tg
		t.Run(v.name, func(t *testing.T) {
			testdb.Parallel(t, tg.Family(), 3)
			db, c := tg.OpenCounting(t, 1)
			e := newEnv(t, tg.Name, tg.Dialect, db)
			e.l = e.store(t, v.opts...)
			ctx := context.Background()
			id, err := ledger.NewIdentity("counter", "/count.v1/Op", "k1")
			if err != nil {
				t.Fatal(err)
			}
			req := ledger.ClaimRequest{Identity: id, Fingerprint: fp("one")}
			rid, err := ledger.NewIdentity("counter", "/count.v1/Op", "r1")
			if err != nil {
				t.Fatal(err)
			}
			rreq := ledger.ClaimRequest{Identity: rid, Fingerprint: fp("one")}
			// step claims (and completes) or records req in tx.
			step := func(tx *sql.Tx, record bool, req ledger.ClaimRequest) (*ledger.Claim, error) {
				if record {
					return e.l.Record(ctx, tx, req, ledger.Result{Response: []byte("r")})
				}
				cl, err := e.l.Claim(ctx, tx, req)
				if err == nil && cl.Acquired() {
					err = e.l.Complete(ctx, tx, cl, ledger.Result{Response: []byte("r")})
				}
				return cl, err
			}
			run := func(record bool, req ledger.ClaimRequest, want ledger.ClaimOutcome) {
				t.Helper()
				c.Reset()
				tx, err := db.BeginTx(ctx, nil)
				if err != nil {
					t.Fatal(err)
				}
				defer tx.Rollback()
				cl, err := step(tx, record, req)
				if err != nil {
					t.Fatal(err)
				}
				if cl.Outcome != want {
					t.Fatalf("outcome %v, want %v", cl.Outcome, want)
				}
				if err := tx.Commit(); err != nil {
					t.Fatal(err)
				}
			}
			want := ledgerStatements[v.server]
			run(false, req, ledger.Acquired)
			testdb.CheckStatements(t, "happy path", c, "", want["happy"])
			run(false, req, ledger.Replay)
			testdb.CheckStatements(t, "replay", c, "", want["replay"])
			run(true, rreq, ledger.Recorded)
			testdb.CheckStatements(t, "record", c, "", want["record"])
			run(true, rreq, ledger.Replay)
			testdb.CheckStatements(t, "record replay", c, "", want["record replay"])
			if want["waited"] == nil {
				return // SQLite: the wait is at BEGIN, before any claim
			}
			for _, record := range []bool{false, true} {
				path := "waited"
				if record {
					path = "record waited"
				}
				waited(t, tg, db, c, path, want[path], func(tx *sql.Tx, req ledger.ClaimRequest) (*ledger.Claim, error) {
					return step(tx, record, req)
				})
			}
		})
	}
}

// waited counts the statements of a replay whose step (a claim and its
// completion, or a record) waited for a holder of the identity to commit.
func waited(t *testing.T, tg testdb.Target, db *sql.DB, c *testdb.Counter, path string, want []string, step func(*sql.Tx, ledger.ClaimRequest) (*ledger.Claim, error)) {
	t.Helper()
	ctx := context.Background()
	other := tg.Open(t, 2) // the holder, and the lock-wait view
	held, err := ledger.NewIdentity("counter", "/count.v1/Op", "held "+path)
	if err != nil {
		t.Fatal(err)
	}
	hreq := ledger.ClaimRequest{Identity: held, Fingerprint: fp("held")}
	holder, err := other.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer holder.Rollback()
	if hc, err := step(holder, hreq); err != nil || (!hc.Acquired() && !hc.Recorded()) {
		t.Fatalf("holder: %+v %v", hc, err)
	}
	hid := testdb.SessionID(t, tg.Dialect, holder)
	c.Reset()
	type outcome struct {
		c   *ledger.Claim
		err error
	}
	done, returned := make(chan outcome, 1), make(chan struct{})
	go func() {
		defer close(returned)
		tx, err := db.BeginTx(ctx, nil)
		if err != nil {
			done <- outcome{err: err}
			return
		}
		cl, err := step(tx, hreq)
		if err == nil {
			err = tx.Commit()
		} else {
			tx.Rollback()
		}
		done <- outcome{cl, err}
	}()
	testdb.WaitBlocked(t, other, tg.Dialect, hid, 1, returned)
	if err := holder.Commit(); err != nil {
		t.Fatal(err)
	}
	o := <-done
	if o.err != nil || o.c.Outcome != ledger.Replay {
		t.Fatalf("%s: %+v %v, want a replay", path, o.c, o.err)
	}
	testdb.CheckStatements(t, "replay after waiting ("+path+")", c, "", want)
}
