package grpcint_test

import (
	"context"
	"database/sql"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/opledger/opledger/grpcint"
	"github.com/opledger/opledger/internal/testkit/keyedtest"
	"github.com/opledger/opledger/internal/testkit/testdb"
	"github.com/opledger/opledger/internal/testkit/wallet"
	"github.com/opledger/opledger/internal/testkit/wallet/walletpb"
	"github.com/opledger/opledger/keyed"
	"github.com/opledger/opledger/ledger"
	"github.com/opledger/opledger/policy"
)

func targets() []testdb.Target {
	var out []testdb.Target
	for _, tg := range testdb.Targets() {
		if tg.Name != "postgres/pq" {
			out = append(out, tg)
		}
	}
	return out
}

// TestStatusCodes runs in both orders: Deposit claims first, or (with
// WithClaimAtCommit) at commit; the answers are the same.
func TestStatusCodes(t *testing.T) {
	for _, tg := range targets() {
		for _, atCommit := range []bool{false, true} {
			name := tg.Name + "/claim-first"
			if atCommit {
				name = tg.Name + "/claim-at-commit"
			}
			t.Run(name, func(t *testing.T) {
				e := newEnv(t, tg)
				if atCommit {
					e = newEnvWith(t, tg, keyed.WithClaimAtCommit(walletpb.DepositMethod))
				}
				ctx := context.Background()
				const secret = "secret-key-1"

				_, err := e.pc.Deposit(as(ctx, "alice", ""), deposit("r1", 100))
				wantStatus(t, err, codes.InvalidArgument, keyed.KeyMissing.Row().Reason)

				_, err = e.pc.Deposit(as(ctx, "", secret), deposit("r1", 100))
				wantStatus(t, err, codes.Unauthenticated, keyed.CallerMissing.Row().Reason)

				_, err = e.pc.Deposit(as(ctx, "alice", strings.Repeat("k", 256)), deposit("r1", 100))
				wantStatus(t, err, codes.InvalidArgument, keyed.KeyInvalid.Row().Reason)

				// Resolve before anything ran: NOT_FOUND, safe to run.
				var got walletpb.DepositReply
				err = grpcint.Resolve(as(ctx, "alice", ""), e.conn, walletpb.DepositMethod, secret, &walletpb.DepositRequest{}, &got)
				wantStatus(t, err, codes.NotFound, keyed.NotFound.Row().Reason)

				var trl metadata.MD
				first, err := e.pc.Deposit(as(ctx, "alice", secret), deposit("r1", 100), grpc.Trailer(&trl))
				if err != nil {
					t.Fatal(err)
				}
				if len(trl.Get(grpcint.ReplayedHeader)) != 0 {
					t.Error("first execution marked as replayed")
				}
				// Retry: the same response, replayed.
				again, err := e.pc.Deposit(as(ctx, "alice", secret), deposit("r1", 100), grpc.Trailer(&trl))
				if err != nil {
					t.Fatal(err)
				}
				if !proto.Equal(first, again) || trl.Get(grpcint.ReplayedHeader)[0] != "true" {
					t.Errorf("replay %v (trailer %v), want %v marked replayed", again, trl, first)
				}
				// Resolve: the stored response.
				if err := grpcint.Resolve(as(ctx, "alice", ""), e.conn, walletpb.DepositMethod, secret, &walletpb.DepositRequest{}, &got); err != nil || !proto.Equal(&got, first) {
					t.Errorf("resolve = %v, %v; want %v", &got, err, first)
				}
				// Key reused for another request.
				_, err = e.pc.Deposit(as(ctx, "alice", secret), deposit("r1", 101))
				st := wantStatus(t, err, codes.FailedPrecondition, keyed.KeyReused.Row().Reason)
				if strings.Contains(st.Message(), secret) {
					t.Error("status message contains the raw key")
				}

				// A final error is recorded and replayed with code, message and details.
				_, err1 := e.pc.Deposit(as(ctx, "alice", "k-final"), deposit("r2", 0))
				_, err2 := e.pc.Deposit(as(ctx, "alice", "k-final"), deposit("r2", 0), grpc.Trailer(&trl))
				if status.Code(err1) != codes.InvalidArgument || !proto.Equal(status.Convert(err1).Proto(), status.Convert(err2).Proto()) {
					t.Errorf("final error %v, replay %v", err1, err2)
				}
				if trl.Get(grpcint.ReplayedHeader)[0] != "true" {
					t.Error("replayed final error not marked")
				}
				if s := e.server.Stats(); s.Executed != 2 || s.Replayed != 2 {
					t.Errorf("server stats %+v; want 2 executed, 2 replayed", s)
				}
			})
		}
	}
}

// countingRecorder counts Record calls.
type countingRecorder struct {
	*ledger.Store
	records atomic.Int64
}

func (c *countingRecorder) Record(ctx context.Context, tx *sql.Tx, req ledger.ClaimRequest, r ledger.Result) (*ledger.Claim, error) {
	c.records.Add(1)
	return c.Store.Record(ctx, tx, req, r)
}

// WithClaimAtCommit names keyed methods of the catalog only.
func TestClaimAtCommitUnknownMethod(t *testing.T) {
	tg := targets()[0]
	db := tg.Open(t, 2)
	table, _ := newTables(t, db, tg.Dialect)
	store, err := ledger.New(tg.Dialect, ledger.WithTable(table))
	if err != nil {
		t.Fatal(err)
	}
	cat, err := wallet.Catalog()
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range []string{"/no.Such/Method", walletpb.GetDepositMethod} {
		if _, err := grpcint.NewServer(db, store, cat, grpcint.CallerFromTrustedHeader(callerHeader), keyed.WithClaimAtCommit(m)); !errors.Is(err, grpcint.ErrInvalidConfig) {
			t.Errorf("WithClaimAtCommit(%q): %v, want ErrInvalidConfig", m, err)
		}
	}
	if _, err := grpcint.NewServer(db, store, cat, grpcint.CallerFromTrustedHeader(callerHeader), keyed.WithClaimAtCommit()); !errors.Is(err, grpcint.ErrInvalidConfig) {
		t.Errorf("WithClaimAtCommit(): %v, want ErrInvalidConfig", err)
	}
}

func TestInProgressAndResolve(t *testing.T) {
	for _, tg := range targets() {
		t.Run(tg.Name, func(t *testing.T) {
			e := newEnv(t, tg)
			ctx := context.Background()
			done := make(chan error, 1)
			var first *walletpb.DepositReply
			go func() {
				var err error
				first, err = e.pc.Deposit(as(ctx, "alice", "k-block"), deposit("block", 5))
				done <- err
			}()
			<-e.gate.entered
			var trl metadata.MD
			_, err := e.pc.Deposit(as(ctx, "alice", "k-block"), deposit("block", 5), grpc.Trailer(&trl))
			wantStatus(t, err, codes.Aborted, keyed.InProgress.Row().Reason)
			if p := trl.Get(policy.PushbackHeader); len(p) != 1 || p[0] != "50" {
				t.Errorf("pushback %v, want [50]", p)
			}
			var got walletpb.DepositReply
			err = grpcint.Resolve(as(ctx, "alice", ""), e.conn, walletpb.DepositMethod, "k-block", &walletpb.DepositRequest{}, &got)
			wantStatus(t, err, codes.Aborted, keyed.InProgress.Row().Reason)
			close(e.gate.release)
			if err := <-done; err != nil {
				t.Fatal(err)
			}
			if err := grpcint.Resolve(as(ctx, "alice", ""), e.conn, walletpb.DepositMethod, "k-block", &walletpb.DepositRequest{}, &got); err != nil || !proto.Equal(&got, first) {
				t.Errorf("resolve after commit = %v, %v; want %v", &got, err, first)
			}
		})
	}
}

// TestCallerIsolation: two callers with the same key never see each
// other's results.
func TestCallerIsolation(t *testing.T) {
	e := newEnv(t, testdb.Targets()[0])
	ctx := context.Background()
	a, err := e.pc.Deposit(as(ctx, "alice", "shared-key"), deposit("alice-1", 10))
	if err != nil {
		t.Fatal(err)
	}
	b, err := e.pc.Deposit(as(ctx, "bob", "shared-key"), deposit("bob-1", 20))
	if err != nil {
		t.Fatal(err)
	}
	if a.GetDepositId() == b.GetDepositId() || b.GetReference() != "bob-1" {
		t.Errorf("bob got %v after alice got %v with the same key", b, a)
	}
	// The same request under the same key by another caller runs again.
	c, err := e.pc.Deposit(as(ctx, "carol", "shared-key"), deposit("alice-1", 10))
	if err != nil {
		t.Fatal(err)
	}
	if c.GetDepositId() == a.GetDepositId() {
		t.Error("carol was given alice's stored result")
	}
	var got walletpb.DepositReply
	err = grpcint.Resolve(as(ctx, "dave", ""), e.conn, walletpb.DepositMethod, "shared-key", &walletpb.DepositRequest{}, &got)
	wantStatus(t, err, codes.NotFound, keyed.NotFound.Row().Reason)
}

// TestClientGeneratesOneKeyPerCall: without a key from the caller, the
// application-owned client generates one, the same on every attempt.
func TestClientGeneratesOneKeyPerCall(t *testing.T) {
	e := newEnv(t, testdb.Targets()[0])
	c, pc := appClient(t, e.addr)
	ctx := metadata.AppendToOutgoingContext(context.Background(), callerHeader, "alice")
	r1, err := pc.Deposit(ctx, deposit("g1", 1))
	if err != nil {
		t.Fatal(err)
	}
	r2, err := pc.Deposit(ctx, deposit("g1", 1))
	if err != nil {
		t.Fatal(err)
	}
	if r1.GetDepositId() == r2.GetDepositId() {
		t.Error("two logical calls shared a key")
	}
	if s := c.Stats(); s.Calls != 2 || s.Attempts != 2 {
		t.Errorf("client stats %+v", s)
	}
	// Non-keyed methods pass through the server interceptor.
	got, err := pc.GetDeposit(ctx, &walletpb.GetDepositRequest{DepositId: r1.GetDepositId()})
	if err != nil || !proto.Equal(got, r1) {
		t.Errorf("GetDeposit = %v, %v", got, err)
	}
	// A resolve of a method that is not keyed never runs it.
	err = grpcint.Resolve(ctx, e.conn, walletpb.GetDepositMethod, "k", &walletpb.GetDepositRequest{DepositId: r1.GetDepositId()}, &walletpb.DepositReply{})
	wantStatus(t, err, codes.InvalidArgument, keyed.RequestUnreadable.Row().Reason)
}

// TestFinalErrorSaysAttempts: a call that fails for good keeps its code
// and says how many attempts were made.
func TestFinalErrorSaysAttempts(t *testing.T) {
	e := newEnv(t, testdb.Targets()[0])
	_, pc := appClient(t, e.addr, keyed.WithMaxAttempts(3),
		keyed.WithBackoff(policy.Backoff{Initial: time.Millisecond, Max: 2 * time.Millisecond}))
	// No caller: UNAUTHENTICATED is not retried, and the error is the
	// server's own.
	_, err := pc.Deposit(context.Background(), deposit("x", 1))
	wantStatus(t, err, codes.Unauthenticated, keyed.CallerMissing.Row().Reason)
	if ci, ok := grpcint.CallInfoOf(err); !ok || ci.Attempts != 1 || ci.Next != policy.DoNotRetry || ci.Key == "" || ci.Resolves != 0 {
		t.Errorf("CallInfo of a keyed call refused by the server: %+v %v; want 1 attempt, do-not-retry, the key", ci, ok)
	}
	// GetDeposit of a missing id: NOT_FOUND, never retried.
	_, err = pc.GetDeposit(context.Background(), &walletpb.GetDepositRequest{DepositId: 999})
	if status.Code(err) != codes.NotFound {
		t.Fatalf("err %v", err)
	}
	if _, ok := grpcint.CallInfoOf(err); ok {
		t.Errorf("a call that is not keyed and was not retried is annotated: %v", err)
	}

	// Nothing listens: UNAVAILABLE before sending is retried up to the
	// bound, and the final error keeps its code and says so.
	_, dead := appClient(t, "127.0.0.1:1", keyed.WithMaxAttempts(3),
		keyed.WithBackoff(policy.Backoff{Initial: time.Millisecond, Max: 2 * time.Millisecond}))
	_, err = dead.GetDeposit(context.Background(), &walletpb.GetDepositRequest{DepositId: 1})
	ci, _ := grpcint.CallInfoOf(err)
	if status.Code(err) != codes.Unavailable || ci.Attempts != 3 || !strings.Contains(err.Error(), "after 3 attempts") ||
		ci.Reason != keyed.NotSent.Row().Reason || ci.Decision != "max-attempts" {
		t.Errorf("err %v (%+v), want UNAVAILABLE after 3 attempts, not sent, max-attempts", err, ci)
	}
	// The same for a keyed call: nothing was ever sent, so the error is
	// definite (nothing committed; calling again is safe) and carries the
	// key.
	_, err = dead.Deposit(as(context.Background(), "alice", "k-dead"), deposit("dead", 1))
	ci, _ = grpcint.CallInfoOf(err)
	if status.Code(err) != codes.Unavailable || ci.Attempts != 3 || ci.Reason != keyed.NotSent.Row().Reason || ci.Next != policy.Retry || ci.Key != "k-dead" {
		t.Errorf("keyed call to a dead address: %v (%+v), want 3 attempts, not sent, retry, key k-dead", err, ci)
	}
}

// TestNewServerFor: the server runs on any keyed.Transactions: its calls,
// its claim-at-commit methods and its resolves go through the runners the
// seam builds, and the handler finds its transaction in its context.
func TestNewServerFor(t *testing.T) {
	ctx := context.Background()
	tg := targets()[0]
	db := tg.Open(t, 4)
	table, biz := newTables(t, db, tg.Dialect)
	store, err := ledger.New(tg.Dialect, ledger.WithTable(table))
	if err != nil {
		t.Fatal(err)
	}
	cat, err := wallet.Catalog()
	if err != nil {
		t.Fatal(err)
	}
	tx := &keyedtest.Counting{Transactions: keyed.SQL(db, store)}
	s, err := grpcint.NewServerFor(tx, cat, grpcint.CallerFromTrustedHeader(callerHeader), keyed.WithClaimAtCommit(walletpb.DepositMethod))
	if err != nil {
		t.Fatal(err)
	}
	if tx.Runners.Load() != 3 {
		t.Fatalf("%d runners built; want the calls', the claim-at-commit methods' and the resolve probe's", tx.Runners.Load())
	}
	e := serveKit(t, db, tg.Dialect, biz, s, nil)
	first, err := e.pc.Deposit(as(ctx, "alice", "k"), deposit("r", 1))
	if err != nil {
		t.Fatal(err)
	}
	again, err := e.pc.Deposit(as(ctx, "alice", "k"), deposit("r", 1))
	if err != nil || again.GetDepositId() != first.GetDepositId() || e.rows(t, "r") != 1 {
		t.Fatalf("replay %v, %v", again, err)
	}
	var reply walletpb.DepositReply
	if err := grpcint.Resolve(as(ctx, "alice", ""), e.conn, walletpb.DepositMethod, "k", &walletpb.DepositRequest{}, &reply); err != nil || reply.GetDepositId() != first.GetDepositId() {
		t.Fatalf("resolve %v, %v", &reply, err)
	}
	if err := grpcint.Resolve(as(ctx, "alice", ""), e.conn, walletpb.DepositMethod, "never", &walletpb.DepositRequest{}, &reply); grpcint.ReasonOf(err) != keyed.NotFound.Row().Reason {
		t.Fatalf("resolve of a key never used: %v", err)
	}
	if n := tx.Runs.Load(); n != 3 { // two calls and the probe of the resolve that found nothing
		t.Errorf("%d runs through the seam, want 3", n)
	}
	if _, err := grpcint.NewServerFor(nil, cat, grpcint.CallerFromTrustedHeader(callerHeader)); !errors.Is(err, grpcint.ErrInvalidConfig) {
		t.Errorf("nil transactions: %v", err)
	}
	if _, err := grpcint.NewServerFor(keyed.SQL(db, nil), cat, grpcint.CallerFromTrustedHeader(callerHeader)); !errors.Is(err, grpcint.ErrInvalidConfig) {
		t.Errorf("transactions without a dialect: %v", err)
	}
}
