package ledger_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/opledger/opledger/dialects/sqlite"
	"github.com/opledger/opledger/internal/dialectkit"
	"github.com/opledger/opledger/internal/keybirth"
	"github.com/opledger/opledger/internal/testkit/testdb"
	"github.com/opledger/opledger/ledger"
)

// TestPartitionDropHonoursWrittenRetention: a sweeper whose retention is
// shorter than the servers' (an `opledger sweep` left at its default of a
// day beside servers that keep keys three days) does not drop a bucket
// whose entries were written to be kept longer: it reads their retention
// from a sample of the bucket (expires_at - born_at) and waits for it, so
// the key stays answered for the whole window the servers promised; once
// that retention and the skew have passed, the bucket is dropped.
func TestPartitionDropHonoursWrittenRetention(t *testing.T) {
	t.Parallel()
	forEachTarget(t, 4, func(t *testing.T, e *env) {
		ctx := context.Background()
		if !testdb.Partitioned(t, e.DB, e.Dialect, e.Table) {
			t.Skip("the table is not partitioned by birth")
		}
		const long = 72 * time.Hour
		today := time.Now().UTC().Truncate(24 * time.Hour)
		birth := today.Add(-12 * time.Hour) // yesterday: in the oldest bucket
		writer := e.store(t, ledger.WithRetention(long))
		id := testdb.ID(t, "tenant-a", method, keybirth.New(birth))
		if c, err := claimOnce(t, e, writer, id, fp("kept three days"), "done"); err != nil || !c.Acquired() {
			t.Fatalf("claim: %+v, %v", c, err)
		}
		bucket, ok := dialectkit.BucketOf(testdb.Partitions(t, e.DB, e.Dialect, e.Table), birth)
		if !ok {
			t.Fatal("no bucket holds the key's birth")
		}
		end := time.UnixMicro(bucket.To)
		bucketHere := func() bool {
			for _, p := range testdb.Partitions(t, e.DB, e.Dialect, e.Table) {
				if p.Name == bucket.Name {
					return true
				}
			}
			return false
		}
		sweepAt := func(at time.Time) {
			t.Helper()
			s := e.store(t, ledger.WithClock(func() time.Time { return at }))
			if _, err := s.Sweep(ctx, e.DB, 100); err != nil {
				t.Fatalf("sweep at %v: %v", at, err)
			}
		}
		// Past the bucket's end + a day + the skew: the sweeper's own
		// retention would drop it.
		sweepAt(end.Add(24*time.Hour + 2*time.Minute))
		if !bucketHere() {
			t.Fatal("a sweeper with a day's retention dropped a bucket whose entries were written for three days")
		}
		if _, err := writer.Lookup(ctx, e.DB, id); err != nil {
			t.Fatalf("lookup after that sweep: %v, want the entry", err)
		}
		sweepAt(end.Add(long + 2*time.Minute))
		if bucketHere() {
			t.Fatal("the bucket is still there past its entries' retention and the skew")
		}
	}, "postgres", "mysql")
}

// TestBucketWidth: with ledger.WithBucketWidth(time.Hour), Sweep on a
// table the migrations made (daily buckets) goes on after its last daily
// bucket with hourly ones, contiguous, for at least a day past the clock;
// a key born in one is claimed into it. A width that neither divides a
// day nor is whole days is refused.
func TestBucketWidth(t *testing.T) {
	t.Parallel()
	for _, d := range []time.Duration{0, -time.Hour, 30 * time.Second, 7 * time.Minute, 36 * time.Hour} {
		if _, err := ledger.New(sqlite.New(), ledger.WithBucketWidth(d)); !errors.Is(err, ledger.ErrInvalid) {
			t.Errorf("WithBucketWidth(%v): %v, want ErrInvalid", d, err)
		}
	}
	forEachTarget(t, 4, func(t *testing.T, e *env) {
		ctx := context.Background()
		if !testdb.Partitioned(t, e.DB, e.Dialect, e.Table) {
			t.Skip("the table is not partitioned by birth")
		}
		parts := testdb.Partitions(t, e.DB, e.Dialect, e.Table)
		var last int64
		for _, p := range parts {
			if p.Kind == dialectkit.Bucket {
				last = max(last, p.To)
			}
		}
		now := time.UnixMicro(last).Add(-12 * time.Hour)
		l := e.store(t, ledger.WithBucketWidth(time.Hour), ledger.WithClock(func() time.Time { return now }))
		if _, err := l.Sweep(ctx, e.DB, 100); err != nil {
			t.Fatal(err)
		}
		hourly, end := 0, last
		for _, p := range testdb.Partitions(t, e.DB, e.Dialect, e.Table) {
			if p.Kind != dialectkit.Bucket || p.From < last {
				continue
			}
			if p.From != end || p.To-p.From != time.Hour.Microseconds() {
				t.Fatalf("bucket %s [%d, %d) after the daily ones: want the hour from %d", p.Name, p.From, p.To, end)
			}
			hourly, end = hourly+1, p.To
		}
		if ahead := time.UnixMicro(end).Sub(now); ahead < 24*time.Hour {
			t.Fatalf("%d hourly buckets reach %v past the clock, want at least a day", hourly, ahead)
		}
		birth := time.UnixMicro(last).Add(90 * time.Minute)
		if p, ok := dialectkit.BucketOf(testdb.Partitions(t, e.DB, e.Dialect, e.Table), birth); !ok || p.To-p.From != time.Hour.Microseconds() {
			t.Fatalf("the bucket of a birth after the daily ones: %+v (found: %v), want an hour's", p, ok)
		}
		born := e.store(t, ledger.WithBucketWidth(time.Hour), ledger.WithClock(func() time.Time { return birth }))
		id := testdb.ID(t, "tenant-a", method, keybirth.New(birth))
		if c, err := claimOnce(t, e, born, id, fp("hourly"), "done"); err != nil || !c.Acquired() {
			t.Fatalf("claim of a key born in an hourly bucket: %+v, %v", c, err)
		}
		if n := e.rowsOf(t, id); n != 1 {
			t.Fatalf("%d entries of the key, want 1", n)
		}
	}, "postgres", "mysql")
}
