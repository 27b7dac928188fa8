package grpcint_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
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
	"github.com/opledger/opledger/examples/payments/paymentspb"
	"github.com/opledger/opledger/grpcint"
	"github.com/opledger/opledger/internal/doccheck"
	"github.com/opledger/opledger/internal/testdb"
	"github.com/opledger/opledger/ledger"
	"github.com/opledger/opledger/policy"
	"github.com/opledger/opledger/txmiddleware"
)

// sqliteEnv serves the example on SQLite with the given ledger wrapper,
// front interceptor and options.
func sqliteEnv(t *testing.T, wrap func(*ledger.Store) ledger.Ledger, front grpc.UnaryServerInterceptor, opts ...grpcint.ServerOption) (*env, *sql.DB, *ledger.Store) {
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
	return serveLedger(t, db, l, biz, front, append([]grpcint.ServerOption{grpcint.WithLockWait(300 * time.Millisecond),
		grpcint.WithInProgressPushback(20 * time.Millisecond)}, opts...)...), db, store
}

func fastClient() []grpcint.ClientOption {
	return []grpcint.ClientOption{grpcint.WithMaxAttempts(3),
		grpcint.WithBackoff(policy.Backoff{Initial: time.Millisecond, Max: 5 * time.Millisecond})}
}

// wantCallInfo checks the client's reading of a keyed call's error.
func wantCallInfo(t *testing.T, err error, reason grpcint.Reason, next policy.Action) grpcint.CallInfo {
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

// dropAnswers is a front interceptor that runs every keyed Transfer and
// then loses its answer (plain UNAVAILABLE), resolves included.
func dropAnswers(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	if _, err := handler(ctx, req); info.FullMethod == paymentspb.TransferMethod && err == nil {
		return nil, status.Error(codes.Unavailable, "injected: answer lost")
	}
	return handler(ctx, req)
}

// TestErrorMapRows produces every row of the error map through a real
// server on SQLite (PostgreSQL for the one that needs a cut COMMIT) and
// checks its code, its reason and what the kit's client makes of it.
func TestErrorMapRows(t *testing.T) {
	ctx := context.Background()
	rows := map[grpcint.Reason]func(t *testing.T){
		grpcint.ReasonMissingKey: func(t *testing.T) {
			e, _, _ := sqliteEnv(t, nil, nil)
			_, err := e.pc.Transfer(as(ctx, "alice", ""), transfer("r", 1))
			wantStatus(t, err, codes.InvalidArgument, grpcint.ReasonMissingKey)
		},
		grpcint.ReasonInvalidKey: func(t *testing.T) {
			e, _, _ := sqliteEnv(t, nil, nil)
			twice := metadata.AppendToOutgoingContext(as(ctx, "alice", "k1"), grpcint.KeyHeader, "k2")
			_, err := e.pc.Transfer(twice, transfer("r", 1))
			wantStatus(t, err, codes.InvalidArgument, grpcint.ReasonInvalidKey)
			_, pc := appClient(t, e.addr, fastClient()...)
			_, err = pc.Transfer(as(ctx, "alice", strings.Repeat("k", 300)), transfer("r", 1))
			wantCallInfo(t, err, grpcint.ReasonInvalidKey, policy.DoNotRetry)
		},
		grpcint.ReasonInvalidRequest: func(t *testing.T) {
			e, _, _ := sqliteEnv(t, nil, nil)
			err := grpcint.Resolve(as(ctx, "alice", ""), e.conn, paymentspb.GetTransferMethod, "k", &paymentspb.GetTransferRequest{}, &paymentspb.TransferReply{})
			wantStatus(t, err, codes.InvalidArgument, grpcint.ReasonInvalidRequest)
		},
		grpcint.ReasonNoCaller: func(t *testing.T) {
			e, _, _ := sqliteEnv(t, nil, nil)
			_, pc := appClient(t, e.addr, fastClient()...)
			_, err := pc.Transfer(as(ctx, "", "k"), transfer("r", 1))
			wantStatus(t, err, codes.Unauthenticated, grpcint.ReasonNoCaller)
			wantCallInfo(t, err, grpcint.ReasonNoCaller, policy.DoNotRetry)
		},
		grpcint.ReasonKeyReused: func(t *testing.T) {
			e, _, _ := sqliteEnv(t, nil, nil)
			_, pc := appClient(t, e.addr, fastClient()...)
			if _, err := pc.Transfer(as(ctx, "alice", "k"), transfer("r", 1)); err != nil {
				t.Fatal(err)
			}
			_, err := pc.Transfer(as(ctx, "alice", "k"), transfer("r", 2))
			wantStatus(t, err, codes.FailedPrecondition, grpcint.ReasonKeyReused)
			wantCallInfo(t, err, grpcint.ReasonKeyReused, policy.DoNotRetry)
		},
		grpcint.ReasonInProgress: func(t *testing.T) {
			e, _, _ := sqliteEnv(t, nil, nil)
			done := make(chan error, 1)
			go func() { _, err := e.pc.Transfer(as(ctx, "alice", "k"), transfer("block", 1)); done <- err }()
			<-e.gate.entered
			_, err := e.pc.Transfer(as(ctx, "alice", "k"), transfer("block", 1))
			wantStatus(t, err, codes.Aborted, grpcint.ReasonInProgress)
			// The kit's client gets the same, retries with the same key after
			// the pushback, and gets the answer once the first attempt ends.
			c, pc := appClient(t, e.addr, grpcint.WithMaxAttempts(50),
				grpcint.WithBackoff(policy.Backoff{Initial: time.Millisecond, Max: 5 * time.Millisecond}))
			got := make(chan error, 1)
			go func() { _, err := pc.Transfer(as(ctx, "alice", "k"), transfer("block", 1)); got <- err }()
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
		grpcint.ReasonIncomplete: func(t *testing.T) {
			e, db, store := sqliteEnv(t, nil, nil)
			// An entry committed without a result, outside the kit.
			tx, err := db.Begin()
			if err != nil {
				t.Fatal(err)
			}
			fp, _ := grpcint.RequestFingerprint(transfer("r", 1))
			if _, err := store.Claim(ctx, tx, ledger.ClaimRequest{Identity: testdb.ID(t, "header:alice", paymentspb.TransferMethod, "k"), Fingerprint: fp}); err != nil {
				t.Fatal(err)
			}
			if err := tx.Commit(); err != nil {
				t.Fatal(err)
			}
			_, pc := appClient(t, e.addr, fastClient()...)
			_, err = pc.Transfer(as(ctx, "alice", "k"), transfer("r", 1))
			wantStatus(t, err, codes.FailedPrecondition, grpcint.ReasonIncomplete)
			wantCallInfo(t, err, grpcint.ReasonIncomplete, policy.DoNotRetry)
		},
		grpcint.ReasonTransactionAborted: func(t *testing.T) {
			serialization := &ledger.DBError{Op: "claim", Class: dialects.ClassSerialization, Err: errors.New("could not serialize")}
			e, _, _ := sqliteEnv(t, func(s *ledger.Store) ledger.Ledger { return testdb.FaultyLedger{Store: s, ClaimErr: serialization} }, nil,
				grpcint.WithTxOptions(txmiddleware.WithMaxTxAttempts(2), txmiddleware.WithTxBackoff(time.Millisecond, time.Millisecond)))
			_, pc := appClient(t, e.addr, fastClient()...)
			_, err := pc.Transfer(as(ctx, "alice", "k"), transfer("r", 1))
			wantStatus(t, err, codes.Aborted, grpcint.ReasonTransactionAborted)
			ci := wantCallInfo(t, err, grpcint.ReasonTransactionAborted, policy.Retry)
			if ci.Attempts != 3 || ci.Decision != "max-attempts" {
				t.Errorf("CallInfo %+v: want 3 attempts (retried, nothing committed), max-attempts", ci)
			}
		},
		grpcint.ReasonStorageUnavailable: func(t *testing.T) {
			conn := &ledger.DBError{Op: "claim", Class: dialects.ClassConnection, Err: errors.New("connection refused")}
			e, _, _ := sqliteEnv(t, func(s *ledger.Store) ledger.Ledger { return testdb.FaultyLedger{Store: s, ClaimErr: conn} }, nil,
				grpcint.WithTxOptions(txmiddleware.WithMaxTxAttempts(1)))
			_, pc := appClient(t, e.addr, fastClient()...)
			_, err := pc.Transfer(as(ctx, "alice", "k"), transfer("r", 1))
			wantStatus(t, err, codes.Unavailable, grpcint.ReasonStorageUnavailable)
			ci := wantCallInfo(t, err, grpcint.ReasonStorageUnavailable, policy.Retry)
			if ci.Resolves != 0 {
				t.Errorf("CallInfo %+v: nothing committed, so no resolve is needed", ci)
			}
		},
		grpcint.ReasonStorageBusy: func(t *testing.T) { testPoolOfOne(t, testdb.Targets()[0]) },
		grpcint.ReasonOutcomeUnknown: func(t *testing.T) {
			testCommitOutcomeUnknown(t)
		},
		grpcint.ReasonResultNotStorable: func(t *testing.T) {
			tg := testdb.Targets()[0]
			db := tg.Open(t, 8)
			table, biz := newTables(t, db, tg.Dialect)
			store, err := ledger.New(tg.Dialect, ledger.WithTable(table), ledger.WithMaxResultSize(8))
			if err != nil {
				t.Fatal(err)
			}
			e := serveLedger(t, db, store, biz, nil)
			_, pc := appClient(t, e.addr, fastClient()...)
			_, err = pc.Transfer(as(ctx, "alice", "k"), transfer("a reference too long to store", 1))
			wantStatus(t, err, codes.Internal, grpcint.ReasonResultNotStorable)
			ci := wantCallInfo(t, err, grpcint.ReasonResultNotStorable, policy.DoNotRetry)
			if ci.Attempts != 1 || e.server.Stats().Executed != 0 {
				t.Errorf("CallInfo %+v, server %+v: a result that cannot be stored is neither retried nor committed", ci, e.server.Stats())
			}
		},
		grpcint.ReasonLedgerMisuse: func(t *testing.T) {
			e, _, _ := sqliteEnv(t, func(s *ledger.Store) ledger.Ledger {
				return testdb.FaultyLedger{Store: s, CompleteErr: ledger.ErrNotAcquired}
			}, nil)
			_, pc := appClient(t, e.addr, fastClient()...)
			_, err := pc.Transfer(as(ctx, "alice", "k"), transfer("r", 1))
			wantStatus(t, err, codes.Internal, grpcint.ReasonLedgerMisuse)
			wantCallInfo(t, err, grpcint.ReasonLedgerMisuse, policy.DoNotRetry)
		},
		grpcint.ReasonResultUnreadable: func(t *testing.T) {
			e, _, _ := sqliteEnv(t, nil, nil, grpcint.WithTypeResolver(new(protoregistry.Types)))
			if _, err := e.pc.Transfer(as(ctx, "alice", "k"), transfer("r", 1)); err != nil {
				t.Fatal(err)
			}
			_, pc := appClient(t, e.addr, fastClient()...)
			_, err := pc.Transfer(as(ctx, "alice", "k"), transfer("r", 1)) // a replay
			wantStatus(t, err, codes.Internal, grpcint.ReasonResultUnreadable)
			wantCallInfo(t, err, grpcint.ReasonResultUnreadable, policy.DoNotRetry)
		},
		grpcint.ReasonNotFound: func(t *testing.T) {
			e, _, _ := sqliteEnv(t, nil, nil)
			err := grpcint.Resolve(as(ctx, "alice", ""), e.conn, paymentspb.TransferMethod, "never-sent", &paymentspb.TransferRequest{}, &paymentspb.TransferReply{})
			wantStatus(t, err, codes.NotFound, grpcint.ReasonNotFound)
		},
		grpcint.ReasonKeyedStream: testKeyedStreamRefused,
		grpcint.ReasonNotExecuted: func(t *testing.T) {
			shed := func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
				return nil, grpcint.NotExecuted(codes.Unavailable, "shedding load")
			}
			e, _, _ := sqliteEnv(t, nil, shed)
			_, pc := appClient(t, e.addr, fastClient()...)
			_, err := pc.Transfer(as(ctx, "alice", "k"), transfer("r", 1))
			ci := wantCallInfo(t, err, grpcint.ReasonNotExecuted, policy.Retry)
			if ci.Attempts != 3 || ci.Resolves != 0 || status.Code(err) != codes.Unavailable {
				t.Errorf("CallInfo %+v (%v): want 3 runs, no resolve", ci, err)
			}
		},
		grpcint.ReasonNotSent: func(t *testing.T) {
			_, dead := appClient(t, "127.0.0.1:1", fastClient()...)
			_, err := dead.Transfer(as(ctx, "alice", "k"), transfer("r", 1))
			wantCallInfo(t, err, grpcint.ReasonNotSent, policy.Retry)
		},
		grpcint.ReasonHandlerError: func(t *testing.T) {
			e, _, _ := sqliteEnv(t, nil, nil)
			_, pc := appClient(t, e.addr, fastClient()...)
			_, err := pc.Transfer(as(ctx, "alice", "k"), transfer("r", 0)) // amount 0: INVALID_ARGUMENT, final
			if status.Code(err) != codes.InvalidArgument {
				t.Fatalf("err %v", err)
			}
			wantCallInfo(t, err, grpcint.ReasonHandlerError, policy.DoNotRetry)
			_, again := pc.Transfer(as(ctx, "alice", "k"), transfer("r", 0))
			if status.Code(again) != codes.InvalidArgument || e.server.Stats().Replayed != 1 {
				t.Errorf("retry of a final error: %v, server %+v; want it replayed", again, e.server.Stats())
			}
		},
		grpcint.ReasonCallOutcomeUnknown: func(t *testing.T) {
			e, _, _ := sqliteEnv(t, nil, dropAnswers)
			// No owner resolves on the mesh's channel: the error says the
			// outcome is unknown and carries the key.
			mesh, pc := ownerClient(t, e.addr, policy.OwnerMesh)
			_, err := pc.Transfer(as(ctx, "alice", "k-mesh"), transfer("r", 1))
			ci := wantCallInfo(t, err, grpcint.ReasonCallOutcomeUnknown, policy.ResolveFirst)
			if ci.Key != "k-mesh" || mesh.Stats().Ambiguous != 1 {
				t.Errorf("CallInfo %+v, stats %+v: want the key and one ambiguous call", ci, mesh.Stats())
			}
			// The application owner resolves until its deadline; every
			// answer is lost here, so the deadline ends it.
			app, pc := appClient(t, e.addr, fastClient()...)
			dctx, cancel := context.WithTimeout(as(ctx, "alice", "k-app"), 300*time.Millisecond)
			defer cancel()
			_, err = pc.Transfer(dctx, transfer("r2", 1))
			ci = wantCallInfo(t, err, grpcint.ReasonCallOutcomeUnknown, policy.ResolveFirst)
			if ci.Resolves == 0 || ci.Decision != "deadline" || app.Stats().Ambiguous != 1 {
				t.Errorf("CallInfo %+v, stats %+v: want resolves until the deadline", ci, app.Stats())
			}
		},
	}
	for _, m := range grpcint.ErrorMap() {
		t.Run(string(m.Reason), func(t *testing.T) {
			f, ok := rows[m.Reason]
			if !ok {
				t.Fatalf("the error map's row %s has no test", m.Reason)
			}
			f(t)
		})
	}
	if len(rows) != len(grpcint.ErrorMap()) {
		t.Errorf("%d row tests for %d rows of the error map", len(rows), len(grpcint.ErrorMap()))
	}
}

// TestErrorMapIsTheDocTable: the table in docs/grpc.md is the error map.
func TestErrorMapIsTheDocTable(t *testing.T) {
	doccheck.WantSection(t, "../docs/grpc.md", "error-map", "grpcint.ErrorMap()", errorMapTable())
}

// errorMapTable renders the error map as docs/grpc.md prints it.
func errorMapTable() string {
	next := map[policy.Action]string{policy.Retry: "retry", policy.ResolveFirst: "resolve", policy.DoNotRetry: "stop"}
	var b strings.Builder
	b.WriteString("| reason | code | from | cause | committed | client's next step |\n|---|---|---|---|---|---|\n")
	for _, m := range grpcint.ErrorMap() {
		code := "`" + codeName(m.Code) + "`"
		if m.Side == "client" {
			code = "the last attempt's"
		}
		fmt.Fprintf(&b, "| `%s` | %s | %s | %s | %s | %s |\n", m.Reason, code, m.Side, m.Cause, m.Committed, next[m.Next])
	}
	return b.String()
}

var camel = regexp.MustCompile(`([a-z])([A-Z])`)

// codeName is the code's name as the gRPC spec writes it: NOT_FOUND.
func codeName(c codes.Code) string {
	return strings.ToUpper(camel.ReplaceAllString(c.String(), "${1}_${2}"))
}
