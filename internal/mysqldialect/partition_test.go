package mysqldialect_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/opledger/opledger/internal/dialectkit"
	"github.com/opledger/opledger/internal/mysqldialect"
	"github.com/opledger/opledger/internal/testkit/testdb"
)

// TestDropPartitionBothWays: DropPartition removes a bucket and its rows
// by moving it out and dropping the moved table (the MySQL/MariaDB
// variant, on a server that knows CONVERT PARTITION) and by DROP
// PARTITION (the TiDB variant, and the fallback); either leaves no table
// behind, and a bucket already gone is no error.
func TestDropPartitionBothWays(t *testing.T) {
	testdb.Parallel(t, "mysql", 1)
	db := testdb.OpenMySQL(nil)(t, 1)
	ctx := context.Background()
	for _, d := range []mysqldialect.Dialect{mysqldialect.New(), mysqldialect.NewTiDB()} {
		table := fmt.Sprintf("opl_drop_%s_%d", d.Name(), time.Now().UnixNano()%1e9)
		q := d.QuoteIdent(table)
		t.Cleanup(func() { _, _ = db.ExecContext(context.Background(), "DROP TABLE IF EXISTS "+q) })
		if _, err := db.ExecContext(ctx, "CREATE TABLE "+q+" (id INT NOT NULL, born_at BIGINT NOT NULL, PRIMARY KEY (id, born_at)) "+
			"PARTITION BY RANGE (born_at) (PARTITION born0 VALUES LESS THAN (1), PARTITION p19700101 VALUES LESS THAN (100), "+
			"PARTITION p19700102 VALUES LESS THAN (200), PARTITION pmax VALUES LESS THAN MAXVALUE)"); err != nil {
			t.Fatal(err)
		}
		if _, err := db.ExecContext(ctx, "INSERT INTO "+q+" VALUES (1, 50), (2, 150), (3, 0)"); err != nil {
			t.Fatal(err)
		}
		parts, ok, err := d.Partitions(ctx, db, table)
		if err != nil || !ok {
			t.Fatalf("%s: partitions: %v (%v)", d.Name(), err, ok)
		}
		p, ok := dialectkit.BucketOf(parts, time.UnixMicro(50))
		if !ok || p.Name != "p19700101" {
			t.Fatalf("%s: bucket of 50: %+v (%v)", d.Name(), p, ok)
		}
		for range 2 { // the second time, the bucket is gone already
			if err := d.DropPartition(ctx, db, table, p); err != nil {
				t.Fatalf("%s: drop: %v", d.Name(), err)
			}
		}
		var rows, ids, tables int
		if err := db.QueryRowContext(ctx, "SELECT COUNT(*), SUM(id) FROM "+q).Scan(&rows, &ids); err != nil || rows != 2 || ids != 5 {
			t.Fatalf("%s: %d rows (ids summing to %d) after the drop, %v; want the two of the other partitions", d.Name(), rows, ids, err)
		}
		if err := db.QueryRowContext(ctx, "SELECT COUNT(*) FROM information_schema.TABLES WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME LIKE ?", table+"%").Scan(&tables); err != nil || tables != 1 {
			t.Fatalf("%s: %d tables named like the ledger's after the drop, %v; want the ledger's alone", d.Name(), tables, err)
		}
	}
}
