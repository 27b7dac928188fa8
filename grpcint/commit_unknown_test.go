package grpcint_test

import (
	"context"
	"database/sql"
	"net/url"
	"os"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/proto"

	"github.com/opledger/opledger/dialects/postgres"
	"github.com/opledger/opledger/grpcint"
	"github.com/opledger/opledger/internal/testkit/testdb"
	"github.com/opledger/opledger/internal/testkit/wallet/walletpb"
	"github.com/opledger/opledger/keyed"
)

// TestCommitOutcomeUnknown: the connection breaks while COMMIT is in
// flight, through lib/pq and pgx. The server answers UNAVAILABLE with
// COMMIT_OUTCOME_UNKNOWN; the application-owned client
// resolves before doing anything else and gets the committed response;
// the effect exists exactly once.
func TestCommitOutcomeUnknown(t *testing.T) { testCommitOutcomeUnknown(t) }

func testCommitOutcomeUnknown(t *testing.T) {
	dsn := os.Getenv(testdb.EnvPostgres)
	if dsn == "" {
		testdb.Skip(t, testdb.EnvPostgres)
	}
	for _, drv := range []string{"postgres", "pgx"} {
		t.Run(drv, func(t *testing.T) { commitOutcomeUnknown(t, dsn, drv) })
	}
}

func commitOutcomeUnknown(t *testing.T, dsn, driver string) {
	u, err := url.Parse(dsn)
	if err != nil {
		t.Fatal(err)
	}
	proxy := testdb.NewCutProxy(t, u.Host)
	u.Host = proxy.Addr()
	db, err := sql.Open(driver, u.String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	d := postgres.New()
	table, biz := newTables(t, db, d)
	e := serve(t, db, d, table, biz)
	ctx := context.Background()

	// A plain connection sees the server's answer.
	raw := e.conn
	proxy.Arm()
	_, err = walletpb.NewWalletClient(raw).Deposit(as(ctx, "alice", "cut-1"), deposit("cut-1", 7))
	wantStatus(t, err, codes.Unavailable, keyed.CommitUnknown.Row().Reason)
	if proxy.Cuts() != 1 {
		t.Fatalf("proxy cut %d connections, want 1", proxy.Cuts())
	}
	var stored walletpb.DepositReply
	if err := grpcint.Resolve(as(ctx, "alice", ""), raw, walletpb.DepositMethod, "cut-1", &walletpb.DepositRequest{}, &stored); err != nil {
		t.Fatalf("resolve after the cut: %v (the COMMIT reached the database)", err)
	}

	// The kit's client resolves on its own.
	client, pc := appClient(t, e.addr)
	proxy.Arm()
	cctx := metadata.AppendToOutgoingContext(ctx, callerHeader, "alice")
	reply, err := pc.Deposit(cctx, deposit("cut-2", 8))
	if err != nil {
		t.Fatalf("deposit through the application-owned client: %v", err)
	}
	if proxy.Cuts() != 2 {
		t.Fatalf("proxy cut %d connections, want 2", proxy.Cuts())
	}
	if s := client.Stats(); s.Resolved != 1 {
		t.Errorf("client stats %+v, want one resolved call", s)
	}
	var n int
	var id int64
	if err := db.QueryRowContext(ctx, "SELECT COUNT(*), MIN(id) FROM "+d.QuoteIdent(biz)+" WHERE reference = 'cut-2'").Scan(&n, &id); err != nil {
		t.Fatal(err)
	}
	want := &walletpb.DepositReply{DepositId: id, Account: "a", Amount: 8, Reference: "cut-2"}
	if n != 1 || !proto.Equal(reply, want) {
		t.Errorf("%d rows for cut-2; reply %v, want %v", n, reply, want)
	}
}
