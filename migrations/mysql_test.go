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
	"github.com/opledger/opledger/internal/migrationfs"
	"github.com/opledger/opledger/internal/testkit/testdb"
	"github.com/opledger/opledger/migrations"
)

// TestMySQLSchemaAndLock: the kit's MySQL migrations create binary
// identity columns on InnoDB, serialise concurrent runs with a named lock
// of their own, and create no goose_lock table.
func TestMySQLSchemaAndLock(t *testing.T) {
	testdb.Parallel(t, "mysql", 8)
	testdb.SkipOnTiDB(t, testdb.MySQLDialect(t), "TiDB's process list never shows a session waiting in GET_LOCK as InnoDB's 'User lock' state, which the test waits on")
	open := testdb.OpenMySQL(nil)
	db := open(t, 6)
	d := mysql.New()
	ctx := context.Background()
	var b [4]byte
	_, _ = rand.Read(b[:])
	table := "opl_mlock_" + hex.EncodeToString(b[:])
	newM := func(db *sql.DB) *migrations.Migrator {
		m, err := migrations.New(db, d, migrations.WithTable(table))
		if err != nil {
			t.Fatal(err)
		}
		return m
	}
	t.Cleanup(func() {
		newM(db).Down(context.Background())
		db.Exec("DROP TABLE IF EXISTS " + d.QuoteIdent(migrationfs.VersionTable(table)))
	})
	lockName := "opledger:" + table

	// Another session holds the kit's lock: two Migrators, each on a pool
	// of one connection (so the session it migrates on is known), wait for
	// it, as the server shows; once it is released both succeed and
	// exactly one applies the migration.
	holder, err := db.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var got sql.NullInt64
	if err := holder.QueryRowContext(ctx, "SELECT GET_LOCK(?, 0)", lockName).Scan(&got); err != nil || got.Int64 != 1 {
		t.Fatalf("GET_LOCK: %v %v", got, err)
	}
	type upResult struct {
		n   int
		err error
	}
	results := make(chan upResult, 2)
	done := make(chan struct{})
	var once sync.Once
	var sessions []int64
	for range 2 {
		pool := open(t, 1)
		var id int64
		if err := pool.QueryRowContext(ctx, "SELECT CONNECTION_ID()").Scan(&id); err != nil {
			t.Fatal(err)
		}
		sessions = append(sessions, id)
		m := newM(pool)
		go func() {
			rs, err := m.Up(ctx)
			once.Do(func() { close(done) })
			results <- upResult{len(rs), err}
		}()
	}
	for _, id := range sessions {
		testdb.WaitUserLock(t, db, id, done)
	}
	if err := holder.QueryRowContext(ctx, "SELECT RELEASE_LOCK(?)", lockName).Scan(&got); err != nil || got.Int64 != 1 {
		t.Fatalf("RELEASE_LOCK: %v %v", got, err)
	}
	holder.Close()
	total := 0
	for range 2 {
		r := <-results
		if r.err != nil {
			t.Fatalf("Up after the lock was released: %v", r.err)
		}
		total += r.n
	}
	if total != 5 { // 00001 to 00005, each applied once
		t.Fatalf("two Ups applied %d migrations in all, want 5", total)
	}
	if err := db.QueryRowContext(ctx, "SELECT IS_USED_LOCK(?)", lockName).Scan(&got); err != nil || got.Valid {
		t.Fatalf("lock still held after Up: %v %v", got, err)
	}

	// Concurrent Ups on a fresh table: one applies, the other finds
	// nothing to do; neither fails.
	if _, err := newM(db).Down(ctx); err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	applied := make([]int, 4)
	errs := make([]error, 4)
	for i := range applied {
		wg.Add(1)
		m := newM(db)
		go func() {
			defer wg.Done()
			rs, err := m.Up(ctx)
			applied[i], errs[i] = len(rs), err
		}()
	}
	wg.Wait()
	total = 0
	for i := range applied {
		if errs[i] != nil {
			t.Fatalf("concurrent Up %d: %v", i, errs[i])
		}
		total += applied[i]
	}
	if total != 5 { // 00001 to 00005, each applied once
		t.Fatalf("concurrent Ups applied %v, want each of the three migrations once in all", applied)
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
	testdb.Parallel(t, "mysql", 4)
	db := testdb.OpenMySQL(nil)(t, 4)
	d := mysql.New()
	ctx := context.Background()
	var b [4]byte
	_, _ = rand.Read(b[:])
	table := "opl_mlock_ctx_" + hex.EncodeToString(b[:])
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
	db.Exec("DROP TABLE IF EXISTS " + d.QuoteIdent(migrationfs.VersionTable(table)))
}
