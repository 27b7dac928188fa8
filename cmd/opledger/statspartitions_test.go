package main

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/opledger/opledger/internal/dialectkit"
	"github.com/opledger/opledger/internal/keybirth"
	"github.com/opledger/opledger/ledger"
)

// TestStatsPartitionsWrittenRetention: on a table partitioned by birth,
// stats lists the buckets and gives each the drop time the sweep honours:
// a bucket whose entries were written to be kept three days is droppable
// three days (and the skew) after its end, whatever --retention says, and
// says how long its entries were written to be kept; the others a
// --retention and the skew after theirs. sweep --retention keeps a bucket
// the default would drop (PostgreSQL, where a bucket can be made in the
// past).
func TestStatsPartitionsWrittenRetention(t *testing.T) {
	for family, dsn := range operatorTargets(t) {
		if family == "sqlite" {
			continue
		}
		t.Run(family, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			e := newOpEnv(t, family, dsn)
			today := time.Now().UTC().Truncate(24 * time.Hour)
			born := today.Add(-12 * time.Hour)
			l, err := ledger.New(e.tg.dialect, ledger.WithTable(e.table), ledger.WithRetention(72*time.Hour), ledger.WithClock(func() time.Time { return born }))
			if err != nil {
				t.Fatal(err)
			}
			id, err := ledger.NewIdentity("svc-a", opMethod, keybirth.New(born))
			if err != nil {
				t.Fatal(err)
			}
			tx, err := e.db.BeginTx(ctx, nil)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := l.Claim(ctx, tx, ledger.ClaimRequest{Identity: id, Fingerprint: ledger.FingerprintOf([]byte("kept"))}); err != nil {
				t.Fatal(err)
			}
			if err := tx.Commit(); err != nil {
				t.Fatal(err)
			}

			code, out, errs := runCmd(t, "stats", "--dsn", dsn, "--table", e.table, "--json")
			if code != 0 {
				t.Fatalf("stats --json: %d %s", code, errs)
			}
			var s stats
			if err := json.Unmarshal([]byte(out), &s); err != nil {
				t.Fatalf("stats --json: %v\n%s", err, out)
			}
			buckets := 0
			for _, p := range s.Partitions {
				if p.Kind != "bucket" {
					continue
				}
				buckets++
				want, written := p.BornBefore.Add(24*time.Hour+time.Minute), ""
				if (p.BornFrom == nil || !p.BornFrom.After(born)) && born.Before(*p.BornBefore) {
					want, written = p.BornBefore.Add(72*time.Hour+time.Minute), "72h0m0s"
				}
				if !p.DroppableAt.Equal(want) || p.WrittenRetention != written {
					t.Errorf("bucket %s: droppable at %v, written retention %q; want %v and %q", p.Name, p.DroppableAt, p.WrittenRetention, want, written)
				}
			}
			if buckets == 0 {
				t.Fatalf("stats lists no bucket:\n%s", out)
			}
			code, out, _ = runCmd(t, "stats", "--dsn", dsn, "--table", e.table)
			if code != 0 || !strings.Contains(out, "written to be kept 72h0m0s, droppable at "+today.Add(72*time.Hour+time.Minute).Format(time.RFC3339)) {
				t.Errorf("stats: %d, want the bucket written to be kept 72h in\n%s", code, out)
			}

			if family != "postgres" {
				return
			}
			// A bucket of three days ago, empty: the default retention
			// drops it; --retention 100h keeps it.
			from := today.Add(-72 * time.Hour)
			pt := e.tg.dialect.(dialectkit.Partitioner)
			if _, err := pt.CreatePartition(ctx, e.db, e.table, "p"+from.Format("20060102"), from.UnixMicro(), from.Add(24*time.Hour).UnixMicro()); err != nil {
				t.Fatal(err)
			}
			old := func() bool {
				parts, _, err := pt.Partitions(ctx, e.db, e.table)
				if err != nil {
					t.Fatal(err)
				}
				_, ok := dialectkit.BucketOf(parts, from)
				return ok
			}
			if code, out, errs := runCmd(t, "sweep", "--dsn", dsn, "--table", e.table, "--retention", "100h"); code != 0 || !old() {
				t.Fatalf("sweep --retention 100h: %d %q %q; the bucket of three days ago is there: %v, want it kept", code, out, errs, old())
			}
			if code, out, errs := runCmd(t, "sweep", "--dsn", dsn, "--table", e.table); code != 0 || old() {
				t.Fatalf("sweep: %d %q %q; the bucket of three days ago is there: %v, want it dropped", code, out, errs, old())
			}
		})
	}
}
