package migrations_test

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/opledger/opledger/dialects/mysql"
	"github.com/opledger/opledger/internal/testdb"
	"github.com/opledger/opledger/migrations"
)

// TestMySQLSchemaAndLock: the kit's MySQL migrations create binary
// identity columns on InnoDB, serialise concurrent runs with a named lock
// of their own, and create no goose_lock table.
func TestMySQLSchemaAndLock(t *testing.T) {
	db := testdb.OpenMySQL(nil)(t, 6)
	d := mysql.New()
	ctx := context.Background()
	var b [4]byte
	_, _ = rand.Read(b[:])
	table := "opl_mlock_" + hex.EncodeToString(b[:])
	newM := func() *migrations.Migrator {
		m, err := migrations.New(db, d, migrations.WithTable(table))
		if err != nil {
			t.Fatal(err)
		}
		return m
	}
	t.Cleanup(func() {
		newM().Down(context.Background())
		db.Exec("DROP TABLE IF EXISTS " + d.QuoteIdent(migrations.VersionTable(table)))
	})
	lockName := "opledger:" + table

	// Another session holds the kit's lock: Up waits for it.
	holder, err := db.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var got sql.NullInt64
	if err := holder.QueryRowContext(ctx, "SELECT GET_LOCK(?, 0)", lockName).Scan(&got); err != nil || got.Int64 != 1 {
		t.Fatalf("GET_LOCK: %v %v", got, err)
	}
	done := make(chan error, 1)
	go func() {
		_, err := newM().Up(ctx)
		done <- err
	}()
	select {
	case err := <-done:
		t.Fatalf("Up did not wait for the migration lock: %v", err)
	case <-time.After(300 * time.Millisecond):
	}
	if err := holder.QueryRowContext(ctx, "SELECT RELEASE_LOCK(?)", lockName).Scan(&got); err != nil || got.Int64 != 1 {
		t.Fatalf("RELEASE_LOCK: %v %v", got, err)
	}
	holder.Close()
	if err := <-done; err != nil {
		t.Fatalf("Up after the lock was released: %v", err)
	}

	// Concurrent Ups on a fresh table: one applies, the other finds
	// nothing to do; neither fails.
	if _, err := newM().Down(ctx); err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	applied := make([]int, 4)
	errs := make([]error, 4)
	for i := range applied {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rs, err := newM().Up(ctx)
			applied[i], errs[i] = len(rs), err
		}()
	}
	wg.Wait()
	total := 0
	for i := range applied {
		if errs[i] != nil {
			t.Fatalf("concurrent Up %d: %v", i, errs[i])
		}
		total += applied[i]
	}
	if total != 1 {
		t.Fatalf("concurrent Ups applied %v, want exactly one migration in all", applied)
	}
	if err := db.QueryRowContext(ctx, "SELECT IS_USED_LOCK(?)", lockName).Scan(&got); err != nil || got.Valid {
		t.Fatalf("lock still held after Up: %v %v", got, err)
	}

	var n int
	if err := db.QueryRowContext(ctx, "SELECT COUNT(*) FROM information_schema.tables WHERE table_schema = DATABASE() AND table_name = 'goose_lock'").Scan(&n); err != nil || n != 0 {
		t.Fatalf("goose_lock tables: %d %v", n, err)
	}
	var engine string
	if err := db.QueryRowContext(ctx, "SELECT engine FROM information_schema.tables WHERE table_schema = DATABASE() AND table_name = ?", table).Scan(&engine); err != nil || !strings.EqualFold(engine, "InnoDB") {
		t.Fatalf("engine %q %v, want InnoDB", engine, err)
	}
	want := map[string]string{
		"id": "binary(32)", "caller": "varbinary(512)", "method": "varbinary(512)",
		"request_fp": "binary(32)", "response": "longblob", "created_at": "bigint(20)",
		"completed_at": "bigint(20)", "expires_at": "bigint(20)",
	}
	rows, err := db.QueryContext(ctx, "SELECT column_name, column_type FROM information_schema.columns WHERE table_schema = DATABASE() AND table_name = ?", table)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	seen := 0
	for rows.Next() {
		var name, typ string
		if err := rows.Scan(&name, &typ); err != nil {
			t.Fatal(err)
		}
		w, ok := want[strings.ToLower(name)]
		if !ok {
			continue
		}
		seen++
		// MySQL 8 prints integer types without a display width.
		if typ != w && typ != strings.TrimSuffix(w, "(20)") {
			t.Errorf("column %s is %s, want %s", name, typ, w)
		}
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	if seen != len(want) {
		t.Fatalf("found %d of the %d expected columns", seen, len(want))
	}
}

// A lock another session never releases makes Up fail with the caller's
// context, not hang.
func TestMySQLLockRespectsContext(t *testing.T) {
	db := testdb.OpenMySQL(nil)(t, 4)
	d := mysql.New()
	ctx := context.Background()
	table := "opl_mlock_ctx"
	holder, err := db.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer holder.Close()
	var got sql.NullInt64
	if err := holder.QueryRowContext(ctx, "SELECT GET_LOCK(?, 0)", "opledger:"+table).Scan(&got); err != nil || got.Int64 != 1 {
		t.Fatalf("GET_LOCK: %v %v", got, err)
	}
	m, err := migrations.New(db, d, migrations.WithTable(table))
	if err != nil {
		t.Fatal(err)
	}
	cctx, cancel := context.WithTimeout(ctx, 500*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, err = m.Up(cctx)
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Up under a held lock: %v", err)
	}
	if took := time.Since(start); took > 5*time.Second {
		t.Fatalf("Up took %v to give up", took)
	}
	var n int
	if err := db.QueryRowContext(ctx, "SELECT COUNT(*) FROM information_schema.tables WHERE table_schema = DATABASE() AND table_name = ?", table).Scan(&n); err != nil || n != 0 {
		t.Fatalf("table created without the lock: %d %v", n, err)
	}
	holder.QueryRowContext(ctx, "SELECT RELEASE_LOCK(?)", "opledger:"+table).Scan(&got)
	db.Exec("DROP TABLE IF EXISTS " + d.QuoteIdent(migrations.VersionTable(table)))
}
