package ledger_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/opledger/opledger/internal/dialectkit"
	"github.com/opledger/opledger/internal/keybirth"
	"github.com/opledger/opledger/internal/testkit/testdb"
	"github.com/opledger/opledger/ledger"
)

// envPartitionRows gates BenchmarkPartitionDrop: the number of entries
// its tables hold (10,000,000 in the recorded figures). Without it the
// benchmark skips, so CI never loads them.
const envPartitionRows = "OPLEDGER_PARTITION_ROWS"

// partitionLoadSQL fills a ledger table with entries lo..hi ($1, $2) of
// n ($3) whose births spread evenly over the two days from $4 (Unix µs):
// half in the bucket of the day before the load, half in the load's day.
// The ids are digests of the entry's number: no claim replays them.
var partitionLoadSQL = map[string]string{
	"postgres": `INSERT INTO %[1]s (id, caller, method, request_fp, code, response, response_type, created_at, completed_at, expires_at, born_at)
SELECT sha256(int8send(i)), 'principal:svc-' || (i %% 64), '/pay.v1.Payments/Transfer', sha256(int8send(-i)), 0,
       substring(sha256(int8send(i + 1)) || sha256(int8send(i + 2)) from 1 for 48), 'pay.v1.TransferReply',
       b, b + 2000, b + 86400000000, b
FROM (SELECT i, $4::bigint + i * (172800000000 / $3::bigint) AS b FROM generate_series($1::bigint, $2::bigint) AS i) AS g`,
	"mysql": `INSERT INTO %[1]s (id, caller, method, request_fp, code, response, response_type, created_at, completed_at, expires_at, born_at)
SELECT UNHEX(SHA2(CONCAT('e', i), 256)), CONCAT('principal:svc-', i %% 64), '/pay.v1.Payments/Transfer', UNHEX(SHA2(CONCAT('f', i), 256)), 0,
       LEFT(UNHEX(CONCAT(SHA2(CONCAT('r', i), 256), SHA2(CONCAT('s', i), 256))), 48), 'pay.v1.TransferReply',
       b, b + 2000, b + 86400000000, b
FROM (SELECT i, ? + i * (172800000000 DIV ?) AS b FROM (SELECT ? + a.n * 10000 + c.n * 100 + d.n AS i
      FROM seq100 a, seq100 c, seq100 d WHERE ? + a.n * 10000 + c.n * 100 + d.n <= ?) s) g`,
}

// envPartitionWidth sets BenchmarkPartitionDrop's bucket width (a Go
// duration that divides a day; an hour when unset, the sweep's width for
// the default retention, so a table's layout in steady state): the
// migrated table's empty daily buckets are replaced by buckets of that
// width over the four days the benchmark's births need.
const envPartitionWidth = "OPLEDGER_PARTITION_WIDTH"

// rebucket replaces the empty buckets of the freshly migrated table by
// buckets width wide covering the four days from t0, as a table made with
// narrower buckets has them.
func rebucket(b *testing.B, db *sql.DB, tg testdb.Target, table string, t0 time.Time, width time.Duration) {
	b.Helper()
	ctx := context.Background()
	pt := tg.Dialect.(dialectkit.Partitioner)
	parts, ok, err := pt.Partitions(ctx, db, table)
	if err != nil || !ok {
		b.Fatalf("partitions of %s: %v (partitioned: %v)", table, err, ok)
	}
	for _, p := range parts {
		if p.Kind == dialectkit.Bucket {
			if err := pt.DropPartition(ctx, db, table, p); err != nil {
				b.Fatal(err)
			}
		}
	}
	for a := t0; a.Before(t0.Add(96 * time.Hour)); a = a.Add(width) {
		if _, err := pt.CreatePartition(ctx, db, table, "p"+a.Format("20060102t150405"), a.UnixMicro(), a.Add(width).UnixMicro()); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkPartitionDrop measures retention by partition on a table of
// OPLEDGER_PARTITION_ROWS entries born over two days (the oldest bucket
// droppable: an hour's, or OPLEDGER_PARTITION_WIDTH's; a day's holds half
// of them), against an unpartitioned table of the same
// entries, 8 workers claiming new UUIDv7 keys (Claim, Complete, COMMIT)
// throughout, in one run:
//
//	claims/s partitioned     claims on the partitioned table, nothing else running (2 × 5 s)
//	claims/s unpartitioned   the same on the unpartitioned table (migration 00005's Down),
//	                         alternating with the partitioned runs
//	drop s                   Store.Sweep with a clock past the oldest bucket's drop time: it
//	                         drops that bucket and creates the coming ones
//	claims/s during drop     claims completed while that Sweep ran, per second of it
//	during reference ddl     the same ratio while an unrelated empty table is created and
//	                         dropped (five times, in a 10 s run of its own before the drop's):
//	                         what any change of the catalog costs the claims over its own
//	                         short window
//	second of drop           the drop's ratio over the second centred on it (its own window
//	                         when it lasts longer)
//	longest claim ms drop    the longest claim that overlapped the drop, beside the 99th
//	                         percentile of the partitioned runs without it
//
// It runs once whatever b.N; the tables are dropped at the end.
//
//	OPLEDGER_PARTITION_ROWS=10000000 go test -run '^$' -bench BenchmarkPartitionDrop -benchtime 1x -timeout 2h ./ledger/
func BenchmarkPartitionDrop(b *testing.B) {
	v := os.Getenv(envPartitionRows)
	if v == "" {
		b.Skipf("set %s (10000000 for the recorded figures) to load the tables", envPartitionRows)
	}
	rows, err := strconv.ParseInt(v, 10, 64)
	if err != nil || rows < 1000 {
		b.Fatalf("%s=%q: want a number of entries of at least 1000", envPartitionRows, v)
	}
	for _, tg := range scaleTargets() {
		if tg.Name != "postgres/pgx" && os.Getenv("OPLEDGER_PARTITION_MYSQL") == "" && tg.Name == "mysql" {
			continue // MariaDB's load of 10M takes long: opt in
		}
		b.Run(tg.Name, func(b *testing.B) {
			ctx := context.Background()
			db := tg.Open(b, 12)
			family := "postgres"
			if tg.Dialect.Name() != "postgres" {
				family = "mysql"
			}
			day := 24 * time.Hour
			t0 := time.Now().UTC().Truncate(day).Add(-day)
			part := testdb.NewTable(b, db, tg.Dialect)
			// Empty it before the migrations' Down (registered first, so
			// run after this), whose 00005 would copy every entry back in
			// one statement.
			b.Cleanup(func() { _, _ = db.ExecContext(context.Background(), "TRUNCATE TABLE "+tg.Dialect.QuoteIdent(part)) })
			l, err := ledger.New(tg.Dialect, ledger.WithTable(part))
			if err != nil {
				b.Fatal(err)
			}
			if _, err := l.Sweep(ctx, db, 1000); err != nil {
				b.Fatal(err)
			}
			width := time.Hour
			if v := os.Getenv(envPartitionWidth); v != "" {
				if width, err = time.ParseDuration(v); err != nil || width <= 0 || day%width != 0 {
					b.Fatalf("%s=%q: want a duration that divides a day", envPartitionWidth, v)
				}
			}
			rebucket(b, db, tg, part, t0, width)
			start := time.Now()
			loadPartition(b, db, tg, family, part, rows, t0)
			b.Logf("%s: loaded %d entries in %v", tg.Name, rows, time.Since(start).Round(time.Second))
			unpart := testdb.NewTable(b, db, tg.Dialect)
			unpartition(b, &env{Env: &testdb.Env{DB: db, Dialect: tg.Dialect, Table: unpart}})
			start = time.Now()
			if _, err := db.ExecContext(ctx, "INSERT INTO "+tg.Dialect.QuoteIdent(unpart)+" SELECT * FROM "+tg.Dialect.QuoteIdent(part)); err != nil {
				b.Fatal(err)
			}
			b.Logf("%s: copied them to the unpartitioned table in %v", tg.Name, time.Since(start).Round(time.Second))
			analyze := "ANALYZE "
			if family == "mysql" {
				analyze = "ANALYZE TABLE "
			}
			for _, t := range []string{part, unpart} {
				if _, err := db.ExecContext(ctx, analyze+tg.Dialect.QuoteIdent(t)); err != nil {
					b.Fatal(err)
				}
			}
			lu, err := ledger.New(tg.Dialect, ledger.WithTable(unpart))
			if err != nil {
				b.Fatal(err)
			}
			if family == "postgres" {
				// The load left gigabytes of WAL to a checkpoint: take it
				// now, so that its writes fall in neither table's runs.
				if _, err := db.ExecContext(ctx, "CHECKPOINT"); err != nil {
					b.Fatal(err)
				}
			}
			// Alternately, twice each, in the order P U U P, so that
			// neither table has the warmer cache or the quieter machine
			// (a drift over the four runs cancels out).
			const period = 10 * time.Second
			var rateP, rateU float64
			var p99P time.Duration
			for _, st := range []*ledger.Store{l, lu, lu, l} {
				r := claimFor(b, db, st, period/2, nil)
				if st == l {
					rateP += r.rate / 2
					p99P = max(p99P, r.p99)
				} else {
					rateU += r.rate / 2
				}
			}
			// The reference: any change of the catalog, here an unrelated
			// empty table created and dropped, once a second for the first
			// 5 s of 10 s of claims, so that the drop's dip can be read
			// against what every DDL costs the claims on this machine over
			// its own short window.
			ref := tg.Dialect.QuoteIdent(part + "_ref")
			refRun := claimFor(b, db, l, period, func(mark func(time.Duration)) error {
				for range 5 {
					time.Sleep(time.Second)
					s := time.Now()
					for _, q := range []string{"CREATE TABLE " + ref + " (id INT PRIMARY KEY)", "DROP TABLE " + ref} {
						if _, err := db.ExecContext(ctx, q); err != nil {
							return err
						}
					}
					mark(time.Since(s))
				}
				return nil
			})
			// The drop: a clock past the oldest bucket's drop time (its end,
			// t0 + the width, plus the retention and the skew), before the
			// next one's.
			dropAt := t0.Add(width + day + 2*time.Minute)
			sweeper, err := ledger.New(tg.Dialect, ledger.WithTable(part), ledger.WithClock(func() time.Time { return dropAt }))
			if err != nil {
				b.Fatal(err)
			}
			var dropTook time.Duration
			var dropped int64
			drop := claimFor(b, db, l, period, func(mark func(time.Duration)) error {
				time.Sleep(3 * time.Second)
				s := time.Now()
				n, err := sweeper.Sweep(ctx, db, 1000)
				dropTook, dropped = time.Since(s), n
				mark(dropTook)
				if errors.Is(err, ledger.ErrInProgress) {
					err = nil // entries held by claims, left for the next sweep
				}
				return err
			})
			b.ReportMetric(rateP, "claims/s-partitioned")
			b.ReportMetric(rateU, "claims/s-unpartitioned")
			b.ReportMetric(rateP/rateU, "partitioned/unpartitioned")
			b.ReportMetric(dropTook.Seconds(), "drop-s")
			b.ReportMetric(drop.inside, "claims/s-during-drop")
			b.ReportMetric(drop.inside/rateP, "during-drop/without")
			b.ReportMetric(drop.second/rateP, "second-of-drop/without")
			b.ReportMetric(refRun.inside/rateP, "during-reference-ddl/without")
			b.ReportMetric(float64(drop.longest.Microseconds())/1000, "longest-claim-ms-drop")
			b.ReportMetric(float64(p99P.Microseconds())/1000, "p99-claim-ms-without")
			b.Logf("%s, %d entries: claims %.0f/s partitioned, %.0f/s unpartitioned (%.3f×); drop of the oldest bucket (~%d entries) %v, claims during it %.0f/s (%.3f× without), over the second that holds it %.0f/s (%.3f×), over the whole 10 s with it %.0f/s",
				tg.Name, rows, rateP, rateU, rateP/rateU, dropped, dropTook.Round(time.Millisecond), drop.inside, drop.inside/rateP, drop.second, drop.second/rateP, drop.rate)
			b.Logf("%s: the reference DDL (an unrelated table created and dropped, 5 times) %v in all, claims during it %.0f/s (%.3f× without); the longest claim that overlapped the drop %v, the reference %v; claims' 99th percentile without either %v",
				tg.Name, refRun.window.Round(time.Millisecond), refRun.inside, refRun.inside/rateP, drop.longest.Round(time.Millisecond), refRun.longest.Round(time.Millisecond), p99P.Round(time.Millisecond))
		})
	}
}

// loadPartition fills table with rows entries born over the two days
// from t0, in chunks of a million.
func loadPartition(b *testing.B, db *sql.DB, tg testdb.Target, family, table string, rows int64, t0 time.Time) {
	b.Helper()
	ctx := context.Background()
	q := fmt.Sprintf(partitionLoadSQL[family], tg.Dialect.QuoteIdent(table))
	if family == "mysql" {
		if _, err := db.ExecContext(ctx, "CREATE TABLE IF NOT EXISTS seq100 (n INT PRIMARY KEY)"); err != nil {
			b.Fatal(err)
		}
		if _, err := db.ExecContext(ctx, "INSERT IGNORE INTO seq100 WITH RECURSIVE s(n) AS (SELECT 0 UNION ALL SELECT n + 1 FROM s WHERE n < 99) SELECT n FROM s"); err != nil {
			b.Fatal(err)
		}
	}
	const chunk = 1_000_000
	for lo := int64(1); lo <= rows; lo += chunk {
		hi := min(lo+chunk-1, rows)
		var err error
		if family == "mysql" {
			_, err = db.ExecContext(ctx, q, t0.UnixMicro(), rows, lo, lo, hi)
		} else {
			_, err = db.ExecContext(ctx, q, lo, hi, rows, t0.UnixMicro())
		}
		if err != nil {
			b.Fatalf("load %d..%d: %v", lo, hi, err)
		}
	}
}

// claimRun is what claimFor measured.
type claimRun struct {
	// rate is the claims completed per second over the whole run.
	rate float64
	// inside is the rate of the claims that completed within the windows
	// the function given to claimFor marked, per second of them.
	inside float64
	// p99 is the 99th percentile of a claim's time (Claim, Complete,
	// COMMIT) over the whole run.
	p99 time.Duration
	// window is the length of the marked windows, summed.
	window time.Duration
	// second is the rate of the claims that completed in the seconds
	// centred on the marked windows (a window itself when it is longer).
	second float64
	// longest is the longest time of a claim that overlapped a marked
	// window (begun before it ended, ended after it began).
	longest time.Duration
}

// claimFor runs 8 workers claiming new UUIDv7 keys (Claim, Complete,
// COMMIT each) on l for period and measures them; with during set, it
// also runs it once meanwhile, and measures the claims that overlapped
// the windows it marks (mark(took) as a step ends: the took before now).
func claimFor(b *testing.B, db *sql.DB, l *ledger.Store, period time.Duration, during func(mark func(took time.Duration)) error) claimRun {
	b.Helper()
	ctx := context.Background()
	type span struct{ begin, end time.Time }
	var (
		mu    sync.Mutex
		spans []span
		wg    sync.WaitGroup
		stop  = make(chan struct{})
	)
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var mine []span
			for {
				select {
				case <-stop:
					mu.Lock()
					spans = append(spans, mine...)
					mu.Unlock()
					return
				default:
				}
				id, err := ledger.NewIdentity("principal:svc-bench", "/pay.v1.Payments/Transfer", keybirth.New(time.Now()))
				if err != nil {
					b.Error(err)
					return
				}
				begin := time.Now()
				err = inTx(db, func(tx *sql.Tx) error {
					c, err := l.Claim(ctx, tx, ledger.ClaimRequest{Identity: id, Fingerprint: fp("bench")})
					if err != nil {
						return err
					}
					return l.Complete(ctx, tx, c, ledger.Result{Response: benchResponse, TypeName: "pay.v1.TransferReply"})
				})
				if err != nil {
					b.Error(err)
					return
				}
				mine = append(mine, span{begin, time.Now()})
			}
		}()
	}
	start := time.Now()
	type window struct{ from, to time.Time }
	var (
		windows []window
		derr    error
		done    = make(chan struct{})
	)
	if during != nil {
		go func() {
			defer close(done)
			derr = during(func(took time.Duration) {
				to := time.Now()
				windows = append(windows, window{to.Add(-took), to})
			})
		}()
	} else {
		close(done)
	}
	time.Sleep(period)
	close(stop)
	wg.Wait()
	elapsed := time.Since(start)
	<-done
	if derr != nil {
		b.Fatalf("during: %v", derr)
	}
	r := claimRun{rate: float64(len(spans)) / elapsed.Seconds()}
	took := make([]time.Duration, 0, len(spans))
	for _, s := range spans {
		took = append(took, s.end.Sub(s.begin))
	}
	if len(took) > 0 {
		slices.Sort(took)
		r.p99 = took[len(took)*99/100]
	}
	if len(windows) == 0 {
		return r
	}
	var k, ks int
	var seconds time.Duration
	for _, w := range windows {
		secFrom, secTo := w.from, w.to
		if pad := (time.Second - w.to.Sub(w.from)) / 2; pad > 0 {
			secFrom, secTo = w.from.Add(-pad), w.to.Add(pad)
		}
		r.window += w.to.Sub(w.from)
		seconds += secTo.Sub(secFrom)
		for _, s := range spans {
			if !s.end.Before(w.from) && !s.end.After(w.to) {
				k++
			}
			if !s.end.Before(secFrom) && !s.end.After(secTo) {
				ks++
			}
			if s.begin.Before(w.to) && s.end.After(w.from) {
				r.longest = max(r.longest, s.end.Sub(s.begin))
			}
		}
	}
	r.inside = float64(k) / r.window.Seconds()
	r.second = float64(ks) / seconds.Seconds()
	return r
}
