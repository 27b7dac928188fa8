package grpcint_test

import (
	"context"
	"database/sql"
	"errors"
	"regexp"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/reflect/protoregistry"

	"github.com/opledger/opledger/dialects"
	"github.com/opledger/opledger/grpcint"
	"github.com/opledger/opledger/internal/keyedcore/retry"
	"github.com/opledger/opledger/internal/testkit/keyedtest"
	"github.com/opledger/opledger/internal/testkit/testdb"
	"github.com/opledger/opledger/internal/testkit/wallet/walletpb"
	"github.com/opledger/opledger/keyed"
	"github.com/opledger/opledger/ledger"
	"github.com/opledger/opledger/policy"
	"github.com/opledger/opledger/txmiddleware"
)

// sqliteEnv serves the example on SQLite with the given ledger wrapper,
// front interceptor and options.
func sqliteEnv(t *testing.T, wrap func(*ledger.Store) ledger.Ledger, front grpc.UnaryServerInterceptor, opts ...keyed.ServerOption) (*env, *sql.DB, *ledger.Store) {
	t.Helper()
	tg := testdb.Targets()[0]
	db := tg.Open(t, 8)
	table, biz := newTables(t, db, tg.Dialect)
	store, err := ledger.New(tg.Dialect, ledger.WithTable(table))
	if err != nil {
		t.Fatal(err)
	}
	var l ledger.Ledger = store
	if wrap != nil {
		l = wrap(store)
	}
	return serveLedger(t, db, l, biz, front, append([]keyed.ServerOption{keyed.WithLockWait(300 * time.Millisecond),
		keyed.WithInProgressPushback(20 * time.Millisecond)}, opts...)...), db, store
}

func fastClient() []keyed.ClientOption {
	return []keyed.ClientOption{keyed.WithMaxAttempts(3),
		keyed.WithBackoff(policy.Backoff{Initial: time.Millisecond, Max: 5 * time.Millisecond})}
}

// wantCallInfo checks the client's reading of a keyed call's error.
func wantCallInfo(t *testing.T, err error, reason string, next policy.Action) keyed.CallInfo {
	t.Helper()
	ci, ok := grpcint.CallInfoOf(err)
	if !ok || ci.Reason != reason || ci.Next != next || grpcint.ReasonOf(err) != reason {
		t.Fatalf("err %v: CallInfo %+v (%v), ReasonOf %q; want reason %s, next %s", err, ci, ok, grpcint.ReasonOf(err), reason, next)
	}
	if ci.Key == "" || ci.Attempts < 1 {
		t.Errorf("CallInfo %+v: want the key and the attempts", ci)
	}
	return ci
}

// dropAnswers is a front interceptor that runs every keyed Deposit and
// then loses its answer (plain UNAVAILABLE), resolves included.
func dropAnswers(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	if _, err := handler(ctx, req); info.FullMethod == walletpb.DepositMethod && err == nil {
		return nil, status.Error(codes.Unavailable, "injected: answer lost")
	}
	return handler(ctx, req)
}

// TestOutcomeRows produces every outcome of package keyed's
// classification through a real server on SQLite (PostgreSQL for the one
// that needs a cut COMMIT) and checks gRPC's rendering of it: its code,
// its reason and what the kit's client makes of it; or, for an outcome
// gRPC does not answer itself, whose status the call ends with.
func TestOutcomeRows(t *testing.T) {
	ctx := context.Background()
	keyedtest.Rows(t, map[keyed.Outcome]func(t *testing.T){
		keyed.Executed: func(t *testing.T) {
			e, _, _ := sqliteEnv(t, nil, nil)
			var trl metadata.MD
			if _, err := e.pc.Deposit(as(ctx, "alice", "k"), deposit("r", 1), grpc.Trailer(&trl)); err != nil {
				t.Fatal(err)
			}
			if len(trl.Get(grpcint.ReplayedHeader)) != 0 || e.server.Stats().Executed != 1 || e.rows(t, "r") != 1 {
				t.Errorf("trailer %v, stats %+v: want one execution, not a replay", trl, e.server.Stats())
			}
		},
		keyed.Replayed: func(t *testing.T) {
			e, _, _ := sqliteEnv(t, nil, nil)
			first, err := e.pc.Deposit(as(ctx, "alice", "k"), deposit("r", 1))
			if err != nil {
				t.Fatal(err)
			}
			var trl metadata.MD
			again, err := e.pc.Deposit(as(ctx, "alice", "k"), deposit("r", 1), grpc.Trailer(&trl))
			if err != nil || again.GetDepositId() != first.GetDepositId() {
				t.Fatalf("replay %v, %v; first %v", again, err, first)
			}
			if got := trl.Get(grpcint.ReplayedHeader); len(got) != 1 || got[0] != "true" || e.server.Stats().Replayed != 1 || e.rows(t, "r") != 1 {
				t.Errorf("trailer %v, stats %+v", trl, e.server.Stats())
			}
		},
		keyed.NotStored: func(t *testing.T) {
			e, _, _ := sqliteEnv(t, nil, nil)
			_, err := e.pc.Deposit(as(ctx, "alice", "k"), deposit("not-final", 1))
			wantStatus(t, err, codes.Unavailable, "")
			if e.rows(t, "not-final") != 0 || e.server.Stats().Failed != 1 {
				t.Fatalf("the handler's writes survived a status that is not final: %+v", e.server.Stats())
			}
			// Nothing was recorded: the same key runs the handler again.
			if _, err := e.pc.Deposit(as(ctx, "alice", "k"), deposit("not-final", 1)); status.Code(err) != codes.Unavailable || e.server.Stats().Failed != 2 {
				t.Errorf("again: %v, %+v", err, e.server.Stats())
			}
		},
		keyed.HandlerPanic: func(t *testing.T) {
			recovered := func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (resp any, err error) {
				defer func() {
					if p := recover(); p != nil {
						err = status.Errorf(codes.Internal, "recovered: %v", p)
					}
				}()
				return handler(ctx, req)
			}
			e, _, _ := sqliteEnv(t, nil, recovered)
			_, err := e.pc.Deposit(as(ctx, "alice", "k"), deposit("panic", 1))
			wantStatus(t, err, codes.Internal, "")
			if e.rows(t, "panic") != 0 {
				t.Fatal("a panicking handler's writes survived")
			}
			if _, err := e.pc.Deposit(as(ctx, "alice", "k"), deposit("panic", 1)); status.Code(err) != codes.Internal || e.rows(t, "panic") != 0 {
				t.Errorf("again: %v: want the handler to run (and panic) again", err)
			}
		},
		keyed.RequestTooLarge: func(t *testing.T) { testRequestTooLarge(t) },
		keyed.RequestUnreadable: func(t *testing.T) {
			// Something in front of the kit's interceptor hands it a request
			// that is not a protobuf message: it cannot be fingerprinted.
			swap := func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
				return handler(ctx, struct{ Reference string }{"r"})
			}
			e, _, _ := sqliteEnv(t, nil, swap)
			_, err := e.pc.Deposit(as(ctx, "alice", "k"), deposit("r", 1))
			wantStatus(t, err, codes.InvalidArgument, keyed.RequestUnreadable.Row().Reason)
		},
		keyed.RequestEnded: func(t *testing.T) {
			answers, ended := make(chan error, 1), make(chan struct{})
			capture := func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
				go func() { <-ctx.Done(); close(ended) }()
				resp, err := handler(ctx, req)
				answers <- err
				return resp, err
			}
			e, _, _ := sqliteEnv(t, nil, capture)
			cctx, cancel := context.WithCancel(as(ctx, "alice", "k"))
			done := make(chan error, 1)
			go func() { _, err := e.pc.Deposit(cctx, deposit("block", 1)); done <- err }()
			<-e.gate.entered
			cancel()
			if err := <-done; status.Code(err) != codes.Canceled {
				t.Fatalf("client: %v", err)
			}
			<-ended               // the server saw the cancellation
			close(e.gate.release) // the handler runs in a context that has ended
			err := <-answers
			wantStatus(t, err, codes.Canceled, "")
			if e.rows(t, "block") != 0 || e.server.Stats().Failed != 1 {
				t.Errorf("stats %+v: nothing committed, one failure", e.server.Stats())
			}
		},
		keyed.ResponseTooLarge: func(t *testing.T) {
			// gRPC never answers it: a response is a message, bounded only by
			// the ledger's limit, which answers RESULT_NOT_STORABLE.
			if _, _, own, _ := grpcint.Rendering(keyed.ResponseTooLarge); own == "" {
				t.Fatal("gRPC renders response-too-large with a status of its own")
			}
			testNotStorable(t)
		},
		keyed.CallerMissing: func(t *testing.T) {
			e, _, _ := sqliteEnv(t, nil, nil)
			_, pc := appClient(t, e.addr, fastClient()...)
			_, err := pc.Deposit(as(ctx, "", "k"), deposit("r", 1))
			wantStatus(t, err, codes.Unauthenticated, keyed.CallerMissing.Row().Reason)
			wantCallInfo(t, err, keyed.CallerMissing.Row().Reason, policy.DoNotRetry)
		},
		keyed.KeyMissing: func(t *testing.T) {
			e, _, _ := sqliteEnv(t, nil, nil)
			_, err := e.pc.Deposit(as(ctx, "alice", ""), deposit("r", 1))
			wantStatus(t, err, codes.InvalidArgument, keyed.KeyMissing.Row().Reason)
		},
		keyed.KeyInvalid: func(t *testing.T) {
			e, _, _ := sqliteEnv(t, nil, nil)
			twice := metadata.AppendToOutgoingContext(as(ctx, "alice", "k1"), grpcint.KeyHeader, "k2")
			_, err := e.pc.Deposit(twice, deposit("r", 1))
			wantStatus(t, err, codes.InvalidArgument, keyed.KeyInvalid.Row().Reason)
			_, pc := appClient(t, e.addr, fastClient()...)
			_, err = pc.Deposit(as(ctx, "alice", strings.Repeat("k", 300)), deposit("r", 1))
			wantCallInfo(t, err, keyed.KeyInvalid.Row().Reason, policy.DoNotRetry)
		},
		keyed.NotKeyed: func(t *testing.T) {
			e, _, _ := sqliteEnv(t, nil, nil)
			err := grpcint.Resolve(as(ctx, "alice", ""), e.conn, walletpb.GetDepositMethod, "k", &walletpb.GetDepositRequest{}, &walletpb.DepositReply{})
			wantStatus(t, err, codes.InvalidArgument, keyed.RequestUnreadable.Row().Reason)
		},
		keyed.KeyReused: func(t *testing.T) {
			e, _, _ := sqliteEnv(t, nil, nil)
			_, pc := appClient(t, e.addr, fastClient()...)
			if _, err := pc.Deposit(as(ctx, "alice", "k"), deposit("r", 1)); err != nil {
				t.Fatal(err)
			}
			_, err := pc.Deposit(as(ctx, "alice", "k"), deposit("r", 2))
			wantStatus(t, err, codes.FailedPrecondition, keyed.KeyReused.Row().Reason)
			wantCallInfo(t, err, keyed.KeyReused.Row().Reason, policy.DoNotRetry)
		},
		keyed.InProgress: func(t *testing.T) {
			e, _, _ := sqliteEnv(t, nil, nil)
			done := make(chan error, 1)
			go func() { _, err := e.pc.Deposit(as(ctx, "alice", "k"), deposit("block", 1)); done <- err }()
			<-e.gate.entered
			_, err := e.pc.Deposit(as(ctx, "alice", "k"), deposit("block", 1))
			wantStatus(t, err, codes.Aborted, keyed.InProgress.Row().Reason)
			// The kit's client gets the same, retries with the same key after
			// the pushback, and gets the answer once the first attempt ends.
			c, pc := appClient(t, e.addr, keyed.WithMaxAttempts(50),
				keyed.WithBackoff(policy.Backoff{Initial: time.Millisecond, Max: 5 * time.Millisecond}))
			got := make(chan error, 1)
			go func() { _, err := pc.Deposit(as(ctx, "alice", "k"), deposit("block", 1)); got <- err }()
			for deadline := time.Now().Add(10 * time.Second); c.Stats().Retries == 0; time.Sleep(5 * time.Millisecond) {
				if time.Now().After(deadline) {
					t.Fatalf("the kit's client did not retry behind an attempt in progress: %+v", c.Stats())
				}
			}
			close(e.gate.release)
			if err := <-done; err != nil {
				t.Fatal(err)
			}
			if err := <-got; err != nil {
				t.Errorf("kit client behind an attempt in progress: %v; want the answer", err)
			}
		},
		keyed.Incomplete: func(t *testing.T) {
			e, db, store := sqliteEnv(t, nil, nil)
			// An entry committed without a result, outside the kit.
			tx, err := db.Begin()
			if err != nil {
				t.Fatal(err)
			}
			fp, _ := grpcint.RequestFingerprint(deposit("r", 1))
			if _, err := store.Claim(ctx, tx, ledger.ClaimRequest{Identity: testdb.ID(t, "header:alice", walletpb.DepositMethod, "k"), Fingerprint: fp}); err != nil {
				t.Fatal(err)
			}
			if err := tx.Commit(); err != nil {
				t.Fatal(err)
			}
			_, pc := appClient(t, e.addr, fastClient()...)
			_, err = pc.Deposit(as(ctx, "alice", "k"), deposit("r", 1))
			wantStatus(t, err, codes.FailedPrecondition, keyed.Incomplete.Row().Reason)
			wantCallInfo(t, err, keyed.Incomplete.Row().Reason, policy.DoNotRetry)
		},
		keyed.KeyExpired: func(t *testing.T) { testLateRetry(t, testdb.Targets()[0]) },
		keyed.TxAborted: func(t *testing.T) {
			serialization := &ledger.DBError{Op: "claim", Class: dialects.ClassSerialization, Err: errors.New("could not serialize")}
			e, _, _ := sqliteEnv(t, func(s *ledger.Store) ledger.Ledger { return testdb.FaultyLedger{Store: s, ClaimErr: serialization} }, nil,
				keyed.WithTxOptions(txmiddleware.WithMaxTxAttempts(2), txmiddleware.WithTxBackoff(time.Millisecond, time.Millisecond)))
			_, pc := appClient(t, e.addr, fastClient()...)
			_, err := pc.Deposit(as(ctx, "alice", "k"), deposit("r", 1))
			wantStatus(t, err, codes.Aborted, keyed.TxAborted.Row().Reason)
			ci := wantCallInfo(t, err, keyed.TxAborted.Row().Reason, policy.Retry)
			if ci.Attempts != 3 || ci.Decision != "max-attempts" {
				t.Errorf("CallInfo %+v: want 3 attempts (retried, nothing committed), max-attempts", ci)
			}
		},
		keyed.StorageUnavailable: func(t *testing.T) {
			conn := &ledger.DBError{Op: "claim", Class: dialects.ClassConnection, Err: errors.New("connection refused")}
			e, _, _ := sqliteEnv(t, func(s *ledger.Store) ledger.Ledger { return testdb.FaultyLedger{Store: s, ClaimErr: conn} }, nil,
				keyed.WithTxOptions(txmiddleware.WithMaxTxAttempts(1)))
			_, pc := appClient(t, e.addr, fastClient()...)
			_, err := pc.Deposit(as(ctx, "alice", "k"), deposit("r", 1))
			wantStatus(t, err, codes.Unavailable, keyed.StorageUnavailable.Row().Reason)
			ci := wantCallInfo(t, err, keyed.StorageUnavailable.Row().Reason, policy.Retry)
			if ci.Resolves != 0 {
				t.Errorf("CallInfo %+v: nothing committed, so no resolve is needed", ci)
			}
		},
		keyed.StorageBusy: func(t *testing.T) { testPoolOfOne(t, testdb.Targets()[0]) },
		keyed.CommitUnknown: func(t *testing.T) {
			testCommitOutcomeUnknown(t)
		},
		keyed.NotStorable: testNotStorable,
		keyed.LedgerMisuse: func(t *testing.T) {
			e, _, _ := sqliteEnv(t, func(s *ledger.Store) ledger.Ledger {
				return testdb.FaultyLedger{Store: s, CompleteErr: ledger.ErrNotAcquired}
			}, nil)
			_, pc := appClient(t, e.addr, fastClient()...)
			_, err := pc.Deposit(as(ctx, "alice", "k"), deposit("r", 1))
			wantStatus(t, err, codes.Internal, keyed.LedgerMisuse.Row().Reason)
			wantCallInfo(t, err, keyed.LedgerMisuse.Row().Reason, policy.DoNotRetry)
		},
		keyed.ResultUnreadable: func(t *testing.T) {
			e, _, _ := sqliteEnv(t, nil, nil, keyed.WithTypeResolver(new(protoregistry.Types)))
			if _, err := e.pc.Deposit(as(ctx, "alice", "k"), deposit("r", 1)); err != nil {
				t.Fatal(err)
			}
			_, pc := appClient(t, e.addr, fastClient()...)
			_, err := pc.Deposit(as(ctx, "alice", "k"), deposit("r", 1)) // a replay
			wantStatus(t, err, codes.Internal, keyed.ResultUnreadable.Row().Reason)
			wantCallInfo(t, err, keyed.ResultUnreadable.Row().Reason, policy.DoNotRetry)
		},
		keyed.NotFound: func(t *testing.T) {
			e, _, _ := sqliteEnv(t, nil, nil)
			err := grpcint.Resolve(as(ctx, "alice", ""), e.conn, walletpb.DepositMethod, "never-sent", &walletpb.DepositRequest{}, &walletpb.DepositReply{})
			wantStatus(t, err, codes.NotFound, keyed.NotFound.Row().Reason)
		},
		keyed.KeyedStream: testKeyedStreamRefused,
		keyed.NotExecuted: func(t *testing.T) {
			shed := func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
				return nil, grpcint.NotExecuted(codes.Unavailable, "shedding load")
			}
			e, _, _ := sqliteEnv(t, nil, shed)
			_, pc := appClient(t, e.addr, fastClient()...)
			_, err := pc.Deposit(as(ctx, "alice", "k"), deposit("r", 1))
			ci := wantCallInfo(t, err, keyed.NotExecuted.Row().Reason, policy.Retry)
			if ci.Attempts != 3 || ci.Resolves != 0 || status.Code(err) != codes.Unavailable {
				t.Errorf("CallInfo %+v (%v): want 3 runs, no resolve", ci, err)
			}
			// With a code another attempt will not change, the client stops.
			deny := func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
				return nil, grpcint.NotExecuted(codes.Unauthenticated, "bad token")
			}
			e, _, _ = sqliteEnv(t, nil, deny)
			_, pc = appClient(t, e.addr, fastClient()...)
			_, err = pc.Deposit(as(ctx, "alice", "k"), deposit("r", 1))
			ci = wantCallInfo(t, err, keyed.NotExecuted.Row().Reason, policy.Retry)
			if ci.Attempts != 1 || ci.Resolves != 0 || status.Code(err) != codes.Unauthenticated {
				t.Errorf("CallInfo %+v (%v): want 1 run, no resolve", ci, err)
			}
		},
		keyed.NotSent: func(t *testing.T) {
			_, dead := appClient(t, "127.0.0.1:1", fastClient()...)
			_, err := dead.Deposit(as(ctx, "alice", "k"), deposit("r", 1))
			wantCallInfo(t, err, keyed.NotSent.Row().Reason, policy.Retry)
		},
		keyed.ServerAnswered: func(t *testing.T) {
			e, _, _ := sqliteEnv(t, nil, nil)
			_, pc := appClient(t, e.addr, fastClient()...)
			_, err := pc.Deposit(as(ctx, "alice", "k"), deposit("r", 0)) // amount 0: INVALID_ARGUMENT, final
			if status.Code(err) != codes.InvalidArgument {
				t.Fatalf("err %v", err)
			}
			wantCallInfo(t, err, keyed.ServerAnswered.Row().Reason, policy.DoNotRetry)
			_, again := pc.Deposit(as(ctx, "alice", "k"), deposit("r", 0))
			if status.Code(again) != codes.InvalidArgument || e.server.Stats().Replayed != 1 {
				t.Errorf("retry of a final error: %v, server %+v; want it replayed", again, e.server.Stats())
			}
		},
		keyed.CallOutcomeUnknown: func(t *testing.T) {
			e, _, _ := sqliteEnv(t, nil, dropAnswers)
			// No owner resolves on the mesh's channel: the error says the
			// outcome is unknown and carries the key.
			mesh, pc := ownerClient(t, e.addr, policy.OwnerMesh)
			_, err := pc.Deposit(as(ctx, "alice", "k-mesh"), deposit("r", 1))
			ci := wantCallInfo(t, err, keyed.CallOutcomeUnknown.Row().Reason, policy.ResolveFirst)
			if ci.Key != "k-mesh" || mesh.Stats().Ambiguous != 1 {
				t.Errorf("CallInfo %+v, stats %+v: want the key and one ambiguous call", ci, mesh.Stats())
			}
			// The application owner resolves until its deadline; every
			// answer is lost here, so the deadline ends it.
			app, pc := appClient(t, e.addr, fastClient()...)
			dctx, cancel := context.WithTimeout(as(ctx, "alice", "k-app"), 300*time.Millisecond)
			defer cancel()
			_, err = pc.Deposit(dctx, deposit("r2", 1))
			ci = wantCallInfo(t, err, keyed.CallOutcomeUnknown.Row().Reason, policy.ResolveFirst)
			if ci.Resolves == 0 || ci.Decision != "deadline" || app.Stats().Ambiguous != 1 {
				t.Errorf("CallInfo %+v, stats %+v: want resolves until the deadline", ci, app.Stats())
			}
		},
	})
}

// testNotStorable: a response over the ledger's limit is refused with
// RESULT_NOT_STORABLE, neither retried nor committed.
func testNotStorable(t *testing.T) {
	ctx := context.Background()
	tg := testdb.Targets()[0]
	db := tg.Open(t, 8)
	table, biz := newTables(t, db, tg.Dialect)
	store, err := ledger.New(tg.Dialect, ledger.WithTable(table), ledger.WithMaxResultSize(8))
	if err != nil {
		t.Fatal(err)
	}
	e := serveLedger(t, db, store, biz, nil)
	_, pc := appClient(t, e.addr, fastClient()...)
	_, err = pc.Deposit(as(ctx, "alice", "k"), deposit("a reference too long to store", 1))
	wantStatus(t, err, codes.Internal, keyed.NotStorable.Row().Reason)
	ci := wantCallInfo(t, err, keyed.NotStorable.Row().Reason, policy.DoNotRetry)
	if ci.Attempts != 1 || e.server.Stats().Executed != 0 {
		t.Errorf("CallInfo %+v, server %+v: a result that cannot be stored is neither retried nor committed", ci, e.server.Stats())
	}

}

// testRequestTooLarge: grpc-go refuses a request over the server's
// MaxRecvMsgSize (4 MiB by default) with RESOURCE_EXHAUSTED before the
// kit's interceptor sees it; nothing runs, nothing is claimed.
func testRequestTooLarge(t *testing.T) {
	e, _, _ := sqliteEnv(t, nil, nil)
	_, err := e.pc.Deposit(as(context.Background(), "alice", "k"), deposit(strings.Repeat("r", 5<<20), 1))
	wantStatus(t, err, codes.ResourceExhausted, "")
	if st := e.server.Stats(); st != (keyed.Stats{}) {
		t.Errorf("the kit saw the call: %+v", st)
	}
}

// TestErrorMapIsTheDocTable: the table in docs/grpc.md is package
// keyed's classification as gRPC renders it.
func TestErrorMapIsTheDocTable(t *testing.T) {
	keyedtest.WantTable(t, "../docs/grpc.md", "error-map", "keyed.Outcomes() as grpcint renders them",
		[]string{"outcome", "code", "reason", "from", "cause", "committed", "client's next step"}, grpcint.TableCells)
}

// TestErrorMap: the error map is the classification's reasons, each with
// the code gRPC renders it with; the reasons are the core's.
func TestErrorMap(t *testing.T) {
	seen := map[string]bool{}
	for _, m := range grpcint.ErrorMap() {
		o, ok := keyed.OfReason(string(m.Reason))
		if !ok || seen[m.Reason] {
			t.Errorf("%s: not a reason of the classification, or twice", m.Reason)
			continue
		}
		seen[m.Reason] = true
		r := o.Row()
		code, _, own, _ := grpcint.Rendering(o)
		if string(m.Side) != string(r.Side) || retry.NextOf(m.Next) != r.Next || m.Committed != string(r.Committed) || (own == "") != (m.Side == "server") || (own == "" && m.Code != code) {
			t.Errorf("%s: %+v, row %+v, rendering %v %q", m.Reason, m, r, code, own)
		}
	}
	for _, r := range keyed.Outcomes() {
		if r.Reason != "" && !seen[r.Reason] {
			t.Errorf("reason %s of %s missing from the error map", r.Reason, r.Name)
		}
	}
	for _, reason := range []string{keyed.KeyMissing.Row().Reason, keyed.KeyInvalid.Row().Reason, keyed.RequestUnreadable.Row().Reason,
		keyed.CallerMissing.Row().Reason, keyed.KeyReused.Row().Reason, keyed.InProgress.Row().Reason, keyed.Incomplete.Row().Reason,
		keyed.KeyExpired.Row().Reason, keyed.TxAborted.Row().Reason, keyed.StorageBusy.Row().Reason, keyed.StorageUnavailable.Row().Reason, keyed.CommitUnknown.Row().Reason,
		keyed.NotStorable.Row().Reason, keyed.LedgerMisuse.Row().Reason, keyed.ResultUnreadable.Row().Reason, keyed.NotFound.Row().Reason,
		keyed.KeyedStream.Row().Reason, keyed.NotExecuted.Row().Reason, keyed.NotSent.Row().Reason, keyed.ServerAnswered.Row().Reason, keyed.CallOutcomeUnknown.Row().Reason} {
		if !seen[reason] {
			t.Errorf("grpcint's reason %s is not the classification's", reason)
		}
	}
	if len(seen) != 21 {
		t.Errorf("%d reasons in the error map, grpcint names 21", len(seen))
	}
}

var camel = regexp.MustCompile(`([a-z])([A-Z])`)

// codeName is the code's name as the gRPC spec writes it: NOT_FOUND.
func codeName(c codes.Code) string {
	return strings.ToUpper(camel.ReplaceAllString(c.String(), "${1}_${2}"))
}
