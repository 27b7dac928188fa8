package grpcint_test

import (
	"context"
	"database/sql"
	"errors"
	"net"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/opledger/opledger/dialects"
	"github.com/opledger/opledger/grpcint"
	"github.com/opledger/opledger/internal/testkit/testdb"
	"github.com/opledger/opledger/internal/testkit/wallet/walletpb"
	"github.com/opledger/opledger/keyed"
	"github.com/opledger/opledger/ledger"
	"github.com/opledger/opledger/policy"
)

// kitStatus is a status as the kit's server builds it: the code and an
// ErrorInfo with the kit's domain and reason.
func kitStatus(t *testing.T, c codes.Code, reason string, msg string) error {
	t.Helper()
	st, err := status.New(c, msg).WithDetails(&errdetails.ErrorInfo{Reason: string(reason), Domain: grpcint.ErrorDomain})
	if err != nil {
		t.Fatal(err)
	}
	return st.Err()
}

// earlierCommitted is a fake Wallet server for a keyed call whose
// first run committed: its runs fail with first, then with later (a
// status that says nothing was committed — true of that attempt only);
// a resolve returns the committed reply.
type earlierCommitted struct {
	first, later error
	committed    *walletpb.DepositReply
	runs         atomic.Int32
	resolves     atomic.Int32
}

func (f *earlierCommitted) Deposit(ctx context.Context, req *walletpb.DepositRequest) (*walletpb.DepositReply, error) {
	md, _ := metadata.FromIncomingContext(ctx)
	if len(md.Get(grpcint.ResolveHeader)) > 0 {
		f.resolves.Add(1)
		_ = grpc.SetTrailer(ctx, metadata.Pairs(grpcint.ReplayedHeader, "true", grpcint.ReplayedCodeHeader, "0"))
		return f.committed, nil
	}
	if f.runs.Add(1) == 1 {
		return nil, f.first
	}
	return nil, f.later
}

func (f *earlierCommitted) GetDeposit(context.Context, *walletpb.GetDepositRequest) (*walletpb.DepositReply, error) {
	return nil, status.Error(codes.Unimplemented, "not in this fake")
}

// TestEarlierAttemptMayHaveCommitted is the reduced case: the first
// attempt of a keyed call commits (or another attempt with the key is in
// flight) and its answer is lost; the later attempts fail with a status
// that says nothing was committed. That answer is about the attempt that
// produced it, not about the call: both resolving owners must resolve
// and return the committed answer, whoever made the earlier attempt (the
// kit's interceptor, or grpc-go's retries underneath it).
func TestEarlierAttemptMayHaveCommitted(t *testing.T) {
	rows := []struct {
		name         string
		first, later error
	}{
		{"lost then storage unavailable", status.Error(codes.Unavailable, "injected: the answer was lost after COMMIT"),
			kitStatus(t, codes.Unavailable, keyed.StorageUnavailable.Row().Reason, "the operation ledger's database failed; nothing was committed; retry with the same idempotency key")},
		{"in progress then not storable", kitStatus(t, codes.Aborted, keyed.InProgress.Row().Reason, "another attempt with this idempotency key is in progress"),
			kitStatus(t, codes.Internal, keyed.NotStorable.Row().Reason, "the response cannot be stored in the operation ledger; nothing was committed")},
	}
	for _, row := range rows {
		for _, owner := range []policy.RetryOwner{policy.OwnerApplication, policy.OwnerServiceConfig} {
			t.Run(row.name+"/"+owner.String(), func(t *testing.T) {
				fake := &earlierCommitted{first: row.first, later: row.later,
					committed: &walletpb.DepositReply{DepositId: 42, Account: "a", Amount: 100, Reference: "r"}}
				srv := grpc.NewServer()
				walletpb.RegisterWalletServer(srv, fake)
				lis, err := net.Listen("tcp", "127.0.0.1:0")
				if err != nil {
					t.Fatal(err)
				}
				go func() { _ = srv.Serve(lis) }()
				t.Cleanup(srv.Stop)
				c, pc := ownerClient(t, lis.Addr().String(), owner, fastClient()...)
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				defer cancel()
				reply, err := pc.Deposit(as(ctx, "shop", "key-earlier"), deposit("r", 100))
				if err != nil {
					ci, _ := grpcint.CallInfoOf(err)
					t.Fatalf("%v (%+v), after %d runs and %d resolves on the server: want the committed answer", err, ci, fake.runs.Load(), fake.resolves.Load())
				}
				if !proto.Equal(reply, fake.committed) {
					t.Errorf("reply %v, want %v", reply, fake.committed)
				}
				if st := c.Stats(); st.Resolved != 1 {
					t.Errorf("client stats %+v: want one resolved call", st)
				}
				if owner == policy.OwnerServiceConfig && fake.runs.Load() < 2 {
					t.Errorf("%d runs on the server: grpc-go's retries did not run underneath", fake.runs.Load())
				}
			})
		}
	}
}

// failLaterClaims is a ledger whose first claim is the store's and whose
// later claims fail as a database that has gone away does (a storage
// error the server answers with STORAGE_UNAVAILABLE); Lookup, and so a
// resolve, reads the store.
type failLaterClaims struct {
	*ledger.Store
	claims atomic.Int32
}

func (l *failLaterClaims) Claim(ctx context.Context, tx *sql.Tx, req ledger.ClaimRequest) (*ledger.Claim, error) {
	if l.claims.Add(1) > 1 {
		return nil, &ledger.DBError{Op: "claim", Class: dialects.ClassOther, Err: errors.New("injected: the database is failing over")}
	}
	return l.Store.Claim(ctx, tx, req)
}

// loseFirstAnswer is a front interceptor that runs the first Deposit and
// loses its answer after COMMIT (a plain UNAVAILABLE); every other call
// passes.
func loseFirstAnswer() grpc.UnaryServerInterceptor {
	var runs atomic.Int32
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		md, _ := metadata.FromIncomingContext(ctx)
		reply, err := handler(ctx, req)
		if info.FullMethod == walletpb.DepositMethod && len(md.Get(grpcint.ResolveHeader)) == 0 && runs.Add(1) == 1 && err == nil {
			return nil, status.Error(codes.Unavailable, "injected: the answer was lost after COMMIT")
		}
		return reply, err
	}
}

// TestEarlierAttemptCommittedOnEveryDatabase: on every database, the first
// attempt commits and its answer is lost; every later attempt fails at
// the ledger (STORAGE_UNAVAILABLE). Both resolving owners return the
// committed response, and the deposit exists once.
func TestEarlierAttemptCommittedOnEveryDatabase(t *testing.T) {
	for _, tg := range testdb.Targets() {
		for _, owner := range []policy.RetryOwner{policy.OwnerApplication, policy.OwnerServiceConfig} {
			t.Run(tg.Name+"/"+owner.String(), func(t *testing.T) {
				db := tg.Open(t, 4)
				table, biz := newTables(t, db, tg.Dialect)
				store, err := ledger.New(tg.Dialect, ledger.WithTable(table))
				if err != nil {
					t.Fatal(err)
				}
				l := &failLaterClaims{Store: store}
				e := serveLedger(t, db, l, biz, loseFirstAnswer(), keyed.WithLockWait(300*time.Millisecond))
				c, pc := ownerClient(t, e.addr, owner, fastClient()...)
				ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
				defer cancel()
				reply, err := pc.Deposit(as(ctx, "shop", "key-every-db"), deposit("every-db", 250))
				if err != nil {
					ci, _ := grpcint.CallInfoOf(err)
					t.Fatalf("%v (%+v) after %d claims: want the committed answer", err, ci, l.claims.Load())
				}
				var n int
				var id int64
				if err := db.QueryRowContext(ctx, "SELECT COUNT(*), MIN(id) FROM "+tg.Dialect.QuoteIdent(biz)+" WHERE reference = 'every-db'").Scan(&n, &id); err != nil {
					t.Fatal(err)
				}
				want := &walletpb.DepositReply{DepositId: id, Account: "a", Amount: 250, Reference: "every-db"}
				if n != 1 || !proto.Equal(reply, want) {
					t.Errorf("%d rows; reply %v, want %v", n, reply, want)
				}
				if st := c.Stats(); st.Resolved != 1 {
					t.Errorf("client stats %+v: want one resolved call", st)
				}
				if owner == policy.OwnerServiceConfig && l.claims.Load() < 2 {
					t.Errorf("%d claims: grpc-go's retries did not reach the ledger", l.claims.Load())
				}
			})
		}
	}
}
