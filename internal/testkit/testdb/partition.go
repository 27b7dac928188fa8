package testdb

import (
	"context"
	"database/sql"
	"testing"
	"time"

	"github.com/opledger/opledger/dialects"
	"github.com/opledger/opledger/internal/dialectkit"
)

// Partitions returns the partitions by born_at of d's ledger table, nil
// when it is not partitioned (or the dialect cannot partition it).
func Partitions(t testing.TB, db *sql.DB, d dialects.Dialect, table string) []dialectkit.Partition {
	t.Helper()
	pt, ok := d.(dialectkit.Partitioner)
	if !ok {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	parts, ok, err := pt.Partitions(ctx, db, table)
	if err != nil {
		t.Fatalf("partitions of %s: %v", table, err)
	}
	if !ok {
		return nil
	}
	return parts
}

// Partitioned reports whether d's ledger table is partitioned by born_at.
func Partitioned(t testing.TB, db *sql.DB, d dialects.Dialect, table string) bool {
	t.Helper()
	return Partitions(t, db, d, table) != nil
}
