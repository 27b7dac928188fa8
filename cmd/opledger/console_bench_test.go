package main

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/opledger/opledger/outbox"
)

// consoleBenchRowsEnv gates BenchmarkConsolePages: the number of ledger
// entries to fill its tables with (10000000 for the figure
// docs/operations.md records). CI does not set it.
const consoleBenchRowsEnv = "OPLEDGER_CONSOLE_BENCH_ROWS"

// consoleFill is each database's statement that fills a ledger table
// (%[1]s) with %[2]d entries, created over the last day: one in a hundred
// pending, one in ten expired. The ids are distinct, and no key exists.
// MariaDB's writes entries %[5]d to %[2]d: one batch (consoleFillTable).
var consoleFill = map[string]string{
	"postgres": `INSERT INTO %[1]s (id, caller, method, request_fp, code, response, response_type, created_at, completed_at, expires_at)
SELECT sha256(int8send(i)), 'tenant-' || (i %% 50), '/pay.v1.Payments/Transfer', '\x00'::bytea, CASE WHEN i %% 100 = 0 THEN NULL ELSE 0 END,
  CASE WHEN i %% 100 = 0 THEN NULL ELSE '\x0a0b'::bytea END, 'pay.v1.TransferReply', %[3]d - i * %[4]d, CASE WHEN i %% 100 = 0 THEN NULL ELSE %[3]d - i * %[4]d END,
  CASE WHEN i %% 10 = 0 THEN %[3]d - 1000000 - i ELSE %[3]d - i * %[4]d + 86400000000 END
FROM generate_series(1::bigint, %[2]d) AS i`,
	"mysql": `INSERT INTO %[1]s (id, caller, method, request_fp, code, response, response_type, created_at, completed_at, expires_at)
SELECT UNHEX(SHA2(seq, 256)), CONCAT('tenant-', seq %% 50), '/pay.v1.Payments/Transfer', UNHEX(SHA2(0, 256)), CASE WHEN seq %% 100 = 0 THEN NULL ELSE 0 END,
  CASE WHEN seq %% 100 = 0 THEN NULL ELSE 'ok' END, 'pay.v1.TransferReply', %[3]d - seq * %[4]d, CASE WHEN seq %% 100 = 0 THEN NULL ELSE %[3]d - seq * %[4]d END,
  CASE WHEN seq %% 10 = 0 THEN %[3]d - 1000000 - seq ELSE %[3]d - seq * %[4]d + 86400000000 END
FROM seq_%[5]d_to_%[2]d`,
	"sqlite": `WITH RECURSIVE s(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM s WHERE i < %[2]d)
INSERT INTO %[1]s (id, caller, method, request_fp, code, response, response_type, created_at, completed_at, expires_at)
SELECT randomblob(32), 'tenant-' || (i %% 50), '/pay.v1.Payments/Transfer', x'00', CASE WHEN i %% 100 = 0 THEN NULL ELSE 0 END,
  CASE WHEN i %% 100 = 0 THEN NULL ELSE x'0a0b' END, 'pay.v1.TransferReply', %[3]d - i * %[4]d, CASE WHEN i %% 100 = 0 THEN NULL ELSE %[3]d - i * %[4]d END,
  CASE WHEN i %% 10 = 0 THEN %[3]d - 1000000 - i ELSE %[3]d - i * %[4]d + 86400000000 END
FROM s`,
}

// consoleFillBatch bounds the entries one statement writes on MariaDB:
// each batch commits on its own, so a fill that is interrupted never makes
// the server roll back millions of rows.
const consoleFillBatch = 500_000

// consoleFillTable fills e's table with n entries on one connection: on
// MariaDB in committed batches of consoleFillBatch, elsewhere in one
// statement (on SQLite with a page cache that holds the indexes, set back
// to the default afterwards, so that the pages are timed as they run).
func consoleFillTable(ctx context.Context, e *opEnv, family string, n int, now time.Time, step int64) error {
	conn, err := e.db.Conn(ctx)
	if err != nil {
		return err
	}
	defer conn.Close()
	table := e.tg.dialect.QuoteIdent(e.table)
	switch family {
	case "mysql":
		for lo := 1; lo <= n; lo += consoleFillBatch {
			hi := min(lo+consoleFillBatch-1, n)
			if _, err := conn.ExecContext(ctx, fmt.Sprintf(consoleFill[family], table, hi, now.UnixMicro(), step, lo)); err != nil {
				return err
			}
		}
		return nil
	case "sqlite":
		if _, err := conn.ExecContext(ctx, "PRAGMA cache_size = -1048576"); err != nil {
			return err
		}
		defer conn.ExecContext(ctx, "PRAGMA cache_size = -2000")
	}
	_, err = conn.ExecContext(ctx, fmt.Sprintf(consoleFill[family], table, n, now.UnixMicro(), step))
	return err
}

// consoleEmpty empties a filled table at once (SQLite's DELETE without a
// WHERE drops and recreates its pages).
var consoleEmpty = map[string]string{"postgres": "TRUNCATE TABLE %s", "mysql": "TRUNCATE TABLE %s", "sqlite": "DELETE FROM %s"}

// consoleAnalyze refreshes the database's statistics after the fill.
var consoleAnalyze = map[string]string{"postgres": "ANALYZE %s", "mysql": "ANALYZE TABLE %s", "sqlite": "ANALYZE %s"}

// BenchmarkConsolePages: the console's pages (their queries, as each page
// load runs them) over a ledger of $OPLEDGER_CONSOLE_BENCH_ROWS entries,
// on every database the tests reach. The pages read bounded ranges and
// the database's estimates, so ms/op stays flat as the table grows
// (docs/operations.md records the figures and the budget: 200 ms).
func BenchmarkConsolePages(b *testing.B) {
	n, err := strconv.Atoi(os.Getenv(consoleBenchRowsEnv))
	if err != nil || n < 1 {
		b.Skipf("set %s to the ledger's size (10000000 for the recorded figure)", consoleBenchRowsEnv)
	}
	for family, dsn := range operatorTargets(b) {
		b.Run(fmt.Sprintf("%s/%d", family, n), func(b *testing.B) {
			e := newOpEnv(b, family, dsn)
			ctx := context.Background()
			now := time.Now()
			step := int64(86400000000 / n)
			if step < 1 {
				step = 1
			}
			start := time.Now()
			// Emptied before newOpEnv's migrate down, whose 00005 would
			// copy every entry back into an unpartitioned table in one
			// statement.
			b.Cleanup(func() {
				if _, err := e.db.ExecContext(ctx, fmt.Sprintf(consoleEmpty[family], e.tg.dialect.QuoteIdent(e.table))); err != nil {
					b.Errorf("empty the table: %v", err)
				}
			})
			if err := consoleFillTable(ctx, e, family, n, now, step); err != nil {
				b.Fatal(err)
			}
			if _, err := e.db.ExecContext(ctx, fmt.Sprintf(consoleAnalyze[family], e.tg.dialect.QuoteIdent(e.table))); err != nil {
				b.Fatal(err)
			}
			b.Logf("%s: %d entries written and analysed in %s", family, n, time.Since(start).Round(time.Second))
			ob, err := outbox.New(e.tg.dialect, outbox.WithTable(outbox.TableFor(e.table)))
			if err != nil {
				b.Fatal(err)
			}
			be := &consoleBackend{db: e.db, t: e.tg, table: e.table, q: newLedgerSQL(e.tg.dialect, e.table), lw: ledgerWindow{retention: 24 * time.Hour, skew: time.Minute}, ob: ob}
			var id [32]byte
			b.Run("ledger", func(b *testing.B) {
				for b.Loop() {
					v, err := be.Ledger(ctx, time.Now())
					if err != nil {
						b.Fatal(err)
					}
					if len(v.OldestPending) > 0 {
						copy(id[:], v.OldestPending[0].ID)
					}
				}
			})
			b.Run("entry", func(b *testing.B) {
				for b.Loop() {
					if _, err := be.Entry(ctx, id, time.Now()); err != nil {
						b.Fatal(err)
					}
				}
			})
			b.Run("outbox", func(b *testing.B) {
				for b.Loop() {
					if _, err := be.Outbox(ctx, time.Now()); err != nil {
						b.Fatal(err)
					}
				}
			})
		})
	}
}
