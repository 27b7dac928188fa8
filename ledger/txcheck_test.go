package ledger_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/opledger/opledger/dialects"
	"github.com/opledger/opledger/internal/testkit/testdb"
	"github.com/opledger/opledger/ledger"
)

// checking wraps a target's dialect with a dialectkit.TxChecker that records
// the transactions it is shown and refuses or fails when told to (the TiDB
// variant's check needs a TiDB server; this is the ledger's side of it).
type checking struct {
	dialects.Dialect
	mu     sync.Mutex
	seen   []*sql.Tx
	refuse bool
	fail   error
}

func (c *checking) CheckTx(ctx context.Context, tx *sql.Tx) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.seen = append(c.seen, tx)
	switch {
	case c.fail != nil:
		return c.fail
	case c.refuse:
		return fmt.Errorf("%w: optimistic (set the mode)", dialects.ErrUnsuitableTx)
	}
	return nil
}

func (c *checking) set(refuse bool, fail error) {
	c.mu.Lock()
	c.refuse, c.fail, c.seen = refuse, fail, nil
	c.mu.Unlock()
}

func (c *checking) txs() []*sql.Tx {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]*sql.Tx(nil), c.seen...)
}

// TestTxChecker: Claim asks the dialect's TxChecker before it inserts and
// returns its refusal (matching dialects.ErrUnsuitableTx, not retryable)
// with nothing written; a failure of the check itself is a *DBError.
func TestTxChecker(t *testing.T) {
	t.Parallel()
	forEachTarget(t, 4, func(t *testing.T, e *env) {
		ctx := context.Background()
		c := &checking{Dialect: e.Dialect}
		l, err := ledger.New(c, ledger.WithTable(e.Table))
		if err != nil {
			t.Fatal(err)
		}
		id := testdb.ID(t, "tenant-a", method, "checked")
		req := ledger.ClaimRequest{Identity: id, Fingerprint: fp("r")}

		c.set(true, nil)
		tx, err := e.DB.BeginTx(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		defer tx.Rollback()
		_, err = l.Claim(ctx, tx, req)
		if !errors.Is(err, dialects.ErrUnsuitableTx) || errors.Is(err, ledger.ErrRetryable) {
			t.Fatalf("refused claim: %v, want ErrUnsuitableTx", err)
		}
		if got := c.txs(); len(got) != 1 || got[0] != tx {
			t.Fatalf("CheckTx saw %d transactions, want the claim's", len(got))
		}
		// Nothing was inserted, and the transaction is still usable.
		var n int
		if err := tx.QueryRowContext(ctx, "SELECT COUNT(*) FROM "+e.Dialect.QuoteIdent(e.Table)).Scan(&n); err != nil || n != 0 {
			t.Fatalf("after the refusal: %d rows, %v", n, err)
		}
		if err := tx.Rollback(); err != nil {
			t.Fatal(err)
		}

		boom := errors.New("the check's query failed")
		c.set(false, boom)
		tx, err = e.DB.BeginTx(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		defer tx.Rollback()
		_, err = l.Claim(ctx, tx, req)
		var dbe *ledger.DBError
		if !errors.As(err, &dbe) || !errors.Is(err, boom) || dbe.Op != "claim" {
			t.Fatalf("failed check: %v, want a *DBError wrapping it", err)
		}
		tx.Rollback()

		c.set(false, nil)
		if _, err := claimOnce(t, e, l, id, fp("r"), "done"); err != nil {
			t.Fatal(err)
		}
	})
}

// TestSweepTransactions: for a dialect with a TxChecker each sweep batch
// runs in a transaction of its own, begun on the *sql.DB or *sql.Conn it
// is given and shown to the checker; a refusal stops the sweep with
// nothing deleted. Given a *sql.Tx, the batches run inside it.
func TestSweepTransactions(t *testing.T) {
	t.Parallel()
	forEachTarget(t, 4, func(t *testing.T, e *env) {
		ctx := context.Background()
		t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
		old := e.store(t, ledger.WithRetention(time.Hour), ledger.WithClock(func() time.Time { return t0 }))
		fill := func(prefix string, n int) {
			for i := range n {
				if _, err := claimOnce(t, e, old, testdb.ID(t, "tenant-a", method, fmt.Sprintf("%s-%d", prefix, i)), fp("s"), "r"); err != nil {
					t.Fatal(err)
				}
			}
		}
		c := &checking{Dialect: e.Dialect}
		sweeper, err := ledger.New(c, ledger.WithTable(e.Table), ledger.WithRetention(time.Hour),
			ledger.WithClock(func() time.Time { return t0.Add(2 * time.Hour) }))
		if err != nil {
			t.Fatal(err)
		}

		fill("a", 7)
		c.set(true, nil)
		if n, err := sweeper.Sweep(ctx, e.DB, 3); !errors.Is(err, dialects.ErrUnsuitableTx) || n != 0 {
			t.Fatalf("refused sweep: %d, %v", n, err)
		}
		if rows := e.LedgerRows(t); rows != 7 {
			t.Fatalf("%d rows after a refused sweep, want 7", rows)
		}

		c.set(false, nil)
		n, err := sweeper.Sweep(ctx, e.DB, 3)
		if err != nil || n != 7 {
			t.Fatalf("sweep: %d, %v; want 7", n, err)
		}
		// Batches of 3, 3 and 1: three transactions, each its own.
		txs := c.txs()
		if len(txs) != 3 || txs[0] == txs[1] || txs[1] == txs[2] || txs[0] == nil {
			t.Fatalf("CheckTx saw %v, want three distinct transactions", txs)
		}

		fill("b", 4)
		conn, err := e.DB.Conn(ctx)
		if err != nil {
			t.Fatal(err)
		}
		c.set(false, nil)
		if n, err := sweeper.Sweep(ctx, conn, 2); err != nil || n != 4 {
			t.Fatalf("sweep on a *sql.Conn: %d, %v; want 4", n, err)
		}
		conn.Close()
		if got := len(c.txs()); got != 3 {
			t.Fatalf("CheckTx saw %d transactions on the *sql.Conn, want 3 (2, 2, 0)", got)
		}

		fill("c", 2)
		tx, err := e.DB.BeginTx(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		defer tx.Rollback()
		c.set(false, nil)
		if n, err := sweeper.Sweep(ctx, tx, 10); err != nil || n != 2 {
			t.Fatalf("sweep in a *sql.Tx: %d, %v; want 2", n, err)
		}
		if got := c.txs(); len(got) != 1 || got[0] != tx {
			t.Fatalf("CheckTx saw %v, want the caller's transaction", got)
		}
		if err := tx.Rollback(); err != nil {
			t.Fatal(err)
		}
		if rows := e.LedgerRows(t); rows != 2 {
			t.Fatalf("%d rows after a rolled-back sweep, want 2", rows)
		}
	})
}
