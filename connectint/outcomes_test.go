package connectint_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoregistry"

	"github.com/opledger/opledger/connectint"
	"github.com/opledger/opledger/dialects"
	"github.com/opledger/opledger/dialects/postgres"
	"github.com/opledger/opledger/internal/keyedcore/keyedproto"
	"github.com/opledger/opledger/internal/keyedcore/retry"
	"github.com/opledger/opledger/internal/testkit/keyedtest"
	"github.com/opledger/opledger/internal/testkit/testdb"
	"github.com/opledger/opledger/internal/testkit/wallet/walletpb"
	"github.com/opledger/opledger/keyed"
	"github.com/opledger/opledger/ledger"
	"github.com/opledger/opledger/policy"
	"github.com/opledger/opledger/txmiddleware"
)

// front builds a handler option with a unary interceptor in front of the
// kit's.
func front(f func(next connect.UnaryFunc) connect.UnaryFunc) []connect.HandlerOption {
	return []connect.HandlerOption{connect.WithInterceptors(connect.UnaryInterceptorFunc(f))}
}

// dropAnswers runs every keyed Deposit and then loses its answer (plain
// UNAVAILABLE), resolves included.
func dropAnswers(next connect.UnaryFunc) connect.UnaryFunc {
	return func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
		resp, err := next(ctx, req)
		if req.Spec().Procedure == walletpb.DepositMethod && err == nil {
			return nil, connect.NewError(connect.CodeUnavailable, errors.New("injected: answer lost"))
		}
		return resp, err
	}
}

// notMessage is a request whose message is not a protobuf message.
type notMessage struct {
	*connect.Request[walletpb.DepositRequest]
}

func (notMessage) Any() any { return struct{ Reference string }{"r"} }

// TestOutcomeRows produces every outcome of package keyed's
// classification through a real connect server on SQLite (PostgreSQL for
// the one that needs a cut COMMIT) and checks connect's rendering of it:
// its code, its reason and what the kit's client makes of it; or, for an
// outcome connect does not answer itself, whose answer the call ends with.
func TestOutcomeRows(t *testing.T) {
	ctx := context.Background()
	keyedtest.Rows(t, map[keyed.Outcome]func(t *testing.T){
		keyed.Executed: func(t *testing.T) {
			e, _ := sqliteEnv(t, nil, nil)
			resp, err := e.client("connect").CallUnary(ctx, request("alice", "k", "r", 1))
			if err != nil {
				t.Fatal(err)
			}
			if replayed(resp.Trailer()) || e.server.Stats().Executed != 1 || e.BizRows(t, "r") != 1 {
				t.Errorf("trailer %v, stats %+v: want one execution, not a replay", resp.Trailer(), e.server.Stats())
			}
		},
		keyed.Replayed: func(t *testing.T) {
			e, _ := sqliteEnv(t, nil, nil)
			for _, p := range protocols {
				c := e.client(p)
				first, err := c.CallUnary(ctx, request("alice", "k-"+p, "r-"+p, 1))
				if err != nil {
					t.Fatal(err)
				}
				again, err := c.CallUnary(ctx, request("alice", "k-"+p, "r-"+p, 1))
				if err != nil || !proto.Equal(again.Msg, first.Msg) {
					t.Fatalf("%s: replay %v, %v; first %v", p, again, err, first.Msg)
				}
				if !replayed(again.Trailer()) || again.Trailer().Get(connectint.ReplayedCodeHeader) != "0" || e.BizRows(t, "r-"+p) != 1 {
					t.Errorf("%s: trailer %v", p, again.Trailer())
				}
			}
			if s := e.server.Stats(); s.Replayed != int64(len(protocols)) {
				t.Errorf("stats %+v", s)
			}
		},
		keyed.NotStored: func(t *testing.T) {
			e, _ := sqliteEnv(t, nil, nil)
			for i := 1; i <= 2; i++ {
				_, err := e.client("grpc").CallUnary(ctx, request("alice", "k", "not-final", 1))
				wantError(t, err, connect.CodeUnavailable, "")
				if e.BizRows(t, "not-final") != 0 || e.server.Stats().Failed != int64(i) || e.runs.Load() != int64(i) {
					t.Fatalf("try %d: the handler's writes survived an error that is not final, or it did not run again: %+v", i, e.server.Stats())
				}
			}
		},
		keyed.HandlerPanic: func(t *testing.T) {
			recovered := []connect.HandlerOption{connect.WithRecover(func(_ context.Context, _ connect.Spec, _ http.Header, p any) error {
				return connect.NewError(connect.CodeInternal, fmt.Errorf("recovered: %v", p))
			})}
			e, _ := sqliteEnv(t, nil, recovered)
			for i := 1; i <= 2; i++ {
				_, err := e.client("connect").CallUnary(ctx, request("alice", "k", "panic", 1))
				wantError(t, err, connect.CodeInternal, "")
				if e.BizRows(t, "panic") != 0 || e.runs.Load() != int64(i) {
					t.Fatalf("try %d: a panicking handler's writes survived, or it did not run again (%d runs)", i, e.runs.Load())
				}
			}
		},
		keyed.CallerMissing: func(t *testing.T) {
			e, _ := sqliteEnv(t, nil, nil)
			_, c := e.kitClient(t, policy.OwnerApplication, "connect", fastClient()...)
			_, err := c.CallUnary(ctx, request("", "k", "r", 1))
			wantError(t, err, connect.CodeUnauthenticated, "CALLER_NOT_IDENTIFIED")
			wantCallInfo(t, err, "CALLER_NOT_IDENTIFIED", policy.DoNotRetry)
		},
		keyed.KeyMissing: func(t *testing.T) {
			e, _ := sqliteEnv(t, nil, nil)
			_, err := e.client("connect").CallUnary(ctx, request("alice", "", "r", 1))
			wantError(t, err, connect.CodeInvalidArgument, "MISSING_IDEMPOTENCY_KEY")
		},
		keyed.KeyInvalid: func(t *testing.T) {
			e, _ := sqliteEnv(t, nil, nil)
			r := request("alice", "k1", "r", 1)
			r.Header().Add(connectint.KeyHeader, "k2")
			_, err := e.client("grpc").CallUnary(ctx, r)
			wantError(t, err, connect.CodeInvalidArgument, "INVALID_IDEMPOTENCY_KEY")
			_, c := e.kitClient(t, policy.OwnerApplication, "connect", fastClient()...)
			_, err = c.CallUnary(connectint.WithKey(ctx, strings.Repeat("k", 300)), request("alice", "", "r", 1))
			wantCallInfo(t, err, "INVALID_IDEMPOTENCY_KEY", policy.DoNotRetry)
		},
		keyed.RequestTooLarge: func(t *testing.T) {
			e, _ := sqliteEnv(t, nil, []connect.HandlerOption{connect.WithReadMaxBytes(1024)})
			_, err := e.client("connect").CallUnary(ctx, request("alice", "k", strings.Repeat("r", 4096), 1))
			wantError(t, err, connect.CodeResourceExhausted, "")
			if _, _, own, _ := connectint.Rendering(keyed.RequestTooLarge); own == "" {
				t.Error("connect renders request-too-large with an error of the kit's")
			}
			if st := e.server.Stats(); st != (keyed.Stats{}) {
				t.Errorf("the kit saw the call: %+v", st)
			}
		},
		keyed.RequestUnreadable: func(t *testing.T) {
			swap := front(func(next connect.UnaryFunc) connect.UnaryFunc {
				return func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
					return next(ctx, notMessage{req.(*connect.Request[walletpb.DepositRequest])})
				}
			})
			e, _ := sqliteEnv(t, nil, swap)
			_, err := e.client("connect").CallUnary(ctx, request("alice", "k", "r", 1))
			wantError(t, err, connect.CodeInvalidArgument, "INVALID_KEYED_REQUEST")
		},
		keyed.NotKeyed: func(t *testing.T) {
			e, _ := sqliteEnv(t, nil, nil)
			get := connect.NewClient[walletpb.GetDepositRequest, walletpb.DepositReply](e.h1, e.url+walletpb.GetDepositMethod)
			r := connect.NewRequest(&walletpb.GetDepositRequest{})
			r.Header().Set(callerHeader, "alice")
			_, err := connectint.Resolve(ctx, get.CallUnary, "k", r)
			wantError(t, err, connect.CodeInvalidArgument, "INVALID_KEYED_REQUEST")
		},
		keyed.KeyedStream: func(t *testing.T) {
			te := sqliteTestEnv(t)
			s, err := connectint.NewServer(te.DB, newStore(t, te), catalog(t), connectint.CallerFromTrustedHeader(callerHeader))
			if err != nil {
				t.Fatal(err)
			}
			ran := false
			h := connect.NewServerStreamHandler(walletpb.DepositMethod, func(ctx context.Context, _ *connect.Request[walletpb.DepositRequest], st *connect.ServerStream[walletpb.DepositReply]) error {
				ran = true
				return st.Send(&walletpb.DepositReply{})
			}, connect.WithInterceptors(s.Interceptor()))
			url := serveHTTP(t, h)
			h1, _ := httpClients(t)
			c := connect.NewClient[walletpb.DepositRequest, walletpb.DepositReply](h1, url+walletpb.DepositMethod)
			st, err := c.CallServerStream(ctx, request("alice", "k", "r", 1))
			if err == nil {
				for st.Receive() {
				}
				err = st.Err()
			}
			wantError(t, err, connect.CodeUnimplemented, "KEYED_METHOD_SERVED_AS_STREAM")
			if ran || s.Stats().Refused != 1 {
				t.Errorf("the streaming handler ran (%v), or the refusal was not counted: %+v", ran, s.Stats())
			}
		},
		keyed.KeyReused: func(t *testing.T) {
			e, _ := sqliteEnv(t, nil, nil)
			_, c := e.kitClient(t, policy.OwnerApplication, "connect", fastClient()...)
			if _, err := c.CallUnary(ctx, request("alice", "k", "r", 1)); err != nil {
				t.Fatal(err)
			}
			_, err := c.CallUnary(ctx, request("alice", "k", "r", 2))
			wantError(t, err, connect.CodeFailedPrecondition, "IDEMPOTENCY_KEY_REUSED")
			wantCallInfo(t, err, "IDEMPOTENCY_KEY_REUSED", policy.DoNotRetry)
		},
		keyed.InProgress: func(t *testing.T) {
			e, _ := sqliteEnv(t, nil, nil)
			done := make(chan error, 1)
			go func() { _, err := e.client("connect").CallUnary(ctx, request("alice", "k", "block", 1)); done <- err }()
			<-e.gate.entered
			_, err := e.client("grpc").CallUnary(ctx, request("alice", "k", "block", 1))
			ce := wantError(t, err, connect.CodeAborted, "OPERATION_IN_PROGRESS")
			if ce.Meta().Get(policy.PushbackHeader) == "" {
				t.Errorf("no pushback: %v", ce.Meta())
			}
			c, kc := e.kitClient(t, policy.OwnerApplication, "connect", keyed.WithMaxAttempts(50),
				keyed.WithBackoff(policy.Backoff{Initial: time.Millisecond, Max: 5 * time.Millisecond}))
			got := make(chan error, 1)
			go func() { _, err := kc.CallUnary(ctx, request("alice", "k", "block", 1)); got <- err }()
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
			e, store := sqliteEnv(t, nil, nil)
			fp, _ := keyedproto.Fingerprint(request("", "", "r", 1).Msg)
			if err := testdb.InTx(ctx, e.DB, func(tx *sql.Tx) error {
				_, err := store.Claim(ctx, tx, ledger.ClaimRequest{Identity: testdb.ID(t, "header:alice", walletpb.DepositMethod, "k"), Fingerprint: fp})
				return err
			}); err != nil {
				t.Fatal(err)
			}
			_, c := e.kitClient(t, policy.OwnerApplication, "connect", fastClient()...)
			_, err := c.CallUnary(ctx, request("alice", "k", "r", 1))
			wantError(t, err, connect.CodeFailedPrecondition, "OPERATION_INCOMPLETE")
			wantCallInfo(t, err, "OPERATION_INCOMPLETE", policy.DoNotRetry)
		},
		keyed.KeyExpired: func(t *testing.T) { testLateRetry(t, testdb.Targets()[0]) },
		keyed.TxAborted: func(t *testing.T) {
			serialization := &ledger.DBError{Op: "claim", Class: dialects.ClassSerialization, Err: errors.New("could not serialize")}
			e, _ := sqliteEnv(t, func(s *ledger.Store) ledger.Ledger { return testdb.FaultyLedger{Store: s, ClaimErr: serialization} }, nil,
				keyed.WithTxOptions(txmiddleware.WithMaxTxAttempts(2), txmiddleware.WithTxBackoff(time.Millisecond, time.Millisecond)))
			_, c := e.kitClient(t, policy.OwnerApplication, "grpc", fastClient()...)
			_, err := c.CallUnary(ctx, request("alice", "k", "r", 1))
			wantError(t, err, connect.CodeAborted, "TRANSACTION_ABORTED")
			ci := wantCallInfo(t, err, "TRANSACTION_ABORTED", policy.Retry)
			if ci.Attempts != 3 || ci.Decision != "max-attempts" {
				t.Errorf("CallInfo %+v: want 3 attempts, max-attempts", ci)
			}
		},
		keyed.StorageBusy: func(t *testing.T) {
			tg := testdb.Targets()[0]
			te := testdb.NewEnv(t, tg.Name, tg.Dialect, tg.Open(t, 1))
			e := serveOn(t, te, keyed.SQL(te.DB, newStore(t, te)), nil)
			first := make(chan error, 1)
			go func() {
				for {
					_, err := e.client("connect").CallUnary(ctx, request("alice", "k-stuck", "block", 1))
					if connectint.ReasonOf(err) != "STORAGE_BUSY" {
						first <- err
						return
					}
				}
			}()
			select {
			case <-e.gate.entered:
			case err := <-first:
				t.Fatalf("the call to get stuck ended first: %v", err)
			}
			dctx, cancel := context.WithTimeout(ctx, 20*time.Second) // a hang guard
			defer cancel()
			_, err := e.client("connect").CallUnary(dctx, request("alice", "k-other", "other", 1))
			ce := wantError(t, err, connect.CodeUnavailable, "STORAGE_BUSY")
			if ce.Meta().Get(policy.PushbackHeader) == "" {
				t.Errorf("storage busy without pushback: %v", ce.Meta())
			}
			close(e.gate.release)
			if err := <-first; err != nil {
				t.Fatal(err)
			}
		},
		keyed.StorageUnavailable: func(t *testing.T) {
			conn := &ledger.DBError{Op: "claim", Class: dialects.ClassConnection, Err: errors.New("connection refused")}
			e, _ := sqliteEnv(t, func(s *ledger.Store) ledger.Ledger { return testdb.FaultyLedger{Store: s, ClaimErr: conn} }, nil,
				keyed.WithTxOptions(txmiddleware.WithMaxTxAttempts(1)))
			_, c := e.kitClient(t, policy.OwnerApplication, "connect", fastClient()...)
			_, err := c.CallUnary(ctx, request("alice", "k", "r", 1))
			wantError(t, err, connect.CodeUnavailable, "STORAGE_UNAVAILABLE")
			if ci := wantCallInfo(t, err, "STORAGE_UNAVAILABLE", policy.Retry); ci.Resolves != 0 {
				t.Errorf("CallInfo %+v: nothing committed, so no resolve is needed", ci)
			}
		},
		keyed.CommitUnknown: testCommitOutcomeUnknown,
		keyed.RequestEnded: func(t *testing.T) {
			answers, ended := make(chan error, 1), make(chan struct{})
			capture := front(func(next connect.UnaryFunc) connect.UnaryFunc {
				return func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
					go func() { <-ctx.Done(); close(ended) }()
					resp, err := next(ctx, req)
					answers <- err
					return resp, err
				}
			})
			e, _ := sqliteEnv(t, nil, capture)
			cctx, cancel := context.WithCancel(ctx)
			done := make(chan error, 1)
			go func() { _, err := e.client("grpc").CallUnary(cctx, request("alice", "k", "block", 1)); done <- err }()
			<-e.gate.entered
			cancel()
			if err := <-done; connect.CodeOf(err) != connect.CodeCanceled {
				t.Fatalf("client: %v", err)
			}
			<-ended
			close(e.gate.release)
			err := <-answers
			wantError(t, err, connect.CodeCanceled, "")
			if e.BizRows(t, "block") != 0 || e.server.Stats().Failed != 1 {
				t.Errorf("stats %+v: nothing committed, one failure", e.server.Stats())
			}
		},
		keyed.ResponseTooLarge: func(t *testing.T) {
			// connect never answers it: a response is a message, bounded only
			// by the ledger's limit, which answers RESULT_NOT_STORABLE.
			if _, _, own, _ := connectint.Rendering(keyed.ResponseTooLarge); own == "" {
				t.Fatal("connect renders response-too-large with an error of its own")
			}
			testNotStorable(t)
		},
		keyed.NotStorable: testNotStorable,
		keyed.LedgerMisuse: func(t *testing.T) {
			e, _ := sqliteEnv(t, func(s *ledger.Store) ledger.Ledger {
				return testdb.FaultyLedger{Store: s, CompleteErr: ledger.ErrNotAcquired}
			}, nil)
			_, c := e.kitClient(t, policy.OwnerApplication, "connect", fastClient()...)
			_, err := c.CallUnary(ctx, request("alice", "k", "r", 1))
			wantError(t, err, connect.CodeInternal, "LEDGER_MISUSE")
			wantCallInfo(t, err, "LEDGER_MISUSE", policy.DoNotRetry)
		},
		keyed.ResultUnreadable: func(t *testing.T) {
			e, _ := sqliteEnv(t, nil, nil, keyed.WithTypeResolver(new(protoregistry.Types)))
			if _, err := e.client("connect").CallUnary(ctx, request("alice", "k", "r", 1)); err != nil {
				t.Fatal(err)
			}
			_, c := e.kitClient(t, policy.OwnerApplication, "connect", fastClient()...)
			_, err := c.CallUnary(ctx, request("alice", "k", "r", 1))
			wantError(t, err, connect.CodeInternal, "STORED_RESULT_UNREADABLE")
			wantCallInfo(t, err, "STORED_RESULT_UNREADABLE", policy.DoNotRetry)
		},
		keyed.NotFound: func(t *testing.T) {
			e, _ := sqliteEnv(t, nil, nil)
			_, err := connectint.Resolve(ctx, e.client("connect").CallUnary, "never-sent", request("alice", "", "", 0))
			wantError(t, err, connect.CodeNotFound, "OPERATION_NOT_FOUND")
		},
		keyed.NotExecuted: func(t *testing.T) {
			shed := front(func(connect.UnaryFunc) connect.UnaryFunc {
				return func(context.Context, connect.AnyRequest) (connect.AnyResponse, error) {
					return nil, connectint.NotExecuted(connect.CodeUnavailable, "shedding load")
				}
			})
			e, _ := sqliteEnv(t, nil, shed)
			_, c := e.kitClient(t, policy.OwnerApplication, "connect", fastClient()...)
			_, err := c.CallUnary(ctx, request("alice", "k", "r", 1))
			ci := wantCallInfo(t, err, "REQUEST_NOT_EXECUTED", policy.Retry)
			if ci.Attempts != 3 || ci.Resolves != 0 || connect.CodeOf(err) != connect.CodeUnavailable {
				t.Errorf("CallInfo %+v (%v): want 3 runs, no resolve", ci, err)
			}
			// With a code another attempt will not change, the client stops.
			deny := front(func(connect.UnaryFunc) connect.UnaryFunc {
				return func(context.Context, connect.AnyRequest) (connect.AnyResponse, error) {
					return nil, connectint.NotExecuted(connect.CodeUnauthenticated, "bad token")
				}
			})
			e, _ = sqliteEnv(t, nil, deny)
			_, c = e.kitClient(t, policy.OwnerApplication, "connect", fastClient()...)
			_, err = c.CallUnary(ctx, request("alice", "k", "r", 1))
			ci = wantCallInfo(t, err, "REQUEST_NOT_EXECUTED", policy.Retry)
			if ci.Attempts != 1 || ci.Resolves != 0 || connect.CodeOf(err) != connect.CodeUnauthenticated {
				t.Errorf("CallInfo %+v (%v): want 1 run, no resolve", ci, err)
			}
		},
		keyed.NotSent: func(t *testing.T) {
			kit, err := connectint.NewClient(catalog(t), policy.OwnerApplication, fastClient()...)
			if err != nil {
				t.Fatal(err)
			}
			h1, h2 := httpClients(t)
			for _, p := range protocols {
				dead := depositClient("http://127.0.0.1:1", h1, h2, p, kit.ClientOptions()...)
				_, err = dead.CallUnary(ctx, request("alice", "k", "r", 1))
				wantCallInfo(t, err, "REQUEST_NOT_SENT", policy.Retry)
			}
		},
		keyed.ServerAnswered: func(t *testing.T) {
			e, _ := sqliteEnv(t, nil, nil)
			_, c := e.kitClient(t, policy.OwnerApplication, "connect", fastClient()...)
			_, err := c.CallUnary(ctx, request("alice", "k", "r", 0)) // amount 0: INVALID_ARGUMENT, final
			if connect.CodeOf(err) != connect.CodeInvalidArgument {
				t.Fatalf("err %v", err)
			}
			wantCallInfo(t, err, "SERVER_ANSWERED", policy.DoNotRetry)
			for i, p := range protocols {
				_, again := e.client(p).CallUnary(ctx, request("alice", "k", "r", 0))
				var ce *connect.Error
				if !errors.As(again, &ce) || ce.Code() != connect.CodeInvalidArgument || ce.Message() != "amount must be positive" ||
					!replayed(ce.Meta()) || ce.Meta().Get(connectint.ReplayedCodeHeader) != "3" || e.server.Stats().Replayed != int64(i+1) {
					t.Errorf("%s: retry of a final error: %v (metadata %v), server %+v; want it replayed", p, again, ce.Meta(), e.server.Stats())
				}
			}
		},
		keyed.CallOutcomeUnknown: func(t *testing.T) {
			e, _ := sqliteEnv(t, nil, front(dropAnswers))
			// On every protocol the client trace shows the request went out:
			// the lost answer leaves the outcome unknown, never "not sent".
			for _, p := range protocols {
				mesh, mc := e.kitClient(t, policy.OwnerMesh, p)
				_, err := mc.CallUnary(connectint.WithKey(ctx, "k-mesh-"+p), request("alice", "", "r-"+p, 1))
				ci := wantCallInfo(t, err, "CALL_OUTCOME_UNKNOWN", policy.ResolveFirst)
				if ci.Key != "k-mesh-"+p || mesh.Stats().Ambiguous != 1 {
					t.Errorf("%s: CallInfo %+v, stats %+v: want the key and one ambiguous call", p, ci, mesh.Stats())
				}
			}
			app, ac := e.kitClient(t, policy.OwnerApplication, "grpc", fastClient()...)
			dctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
			defer cancel()
			_, err := ac.CallUnary(dctx, request("alice", "k-app", "r2", 1))
			ci := wantCallInfo(t, err, "CALL_OUTCOME_UNKNOWN", policy.ResolveFirst)
			if ci.Resolves == 0 || ci.Decision != "deadline" || app.Stats().Ambiguous != 1 {
				t.Errorf("CallInfo %+v, stats %+v: want resolves until the deadline", ci, app.Stats())
			}
		},
	})
}

func sqliteTestEnv(t *testing.T) *testdb.Env {
	tg := testdb.Targets()[0]
	return testdb.NewEnv(t, tg.Name, tg.Dialect, tg.Open(t, 8))
}

// testNotStorable: a response over the ledger's limit is refused with
// RESULT_NOT_STORABLE, neither retried nor committed.
func testNotStorable(t *testing.T) {
	te := sqliteTestEnv(t)
	e := serveOn(t, te, keyed.SQL(te.DB, newStore(t, te, ledger.WithMaxResultSize(8))), nil)
	_, c := e.kitClient(t, policy.OwnerApplication, "connect", fastClient()...)
	_, err := c.CallUnary(context.Background(), request("alice", "k", "a reference too long to store", 1))
	wantError(t, err, connect.CodeInternal, "RESULT_NOT_STORABLE")
	ci := wantCallInfo(t, err, "RESULT_NOT_STORABLE", policy.DoNotRetry)
	if ci.Attempts != 1 || e.server.Stats().Executed != 0 {
		t.Errorf("CallInfo %+v, server %+v: a result that cannot be stored is neither retried nor committed", ci, e.server.Stats())
	}
}

// testCommitOutcomeUnknown: the connection breaks while COMMIT is in
// flight (PostgreSQL through pgx's stdlib driver): the server answers
// UNAVAILABLE COMMIT_OUTCOME_UNKNOWN; the kit's client resolves before
// anything else and returns the committed response; one business row.
func testCommitOutcomeUnknown(t *testing.T) {
	dsn := os.Getenv(testdb.EnvPostgres)
	if dsn == "" {
		testdb.Skip(t, testdb.EnvPostgres)
	}
	u, err := url.Parse(dsn)
	if err != nil {
		t.Fatal(err)
	}
	proxy := testdb.NewCutProxy(t, u.Host)
	u.Host = proxy.Addr()
	db, err := sql.Open("pgx", u.String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	te := testdb.NewEnv(t, "postgres/pgx", postgres.New(), db)
	e := serveOn(t, te, keyed.SQL(db, newStore(t, te)), nil)
	ctx := context.Background()

	proxy.Arm()
	_, err = e.client("connect").CallUnary(ctx, request("alice", "cut-1", "cut-1", 7))
	wantError(t, err, connect.CodeUnavailable, "COMMIT_OUTCOME_UNKNOWN")
	if _, err := connectint.Resolve(ctx, e.client("connect").CallUnary, "cut-1", request("alice", "", "", 0)); err != nil {
		t.Fatalf("resolve after the cut: %v (the COMMIT reached the database)", err)
	}
	kit, c := e.kitClient(t, policy.OwnerApplication, "grpc")
	proxy.Arm()
	resp, err := c.CallUnary(ctx, request("alice", "", "cut-2", 8))
	if err != nil {
		t.Fatalf("deposit through the kit's client: %v", err)
	}
	if proxy.Cuts() != 2 || kit.Stats().Resolved != 1 || e.BizRows(t, "cut-2") != 1 || resp.Msg.GetReference() != "cut-2" {
		t.Errorf("cuts %d, client %+v, rows %d, reply %v", proxy.Cuts(), kit.Stats(), e.BizRows(t, "cut-2"), resp.Msg)
	}
}

// TestOutcomeTableIsTheDocTable: the table in docs/connect.md is package
// keyed's classification as connectint renders it.
func TestOutcomeTableIsTheDocTable(t *testing.T) {
	keyedtest.WantTable(t, "../docs/connect.md", "outcome-table", "keyed.Outcomes() as connectint renders them",
		[]string{"outcome", "code", "reason", "from", "cause", "committed", "client's next step"}, connectint.TableCells)
}

// TestRenderingIsKeyedproto: every server outcome connect answers itself
// has gRPC's code number, and every reason is the classification's.
func TestRenderingIsKeyedproto(t *testing.T) {
	for _, r := range keyed.Outcomes() {
		code, reason, own, _ := connectint.Rendering(r.Outcome)
		rr, ok := keyedproto.Render(r.Outcome)
		if !ok || (own == "") != (rr.Own == "") || (own == "" && int(code) != int(rr.Code)) || reason != r.Reason {
			t.Errorf("%s: %v %q %q; keyedproto %+v", r.Name, code, reason, own, rr)
		}
		if r.Side == keyed.SideServer && own == "" {
			if _, ok := retry.ServerRow(reason); !ok {
				t.Errorf("%s: reason %q is not a server row", r.Name, reason)
			}
		}
	}
}
