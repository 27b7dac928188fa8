package mysqldialect_test

import (
	"context"
	"testing"
	"time"

	"github.com/opledger/opledger/dialects"
	"github.com/opledger/opledger/internal/testkit/testdb"
)

// TestOutboxBatchSkipsOrWaits: the relay's batch, run while another
// transaction holds the first message locked, never returns that message:
// it skips it (SKIP LOCKED on MySQL 8 and MariaDB), or waits for it (the
// TiDB variant's plain FOR UPDATE: TiDB v8.5 ignores SKIP LOCKED and
// returned the locked row at once, so two relays took the same messages).
// The waiting session's lock wait is bounded at one second, so a wait ends
// as a lock timeout.
func TestOutboxBatchSkipsOrWaits(t *testing.T) {
	t.Parallel()
	d := testdb.MySQLDialect(t)
	db := testdb.OpenMySQL(nil)(t, 4)
	table := testdb.NewTable(t, db, d) + "_outbox"
	q := d.OutboxQueries(table)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for i, id := range []string{"0123456789abcdef0123456789abcdef", "fedcba9876543210fedcba9876543210"} {
		if _, err := db.ExecContext(ctx, q.Insert, []byte(id), "key-"+id, "t", "n", []byte{}, int64(i)); err != nil {
			t.Fatal(err)
		}
	}
	var first int64
	if err := db.QueryRowContext(ctx, "SELECT MIN(seq) FROM "+d.QuoteIdent(table)).Scan(&first); err != nil {
		t.Fatal(err)
	}
	holder, err := db.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer holder.Rollback()
	if _, err := holder.ExecContext(ctx, "SELECT seq FROM "+d.QuoteIdent(table)+" WHERE seq = ? FOR UPDATE", first); err != nil {
		t.Fatal(err)
	}

	conn, err := db.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if _, err := conn.ExecContext(ctx, "SET SESSION innodb_lock_wait_timeout = 1"); err != nil {
		t.Fatal(err)
	}
	tx, err := conn.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback()
	rows, err := tx.QueryContext(ctx, q.Batch, 10)
	var got []int64
	if err == nil {
		for rows.Next() {
			var seq, createdAt, attempts int64
			var id, payload []byte
			var key, topic, name string
			if err = rows.Scan(&seq, &id, &key, &topic, &name, &payload, &createdAt, &attempts); err != nil {
				break
			}
			got = append(got, seq)
		}
		if err == nil {
			err = rows.Err()
		}
		rows.Close()
	}
	switch {
	case err != nil && d.Classify(err) == dialects.ClassLockTimeout:
		t.Logf("%s: the batch waited for the locked message: %v", d.Name(), err)
	case err != nil:
		t.Fatalf("batch: %v", err)
	default:
		for _, seq := range got {
			if seq == first {
				t.Fatalf("%s: the batch returned message %d, which another transaction holds locked (got %v): two relays would publish it", d.Name(), first, got)
			}
		}
		if len(got) != 1 {
			t.Fatalf("%s: the batch returned %v, want the one message not locked", d.Name(), got)
		}
		t.Logf("%s: the batch skipped the locked message: %v", d.Name(), got)
	}
}
