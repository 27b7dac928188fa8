package ledger_test

import (
	"context"
	"database/sql"
	"errors"
	"slices"
	"strings"
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
	forEachPartitioned(t, 4, func(t *testing.T, e *env) {
		ctx := context.Background()
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

// TestBucketWidth: with ledger.WithBucketWidth(6h), Sweep on a table the
// migrations made (daily buckets) goes on after its last bucket with
// buckets of six hours, contiguous, for at least a day past the clock; a
// key born in one is claimed into it. Without a width, the sweep's
// follows the retention (a 24th of it: three hours for three days), and
// so does a table's. A width that neither divides a day nor is whole
// days is refused.
func TestBucketWidth(t *testing.T) {
	t.Parallel()
	for _, d := range []time.Duration{0, -time.Hour, 30 * time.Second, 7 * time.Minute, 36 * time.Hour} {
		if _, err := ledger.New(sqlite.New(), ledger.WithBucketWidth(d)); !errors.Is(err, ledger.ErrInvalid) {
			t.Errorf("WithBucketWidth(%v): %v, want ErrInvalid", d, err)
		}
	}
	for r, want := range map[time.Duration]time.Duration{
		time.Second:          time.Hour,
		time.Hour:            time.Hour,
		24 * time.Hour:       time.Hour,
		47 * time.Hour:       time.Hour,
		48 * time.Hour:       2 * time.Hour,
		72 * time.Hour:       3 * time.Hour,
		5 * 24 * time.Hour:   4 * time.Hour,
		7 * 24 * time.Hour:   6 * time.Hour,
		9 * 24 * time.Hour:   8 * time.Hour,
		12 * 24 * time.Hour:  12 * time.Hour,
		23 * 24 * time.Hour:  12 * time.Hour,
		30 * 24 * time.Hour:  24 * time.Hour,
		90 * 24 * time.Hour:  3 * 24 * time.Hour,
		365 * 24 * time.Hour: 15 * 24 * time.Hour,
	} {
		if got := ledger.DefaultBucketWidth(r); got != want {
			t.Errorf("the bucket width for a retention of %v: %v, want %v", r, got, want)
		}
	}
	forEachPartitioned(t, 4, func(t *testing.T, e *env) {
		ctx := context.Background()
		// buckets checks the buckets from from on: contiguous, w wide
		// but the first, which ends at the next boundary of w, reaching
		// at least a day past now; it returns where they end.
		buckets := func(from int64, w time.Duration, now time.Time) int64 {
			t.Helper()
			end := from
			for _, p := range testdb.Partitions(t, e.DB, e.Dialect, e.Table) {
				if p.Kind != dialectkit.Bucket || p.From < from {
					continue
				}
				if next := end - end%w.Microseconds() + w.Microseconds(); p.From != end || p.To != next {
					t.Fatalf("bucket %s [%d, %d) after %d: want [%d, %d)", p.Name, p.From, p.To, from, end, next)
				}
				end = p.To
			}
			if ahead := time.UnixMicro(end).Sub(now); ahead < 24*time.Hour {
				t.Fatalf("buckets of %v reach %v past the clock, want at least a day", w, ahead)
			}
			return end
		}
		var last int64
		for _, p := range testdb.Partitions(t, e.DB, e.Dialect, e.Table) {
			if p.Kind == dialectkit.Bucket {
				last = max(last, p.To)
			}
		}
		now := time.UnixMicro(last).Add(-12 * time.Hour)
		l := e.store(t, ledger.WithBucketWidth(6*time.Hour), ledger.WithClock(func() time.Time { return now }))
		if _, err := l.Sweep(ctx, e.DB, 100); err != nil {
			t.Fatal(err)
		}
		end := buckets(last, 6*time.Hour, now)
		birth := time.UnixMicro(last).Add(7 * time.Hour)
		if p, ok := dialectkit.BucketOf(testdb.Partitions(t, e.DB, e.Dialect, e.Table), birth); !ok || p.To-p.From != 6*time.Hour.Microseconds() {
			t.Fatalf("the bucket of a birth after the daily ones: %+v (found: %v), want six hours'", p, ok)
		}
		born := e.store(t, ledger.WithBucketWidth(6*time.Hour), ledger.WithClock(func() time.Time { return birth }))
		id := testdb.ID(t, "tenant-a", method, keybirth.New(birth))
		if c, err := claimOnce(t, e, born, id, fp("six hours"), "done"); err != nil || !c.Acquired() {
			t.Fatalf("claim of a key born in a bucket of six hours: %+v, %v", c, err)
		}
		if n := e.rowsOf(t, id); n != 1 {
			t.Fatalf("%d entries of the key, want 1", n)
		}

		now = time.UnixMicro(end).Add(-12 * time.Hour)
		l = e.store(t, ledger.WithRetention(72*time.Hour), ledger.WithClock(func() time.Time { return now }))
		if _, err := l.Sweep(ctx, e.DB, 100); err != nil {
			t.Fatal(err)
		}
		buckets(end, 3*time.Hour, now)
	}, "postgres", "mysql")
}

// TestPartitionDropMovesOut: on MariaDB a sweep drops a bucket by moving
// it out into a table of its own and dropping that, so no table of the
// move is left; a table such a move left behind (a sweep that died
// between its two statements) goes with the next drop, and tables whose
// names only look alike are kept (on TiDB, which drops the partition and
// moves nothing out, every such table is kept). The entries of the
// dropped bucket are gone; the other buckets' are kept.
func TestPartitionDropMovesOut(t *testing.T) {
	t.Parallel()
	forEachPartitioned(t, 4, func(t *testing.T, e *env) {
		ctx := context.Background()
		today := time.Now().UTC().Truncate(24 * time.Hour)
		old, kept := testdb.ID(t, "tenant-a", method, keybirth.New(today.Add(-12*time.Hour))), testdb.ID(t, "tenant-a", method, keybirth.New(today.Add(time.Hour)))
		for _, id := range []ledger.Identity{old, kept} {
			born, _ := id.Birth()
			s := e.store(t, ledger.WithClock(func() time.Time { return born }))
			if c, err := claimOnce(t, e, s, id, fp("moved out"), "done"); err != nil || !c.Acquired() {
				t.Fatalf("claim: %+v, %v", c, err)
			}
		}
		leftover := e.Table + "_p20200101_dropping"
		alike := []string{e.Table + "_notes_dropping", e.Table + "_p2020x_dropping", e.Table + "_p20200101_dropped"}
		for _, name := range append([]string{leftover}, alike...) {
			q := e.Dialect.QuoteIdent(name)
			if _, err := e.DB.ExecContext(ctx, "CREATE TABLE "+q+" (a INT)"); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _, _ = e.DB.ExecContext(context.Background(), "DROP TABLE IF EXISTS "+q) })
		}
		// Past the old bucket's drop time (its end, the day's retention
		// and the skew), before the next one's.
		at := today.Add(24*time.Hour + 2*time.Minute)
		if _, err := e.store(t, ledger.WithClock(func() time.Time { return at })).Sweep(ctx, e.DB, 100); err != nil {
			t.Fatal(err)
		}
		tables := map[string]bool{}
		rows, err := e.DB.QueryContext(ctx, "SELECT TABLE_NAME FROM information_schema.TABLES WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME LIKE ?", e.Table+"%")
		if err != nil {
			t.Fatal(err)
		}
		for rows.Next() {
			var name string
			if err := rows.Scan(&name); err != nil {
				t.Fatal(err)
			}
			tables[name] = true
		}
		if err := rows.Err(); err != nil {
			t.Fatal(err)
		}
		rows.Close()
		if testdb.TiDB(e.Dialect) {
			// TiDB's bucket goes by DROP PARTITION: nothing is moved out,
			// so no table named like a move's is the sweep's to drop.
			alike = append(alike, leftover)
		}
		for name := range tables {
			if strings.HasSuffix(name, "_dropping") && !slices.Contains(alike, name) {
				t.Errorf("table %s left after the sweep", name)
			}
		}
		for _, name := range alike {
			if !tables[name] {
				t.Errorf("the sweep dropped %s, which is not one of its own", name)
			}
		}
		if n := e.rowsOf(t, old); n != 0 {
			t.Errorf("%d entries of the dropped bucket's key, want 0", n)
		}
		if n := e.rowsOf(t, kept); n != 1 {
			t.Errorf("%d entries of the kept bucket's key, want 1", n)
		}
	}, "mysql")
}

// TestGenericPlansLockOnePartition: under generic plans (what a driver's
// cached prepared statement runs, forced here with plan_cache_mode), a
// claim, its completion, a replay's read and a lookup on PostgreSQL's
// partitioned table lock the one partition of the key's birth, not every
// partition: PostgreSQL locks each partition a generic plan names at each
// execution, which cost claims on the partitioned table about a third of
// their rate. The statements name their hour of birth as literals; the
// one-statement claim (WithOneStatementClaim) too.
func TestGenericPlansLockOnePartition(t *testing.T) {
	t.Parallel()
	forEachPartitioned(t, 2, func(t *testing.T, e *env) {
		ctx := context.Background()
		if n := len(testdb.Partitions(t, e.DB, e.Dialect, e.Table)); n < 3 {
			t.Fatalf("%d partitions: want several for the test to mean something", n)
		}
		one, err := ledger.New(e.Dialect, ledger.WithTable(e.Table), ledger.WithOneStatementClaim())
		if err != nil {
			t.Fatal(err)
		}
		born := time.Now().Add(-time.Minute)
		locked := func(tx *sql.Tx) int {
			t.Helper()
			var n int
			if err := tx.QueryRowContext(ctx, `SELECT count(DISTINCT l.relation) FROM pg_locks l JOIN pg_inherits i ON i.inhrelid = l.relation
				WHERE l.pid = pg_backend_pid() AND i.inhparent = to_regclass($1)`, e.Dialect.QuoteIdent(e.Table)).Scan(&n); err != nil {
				t.Fatal(err)
			}
			return n
		}
		for _, form := range []struct {
			name string
			l    *ledger.Store
		}{{"", e.l}, {"OneStatement", one}} {
			id := testdb.ID(t, "tenant-a", method+form.name, keybirth.New(born))
			for round, step := range []string{"claim and complete", "replay", "lookup"} {
				step = form.name + " " + step
				tx, err := e.DB.BeginTx(ctx, nil)
				if err != nil {
					t.Fatal(err)
				}
				if _, err := tx.ExecContext(ctx, "SET LOCAL plan_cache_mode = force_generic_plan"); err != nil {
					t.Fatal(err)
				}
				switch round {
				case 0, 1:
					c, err := form.l.Claim(ctx, tx, ledger.ClaimRequest{Identity: id, Fingerprint: fp("generic")})
					if err == nil && c.Acquired() {
						err = form.l.Complete(ctx, tx, c, ledger.Result{Response: []byte("done")})
					}
					if err != nil || c.Acquired() != (round == 0) {
						t.Fatalf("%s: %+v, %v", step, c, err)
					}
				case 2:
					if _, err := form.l.Lookup(ctx, tx, id); err != nil {
						t.Fatalf("%s: %v", step, err)
					}
				}
				if n := locked(tx); n != 1 {
					t.Errorf("%s under generic plans locked %d partitions, want the key's alone", step, n)
				}
				if err := tx.Commit(); err != nil {
					t.Fatal(err)
				}
			}
		}
	}, "postgres")
}

// TestConcurrentSweeps: four sweeps of one table at once (servers that
// each sweep on a schedule), with a clock three days on, when most of the
// migration's buckets are due: each ends without an error or with
// ErrInProgress (a bucket another sweep was dropping, left to the next
// one), never with a deadlock or a catalog conflict between them; one
// more sweep then leaves no due bucket, the buckets reach a day past the
// clock, and no table of a dropped bucket is left behind (PostgreSQL: a
// detached one; MariaDB: one moved out).
func TestConcurrentSweeps(t *testing.T) {
	t.Parallel()
	const sweepers = 4
	forEachPartitioned(t, sweepers+2, func(t *testing.T, e *env) {
		ctx := context.Background()
		now := time.Now().Add(72 * time.Hour)
		l := e.store(t, ledger.WithClock(func() time.Time { return now }))
		errs := make(chan error, sweepers)
		start := make(chan struct{})
		for range sweepers {
			go func() {
				<-start
				_, err := l.Sweep(ctx, e.DB, 100)
				errs <- err
			}()
		}
		close(start)
		for range sweepers {
			if err := <-errs; err != nil && !errors.Is(err, ledger.ErrInProgress) {
				t.Errorf("a sweep beside three others: %v", err)
			}
		}
		if _, err := l.Sweep(ctx, e.DB, 100); err != nil {
			t.Fatalf("the sweep after them: %v", err)
		}
		var end int64
		for _, p := range testdb.Partitions(t, e.DB, e.Dialect, e.Table) {
			if p.Kind != dialectkit.Bucket {
				continue
			}
			if !time.UnixMicro(p.To).Add(24*time.Hour + time.Minute).After(now) {
				t.Errorf("bucket %s, due at %v, is still there", p.Name, time.UnixMicro(p.To).Add(24*time.Hour+time.Minute))
			}
			end = max(end, p.To)
		}
		if ahead := time.UnixMicro(end).Sub(now); ahead < 24*time.Hour {
			t.Errorf("the buckets reach %v past the clock, want at least a day", ahead)
		}
		left := "SELECT COUNT(*) FROM information_schema.TABLES WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME LIKE CONCAT(?, '%_dropping')"
		if e.Dialect.Name() == "postgres" {
			left = "SELECT COUNT(*) FROM pg_class WHERE relname LIKE $1 || '%' AND relkind = 'r' AND NOT relispartition"
		}
		var n int
		if err := e.DB.QueryRowContext(ctx, left, e.Table+"_p").Scan(&n); err != nil {
			t.Fatal(err)
		}
		if n != 0 {
			t.Errorf("%d tables of dropped buckets left behind", n)
		}
	}, "postgres", "mysql")
}
