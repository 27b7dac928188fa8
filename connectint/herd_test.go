package connectint_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/proto"

	"github.com/opledger/opledger/connectint"
	"github.com/opledger/opledger/dialects/postgres"
	"github.com/opledger/opledger/internal/testkit/testdb"
	"github.com/opledger/opledger/internal/testkit/wallet/walletpb"
	"github.com/opledger/opledger/keyed"
	"github.com/opledger/opledger/ledger"
	"github.com/opledger/opledger/pgxledger"
)

const herdConns = 16

// pgxNative names the herd's target on pgx's native API.
const pgxNative = "postgres/pgx-native"

// herdTargets runs f on SQLite, PostgreSQL through pgx's stdlib driver and
// through pgx's native transactions (pgxledger.Transactions), and MariaDB
// (lib/pq adds nothing connect-specific), each with the kit's server
// built with opts.
func herdTargets(t *testing.T, f func(t *testing.T, e *env), opts ...keyed.ServerOption) {
	opts = append([]keyed.ServerOption{keyed.WithLockWait(10 * time.Second), keyed.WithInProgressPushback(20 * time.Millisecond)}, opts...)
	testdb.ForEachParallel(t, herdConns, func(t *testing.T, te *testdb.Env) {
		if te.Name == "postgres/pq" {
			t.Skip("lib/pq: covered by the ledger's and txmiddleware's herds")
		}
		f(t, serveExactly(t, te, keyed.SQL(te.DB, newStore(t, te)), nil, opts...))
	})
	t.Run(pgxNative, func(t *testing.T) {
		testdb.Parallel(t, "postgres", herdConns)
		pool := testdb.OpenPgx(t, testdb.PgxConfig(t, "", herdConns, nil))
		te := testdb.NewEnv(t, pgxNative, postgres.New(), testdb.SQLDB(t, pool))
		s, err := pgxledger.New(ledger.WithTable(te.Table))
		if err != nil {
			t.Fatal(err)
		}
		f(t, serveExactly(t, te, pgxledger.Transactions(pool, s), nil, opts...))
	})
}

// TestHerd: 64 concurrent calls per key, 50 keys, in lockstep through
// connect-go over loopback (a third each on the Connect, gRPC and
// gRPC-Web protocols): the handler runs once per key, one business row per
// key, one answer executed and 63 replayed with the marker, all the same
// message.
func TestHerd(t *testing.T) { herd(t, false) }

// TestHerdClaimAtCommit: the same herd with Deposit claimed at commit:
// the handler runs for concurrent duplicates too, but one business row per
// key, one answer executed, the others replayed; 20 keys, as httpint's.
func TestHerdClaimAtCommit(t *testing.T) { herd(t, true) }

func herd(t *testing.T, atCommit bool) {
	const callers = 64
	full := 50
	if atCommit {
		full = 20
	}
	var opts []keyed.ServerOption
	if atCommit {
		opts = append(opts, keyed.WithClaimAtCommit(walletpb.DepositMethod))
	}
	herdTargets(t, func(t *testing.T, e *env) {
		ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute) // a hang guard
		defer cancel()
		keys := testdb.Keys(t, full)
		if e.Name == pgxNative {
			// The herd is on database/sql's three targets; on the
			// pgx seam it proves the runner under the same lockstep.
			keys = min(keys, 10)
		}
		clients := make([]*connect.Client[walletpb.DepositRequest, walletpb.DepositReply], len(protocols))
		for i, p := range protocols {
			clients[i] = e.client(p)
		}
		busy := 0
		var mu sync.Mutex
		for k := range keys {
			key := fmt.Sprintf("herd-%d", k)
			before := e.runs.Load()
			var (
				wg    sync.WaitGroup
				start = make(chan struct{})
				got   = make([]*connect.Response[walletpb.DepositReply], callers)
				errs  = make([]error, callers)
			)
			for w := range callers {
				wg.Add(1)
				go func() {
					defer wg.Done()
					<-start
					for {
						got[w], errs[w] = clients[w%len(clients)].CallUnary(ctx, request("tenant", key, key, 1))
						if r := connectint.ReasonOf(errs[w]); r != "OPERATION_IN_PROGRESS" && r != "STORAGE_BUSY" {
							return
						}
						// Past the wait bound: retry with the key, as the answer says.
						mu.Lock()
						busy++
						mu.Unlock()
						time.Sleep(20 * time.Millisecond)
					}
				}()
			}
			close(start)
			wg.Wait()
			executed := 0
			var first *walletpb.DepositReply
			for w := range callers {
				if errs[w] != nil {
					t.Fatalf("key %s call %d (%s): %v", key, w, protocols[w%len(protocols)], errs[w])
				}
				if !replayed(got[w].Trailer()) {
					executed++
					first = got[w].Msg
				}
			}
			if executed != 1 || (!atCommit && e.runs.Load()-before != 1) {
				t.Fatalf("key %s: %d answers not replayed, handler ran %d times; want 1 and 1", key, executed, e.runs.Load()-before)
			}
			for w, r := range got {
				if !proto.Equal(r.Msg, first) {
					t.Fatalf("key %s call %d: %v; the executed one: %v", key, w, r.Msg, first)
				}
			}
			if n := e.BizRows(t, key); n != 1 {
				t.Fatalf("key %s: %d business rows", key, n)
			}
		}
		s := e.server.Stats()
		if s.Executed != int64(keys) || s.Replayed < int64(keys*(callers-1)) {
			t.Errorf("stats %+v: want %d executed, at least %d replayed", s, keys, keys*(callers-1))
		}
		t.Logf("%s: %d keys × %d concurrent calls: %+v, %d answered busy and retried; the handler ran %d times", e.Name, keys, callers, s, busy, e.runs.Load())
	}, opts...)
}
