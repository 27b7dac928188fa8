package ledger_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/opledger/opledger/internal/keybirth"
	"github.com/opledger/opledger/internal/testkit/testdb"
	"github.com/opledger/opledger/ledger"
)

// TestPartitionMissingBucket: PostgreSQL's partitioned layout has no
// DEFAULT partition, so a claim of a key whose birth no bucket holds (a
// ledger of a long retention on a new table, or one whose sweep has not
// run for days) fails with a *ledger.DBError that names the sweep, and
// nothing is stored; once Sweep has created the buckets of the whole
// window, the same claim is acquired.
func TestPartitionMissingBucket(t *testing.T) {
	t.Parallel()
	forEachPartitioned(t, 4, func(t *testing.T, e *env) {
		ctx := context.Background()
		l := e.store(t, ledger.WithRetention(30*24*time.Hour))
		id := testdb.ID(t, "tenant-a", method, keybirth.New(time.Now().Add(-10*24*time.Hour)))
		req := ledger.ClaimRequest{Identity: id, Fingerprint: fp("ten days old")}
		claim := func() (*ledger.Claim, error) {
			tx, err := e.DB.BeginTx(ctx, nil)
			if err != nil {
				t.Fatal(err)
			}
			defer tx.Rollback()
			c, err := l.Claim(ctx, tx, req)
			if err != nil {
				return c, err
			}
			return c, tx.Commit()
		}
		_, err := claim()
		var dbe *ledger.DBError
		if !errors.As(err, &dbe) || !strings.Contains(err.Error(), "opledger sweep") {
			t.Fatalf("claim of a key with no bucket: %v, want a *ledger.DBError naming the sweep", err)
		}
		if _, err := l.Lookup(ctx, e.DB, id); !errors.Is(err, ledger.ErrNotFound) {
			t.Fatalf("lookup after the failed claim: %v, want ErrNotFound", err)
		}
		if _, err := l.Sweep(ctx, e.DB, 100); err != nil {
			t.Fatalf("sweep: %v", err)
		}
		c, err := claim()
		if err != nil || c.Outcome != ledger.Acquired {
			t.Fatalf("claim after the sweep: %+v, %v; want Acquired", c, err)
		}
	}, "postgres")
}

// forEachPartitioned is forEachTarget for the targets whose ledger table
// the migrations partitioned by birth; the others skip.
func forEachPartitioned(t *testing.T, maxConns int, f func(t *testing.T, e *env), families ...string) {
	t.Helper()
	forEachTarget(t, maxConns, func(t *testing.T, e *env) {
		if !testdb.Partitioned(t, e.DB, e.Dialect, e.Table) {
			t.Skip("the table is not partitioned by birth")
		}
		f(t, e)
	}, families...)
}
