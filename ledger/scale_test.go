package ledger_test

import (
	"context"
	"database/sql"
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/opledger/opledger/internal/testkit/testdb"
	"github.com/opledger/opledger/ledger"
	"github.com/opledger/opledger/migrations"
)

// The scale measurement (docs/operations.md): a ledger table of
// OPLEDGER_SCALE_ROWS entries (10,000,000 in the recorded figures) in a
// table of its own, OPLEDGER_SCALE_TABLE (default opl_scale), which is
// kept between runs: it takes minutes to fill. Without the variable the
// scale tests and benchmarks skip.
const (
	envScaleRows  = "OPLEDGER_SCALE_ROWS"
	envScaleTable = "OPLEDGER_SCALE_TABLE"
)

// The generated entries: entry i (1 ≤ i ≤ rows) is the real identity of
// caller scaleCaller(i), method scaleMethod(i) and key "scale-<i>", so
// that a benchmark can replay it through the ledger. Creation times spread
// evenly over the 24 hours before the load (the newest is i = rows), each
// with the default retention; one in 1,000 is pending (committed without
// a result), the rest completed with a 48-byte response.
var scaleMethods = []string{"/pay.v1.Payments/Transfer", "/pay.v1.Payments/Refund", "/pay.v1.Payments/Capture", "/pay.v1.Payments/Authorize"}

func scaleCaller(i int64) string { return "principal:svc-" + strconv.FormatInt(i%64, 10) }
func scaleMethod(i int64) string { return scaleMethods[i%4] }
func scaleKey(i int64) string    { return "scale-" + strconv.FormatInt(i, 10) }

// scaleLoadSQL is the generator per database family: it inserts entries
// lo..hi ($1, $2) with t0 ($3, Unix µs) as the load time and rows ($4) as
// the table's size, skipping the ones already there. The id expression is
// the ledger's digest (see ledger/identity.go) written in SQL.
var scaleLoadSQL = map[string]string{
	"postgres": `INSERT INTO %[1]s (id, caller, method, request_fp, code, response, response_type, created_at, completed_at, expires_at)
SELECT sha256('opledger/v1'::bytea || '\x00'::bytea
        || int8send(octet_length(c)::bigint) || convert_to(c, 'UTF8')
        || int8send(octet_length(m)::bigint) || convert_to(m, 'UTF8')
        || int8send(32) || sha256(convert_to('scale-' || i, 'UTF8'))),
       c, m, sha256(convert_to('fp-' || i, 'UTF8')),
       CASE WHEN i %% 1000 = 0 THEN NULL ELSE 0 END,
       CASE WHEN i %% 1000 = 0 THEN NULL ELSE substring(sha256(convert_to('r-' || i, 'UTF8')) || sha256(convert_to('s-' || i, 'UTF8')) from 1 for 48) END,
       CASE WHEN i %% 1000 = 0 THEN NULL ELSE 'pay.v1.TransferReply' END,
       cr, CASE WHEN i %% 1000 = 0 THEN NULL ELSE cr + 2000 END, cr + 86400000000
FROM (SELECT i, 'principal:svc-' || (i %% 64) AS c,
             (ARRAY['/pay.v1.Payments/Transfer','/pay.v1.Payments/Refund','/pay.v1.Payments/Capture','/pay.v1.Payments/Authorize'])[i %% 4 + 1] AS m,
             $3::bigint - ($4::bigint - i) * (86400000000 / $4::bigint) AS cr
      FROM generate_series($1::bigint, $2::bigint) AS i) AS g
ON CONFLICT DO NOTHING`,
	"mysql": `INSERT IGNORE INTO %[1]s (id, caller, method, request_fp, code, response, response_type, created_at, completed_at, expires_at)
SELECT UNHEX(SHA2(CONCAT('opledger/v1', CHAR(0),
        UNHEX(LPAD(HEX(LENGTH(c)), 16, '0')), c,
        UNHEX(LPAD(HEX(LENGTH(m)), 16, '0')), m,
        UNHEX(LPAD(HEX(32), 16, '0')), UNHEX(SHA2(CONCAT('scale-', i), 256))), 256)),
       c, m, UNHEX(SHA2(CONCAT('fp-', i), 256)),
       IF(i %% 1000 = 0, NULL, 0),
       IF(i %% 1000 = 0, NULL, SUBSTRING(CONCAT(UNHEX(SHA2(CONCAT('r-', i), 256)), UNHEX(SHA2(CONCAT('s-', i), 256))), 1, 48)),
       IF(i %% 1000 = 0, NULL, 'pay.v1.TransferReply'),
       cr, IF(i %% 1000 = 0, NULL, cr + 2000), cr + 86400000000
FROM (SELECT seq AS i, CONCAT('principal:svc-', seq %% 64) AS c,
             ELT(seq %% 4 + 1, '/pay.v1.Payments/Transfer', '/pay.v1.Payments/Refund', '/pay.v1.Payments/Capture', '/pay.v1.Payments/Authorize') AS m,
             CAST(? AS SIGNED) - (CAST(? AS SIGNED) - seq) * (86400000000 DIV CAST(? AS SIGNED)) AS cr
      FROM seq_1_to_%[2]d WHERE seq BETWEEN ? AND ?) AS g`,
}

// scaleRows returns OPLEDGER_SCALE_ROWS, skipping t without it.
func scaleRows(t testing.TB) int64 {
	t.Helper()
	v := os.Getenv(envScaleRows)
	if v == "" {
		t.Skipf("set %s (and the database variables) to run the scale measurement", envScaleRows)
	}
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil || n < 1000 || n > 100_000_000 {
		t.Fatalf("%s=%q: want 1000 to 100000000", envScaleRows, v)
	}
	return n
}

func scaleTable() string {
	if v := os.Getenv(envScaleTable); v != "" {
		return v
	}
	return "opl_scale"
}

// scaleTarget opens tg with a pool of conns and makes sure its scale table
// holds (nine tenths of) rows entries, loading the missing ones in chunks (minutes for ten
// million). The table is kept afterwards.
func scaleTarget(t testing.TB, tg testdb.Target, conns int, rows int64) (*sql.DB, string) {
	t.Helper()
	db := tg.Open(t, conns)
	table := scaleTable()
	ctx := context.Background()
	m, err := migrations.New(db, tg.Dialect, migrations.WithTable(table))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := m.Up(ctx); err != nil {
		t.Fatal(err)
	}
	q := tg.Dialect.QuoteIdent(table)
	var have int64
	if err := db.QueryRowContext(ctx, "SELECT count(*) FROM "+q+" WHERE id IS NOT NULL").Scan(&have); err != nil {
		t.Fatal(err)
	}
	if have >= rows*9/10 {
		// Expiry and BenchmarkScaleSweep remove the oldest entries: the
		// table is topped up only when more than a tenth is missing.
		return db, table
	}
	loadScale(t, db, tg, table, rows)
	return db, table
}

// loadScale inserts the generated entries 1..rows into table, skipping
// those already there.
func loadScale(t testing.TB, db *sql.DB, tg testdb.Target, table string, rows int64) {
	t.Helper()
	ctx := context.Background()
	q := tg.Dialect.QuoteIdent(table)
	t0 := time.Now().UnixMicro()
	start := time.Now()
	if tg.Family() == "mysql" {
		testdb.SkipOnTiDB(t, tg.Dialect, "the load reads MariaDB's SEQUENCE engine (seq_1_to_N), and the figures are InnoDB's")
		// InnoDB here has a 128 MiB buffer pool, O_DIRECT and no change
		// buffer: an insert in random key order reads a page from disk
		// for almost every row once the table outgrows the pool (2 million
		// rows took 9 minutes, and it slows down as it grows). So the
		// whole table is inserted in one statement in primary-key order,
		// and the expires_at index is built afterwards by a sort. Both
		// trees come out denser than a table grown by traffic:
		// docs/operations.md gives the bytes per row of both.
		idx := tg.Dialect.QuoteIdent(table + "_expires_idx")
		for _, stmt := range []string{
			"ALTER TABLE " + q + " DROP INDEX " + idx,
			fmt.Sprintf(scaleLoadSQL["mysql"], q, rows) + " ORDER BY 1",
			"ALTER TABLE " + q + " ADD INDEX " + idx + " (expires_at)",
		} {
			var args []any
			if strings.HasPrefix(stmt, "INSERT") {
				args = []any{t0, rows, rows, int64(1), rows}
			}
			if _, err := db.ExecContext(ctx, stmt, args...); err != nil {
				t.Fatalf("load: %v", err)
			}
			t.Logf("%s: %.40s… done (%s)", tg.Name, stmt, time.Since(start).Round(time.Second))
		}
		return
	}
	const chunk = 500_000
	for lo := int64(1); lo <= rows; lo += chunk {
		hi := min(lo+chunk-1, rows)
		if _, err := db.ExecContext(ctx, fmt.Sprintf(scaleLoadSQL["postgres"], q), lo, hi, t0, rows); err != nil {
			t.Fatalf("load %d..%d: %v", lo, hi, err)
		}
		t.Logf("%s: loaded up to %d of %d (%s)", tg.Name, hi, rows, time.Since(start).Round(time.Second))
	}
}

// scaleTargets are the databases measured: PostgreSQL through pgx and
// MariaDB.
func scaleTargets() []testdb.Target {
	var out []testdb.Target
	for _, tg := range testdb.Targets() {
		if tg.Name == "postgres/pgx" || tg.Name == "mysql" {
			out = append(out, tg)
		}
	}
	return out
}

// TestScaleLoad fills the scale tables and checks that a generated entry
// is the ledger's own: Lookup finds it by caller, method and key.
//
//	OPLEDGER_SCALE_ROWS=10000000 go test -run TestScaleLoad -timeout 2h -v ./ledger/
func TestScaleLoad(t *testing.T) {
	rows := scaleRows(t)
	for _, tg := range scaleTargets() {
		t.Run(tg.Name, func(t *testing.T) {
			db, table := scaleTarget(t, tg, 2, rows)
			l, err := ledger.New(tg.Dialect, ledger.WithTable(table))
			if err != nil {
				t.Fatal(err)
			}
			// The newest half: the oldest entries expire while the table loads.
			for _, i := range []int64{rows / 2, rows/2 + 999, rows/2 + 1000, rows} {
				id, err := ledger.NewIdentity(scaleCaller(i), scaleMethod(i), scaleKey(i))
				if err != nil {
					t.Fatal(err)
				}
				e, err := l.Lookup(context.Background(), db, id)
				if err != nil {
					t.Fatalf("entry %d: %v", i, err)
				}
				if want := ledger.Completed; i%1000 == 0 {
					if e.State != ledger.Pending {
						t.Errorf("entry %d: state %v, want pending", i, e.State)
					}
				} else if e.State != want || len(e.Result.Response) != 48 {
					t.Errorf("entry %d: state %v, %d response bytes", i, e.State, len(e.Result.Response))
				}
			}
		})
	}
}
