package main

import (
	"context"
	"encoding/json"
	"fmt"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/opledger/opledger/internal/keybirth"
)

// TestStatsWindow: stats shows the window (the retention and clock skew
// given, and the birth before which keys are refused) and counts the
// entries by key birth, in its one scan, on every database; on a table
// without born_at (migration 00004 not applied) it says so instead of
// failing. No output holds a key.
func TestStatsWindow(t *testing.T) {
	for family, dsn := range operatorTargets(t) {
		t.Run(family, func(t *testing.T) {
			t.Parallel()
			e := newOpEnv(t, family, dsn)
			now := time.Now()
			var keys []string
			for i := range 2 {
				k := keybirth.New(now.Add(-time.Duration(i+1) * time.Minute))
				keys = append(keys, k)
				e.put(t, now.Add(-time.Duration(i+1)*time.Minute), "svc-a", opMethod, k, false)
			}
			for i := range 3 {
				k := fmt.Sprintf("random-key-%d-5f0c2e", i)
				keys = append(keys, k)
				e.put(t, now.Add(-time.Minute), "svc-b", opMethod, k, i == 0)
			}

			code, out, errs := runCmd(t, "stats", "--dsn", dsn, "--table", e.table, "--json", "--retention", "2h", "--clock-skew", "30s")
			if code != 0 {
				t.Fatalf("stats --json: %d %s", code, errs)
			}
			all := out
			var s stats
			if err := json.Unmarshal([]byte(out), &s); err != nil {
				t.Fatalf("stats --json: %v\n%s", err, out)
			}
			if s.Entries != 5 || s.WithBirth == nil || *s.WithBirth != 2 || s.WithoutBirth == nil || *s.WithoutBirth != 3 || s.BirthUnavailable != "" {
				t.Errorf("stats: %s\nwant 5 entries: 2 with a birth, 3 without", out)
			}
			if s.RetentionSeconds != 7200 || s.ClockSkewSeconds != 30 || s.WindowSeconds != 7170 {
				t.Errorf("stats window: %s\nwant retention 7200 s, skew 30 s, window 7170 s", out)
			}
			if d := now.Add(-7170 * time.Second).Sub(s.RefusedBornUntil); d < -time.Minute || d > time.Minute {
				t.Errorf("refused_born_before %v, want about %v", s.RefusedBornUntil, now.Add(-7170*time.Second))
			}

			// The defaults: 24 h, and the ledger's skew.
			code, out, errs = runCmd(t, "stats", "--dsn", dsn, "--table", e.table)
			all += out
			for _, want := range []string{"window", "23h59m0s  (retention 24h0m0s minus clock skew 1m0s", "refused as expired", "keys born before",
				"with a birth", "  2  (UUIDv7 keys", "without", "  3  (no readable birth"} {
				if code != 0 || !strings.Contains(out, want) {
					t.Errorf("stats: %d %s: want %q in\n%s", code, errs, want, out)
				}
			}
			code, out, _ = runCmd(t, "stats", "--dsn", dsn, "--table", e.table, "--retention", "10m")
			all += out
			if code != 0 || !strings.Contains(out, "9m0s  (retention 10m0s minus clock skew 1m0s") {
				t.Errorf("stats --retention 10m: %d\n%s", code, out)
			}

			for _, bad := range [][]string{{"--retention", "1h", "--clock-skew", "1h"}, {"--retention", "0s"}, {"--retention", "soon"}} {
				code, out, errs := runCmd(t, append([]string{"stats", "--dsn", dsn, "--table", e.table}, bad...)...)
				if code != 2 || out != "" || strings.Count(strings.TrimSuffix(errs, "\n"), "\n") != 0 {
					t.Errorf("stats %v: %d %q %q, want a one-line usage error", bad, code, out, errs)
				}
			}

			if family == "sqlite" {
				// A table the migration 00004 has not reached.
				if _, err := e.db.ExecContext(context.Background(), "ALTER TABLE "+e.table+" DROP COLUMN born_at"); err != nil {
					t.Fatal(err)
				}
				code, out, errs := runCmd(t, "stats", "--dsn", dsn, "--table", e.table, "--json")
				all += out
				var s stats
				if err := json.Unmarshal([]byte(out), &s); code != 0 || err != nil {
					t.Fatalf("stats --json without born_at: %d %v %s", code, err, errs)
				}
				if s.Entries != 5 || s.WithBirth != nil || s.WithoutBirth != nil || !strings.Contains(s.BirthUnavailable, "opledger migrate up") ||
					strings.Contains(out, "entries_with_birth") {
					t.Errorf("stats without born_at: %s", out)
				}
				code, out, _ = runCmd(t, "stats", "--dsn", dsn, "--table", e.table)
				all += out
				if code != 0 || !regexp.MustCompile(`entries by key birth +unavailable  \(the table has no born_at column`).MatchString(out) {
					t.Errorf("stats without born_at: %d\n%s", code, out)
				}
			}
			for _, k := range keys {
				if strings.Contains(all, k) {
					t.Errorf("a key is printed: %s", k)
				}
			}
		})
	}
}
