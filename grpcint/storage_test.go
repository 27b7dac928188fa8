package grpcint_test

import (
	"context"
	"database/sql"
	"path/filepath"
	"testing"
	"time"

	"google.golang.org/grpc/codes"

	"github.com/opledger/opledger/dialects/sqlite"
	"github.com/opledger/opledger/grpcint"
	"github.com/opledger/opledger/internal/testkit/wallet"
	"github.com/opledger/opledger/internal/testkit/wallet/walletpb"
	"github.com/opledger/opledger/keyed"
	"github.com/opledger/opledger/ledger"
	"github.com/opledger/opledger/migrations"
)

// TestStorageUnavailable: when the ledger's database fails before
// anything is committed, a keyed call gets UNAVAILABLE with
// STORAGE_UNAVAILABLE, and a resolve says the same.
func TestStorageUnavailable(t *testing.T) {
	ctx := context.Background()
	db, err := sql.Open("sqlite3", sqlite.DSN(filepath.Join(t.TempDir(), "s.db"), time.Second))
	if err != nil {
		t.Fatal(err)
	}
	m, err := migrations.New(db, sqlite.New())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := m.Up(ctx); err != nil {
		t.Fatal(err)
	}
	if err := wallet.CreateTable(ctx, db, sqlite.New(), wallet.DefaultTable); err != nil {
		t.Fatal(err)
	}
	e := serve(t, db, sqlite.New(), ledger.DefaultTable, wallet.DefaultTable)
	conn, pc := e.conn, e.pc
	if _, err := pc.Deposit(as(ctx, "alice", "k1"), deposit("s1", 1)); err != nil {
		t.Fatal(err)
	}
	db.Close() // the database goes away
	_, err = pc.Deposit(as(ctx, "alice", "k2"), deposit("s2", 1))
	wantStatus(t, err, codes.Unavailable, keyed.StorageUnavailable.Row().Reason)
	// Resolve asks again while the database fails, until its context ends.
	var got walletpb.DepositReply
	rctx, cancel := context.WithTimeout(as(ctx, "alice", ""), 500*time.Millisecond)
	defer cancel()
	err = grpcint.Resolve(rctx, conn, walletpb.DepositMethod, "k1", &walletpb.DepositRequest{}, &got)
	wantStatus(t, err, codes.Unavailable, keyed.StorageUnavailable.Row().Reason)
	if resolves := e.server.Stats().Resolves; resolves < 2 {
		t.Errorf("the server saw %d resolves; Resolve should have asked again while the database failed", resolves)
	}
}
