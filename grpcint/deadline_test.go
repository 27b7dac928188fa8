package grpcint_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/opledger/opledger/grpcint"
	"github.com/opledger/opledger/internal/testkit/wallet/walletpb"
	"github.com/opledger/opledger/keyed"
	"github.com/opledger/opledger/policy"
)

// loseRunAnswers is a front interceptor that runs every keyed Deposit and
// loses its answer (plain UNAVAILABLE), but answers resolve requests.
func loseRunAnswers(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	md, _ := metadata.FromIncomingContext(ctx)
	reply, err := handler(ctx, req)
	if info.FullMethod == walletpb.DepositMethod && err == nil && len(md.Get(grpcint.ResolveHeader)) == 0 {
		return nil, status.Error(codes.Unavailable, "injected: answer lost")
	}
	return reply, err
}

// TestResolveWhenTheBackoffDoesNotFit: a keyed call whose answer was lost
// after the server committed, with a backoff longer than what is left of
// the deadline, still resolves once at once instead of returning
// CALL_OUTCOME_UNKNOWN with time to spare, for both owners that resolve.
func TestResolveWhenTheBackoffDoesNotFit(t *testing.T) {
	for _, owner := range []policy.RetryOwner{policy.OwnerApplication, policy.OwnerServiceConfig} {
		t.Run(owner.String(), func(t *testing.T) {
			e, _, _ := sqliteEnv(t, nil, loseRunAnswers)
			c, pc := ownerClient(t, e.addr, owner, keyed.WithMaxAttempts(3),
				keyed.WithBackoff(policy.Backoff{Initial: time.Minute, Max: time.Minute}))
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			reply, err := pc.Deposit(as(ctx, "shop", "key-late-resolve"), deposit("late-resolve", 100))
			if err != nil {
				ci, _ := grpcint.CallInfoOf(err)
				t.Fatalf("%v (%+v): want the committed answer, resolved in the time left", err, ci)
			}
			if reply.GetDepositId() == 0 {
				t.Fatal("empty reply")
			}
			if st := c.Stats(); st.Resolved != 1 {
				t.Errorf("client stats %+v: want exactly one resolve that settled the call", st)
			}
			if st := e.server.Stats(); st.Executed != 1 {
				t.Errorf("server stats %+v: want one execution", st)
			}
			if ctx.Err() != nil {
				t.Error("the call used up its deadline")
			}
		})
	}
}

// TestLastChanceResolvesAgain: when the resolves made after the backoff
// stopped fitting fail too (here the first two are lost), the call keeps
// resolving in halves of the time left and returns the committed answer.
func TestLastChanceResolvesAgain(t *testing.T) {
	var resolves atomic.Int32
	front := func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		md, _ := metadata.FromIncomingContext(ctx)
		if len(md.Get(grpcint.ResolveHeader)) > 0 && resolves.Add(1) <= 2 {
			return nil, status.Error(codes.Unavailable, "injected: resolve lost")
		}
		return loseRunAnswers(ctx, req, info, handler)
	}
	e, _, _ := sqliteEnv(t, nil, front)
	c, pc := appClient(t, e.addr, keyed.WithMaxAttempts(3),
		keyed.WithBackoff(policy.Backoff{Initial: time.Minute, Max: time.Minute}))
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if _, err := pc.Deposit(as(ctx, "shop", "key-again"), deposit("again", 100)); err != nil {
		ci, _ := grpcint.CallInfoOf(err)
		t.Fatalf("%v (%+v): want the committed answer", err, ci)
	}
	if st := c.Stats(); st.Resolves != 3 || st.Resolved != 1 {
		t.Errorf("client stats %+v: want 3 resolves, the third settling the call", st)
	}
}
