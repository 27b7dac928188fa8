package txmiddleware_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/opledger/opledger/dialects"
	"github.com/opledger/opledger/internal/dialectkit"
	"github.com/opledger/opledger/internal/testkit/testdb"
	"github.com/opledger/opledger/ledger"
	"github.com/opledger/opledger/txmiddleware"
)

const method = "/pay.v1.Payments/Transfer"

// finalErr is the tests' final error, what a transport's status would be:
// a code and a message. testCodec records it and rebuilds it on replay.
type finalErr struct {
	code uint32
	msg  string
}

func (e *finalErr) Error() string { return e.msg }

// finalTypeName is the TypeName under which testCodec records a finalErr.
const finalTypeName = "test.Final"

// Codes the tests give finalErr, numbered like gRPC's.
const (
	codeNotFound           = 5
	codeFailedPrecondition = 9
)

// testCodec is the tests' ErrorCodec: an error is final when a *finalErr
// with a non-zero code is in its chain. It records the code and the whole
// error's text (as gRPC's status.FromError does for a wrapped status), so
// that a replay returns an error with the same code and the same message
// as the first call's.
type testCodec struct{}

var _ txmiddleware.ErrorCodec = testCodec{}

func (testCodec) Encode(err error) (ledger.Result, bool) {
	var f *finalErr
	if !errors.As(err, &f) || f.code == 0 {
		return ledger.Result{}, false
	}
	return ledger.Result{Code: f.code, Response: []byte(err.Error()), TypeName: finalTypeName}, true
}

func (testCodec) Decode(r ledger.Result) error {
	if r.TypeName != finalTypeName {
		return fmt.Errorf("test codec: cannot decode a %q result (code %d)", r.TypeName, r.Code)
	}
	return &finalErr{code: r.Code, msg: string(r.Response)}
}

// codecFuncs is an ErrorCodec made of two functions, for codecs that
// misbehave on purpose.
type codecFuncs struct {
	encode func(error) (ledger.Result, bool)
	decode func(ledger.Result) error
}

func (c codecFuncs) Encode(err error) (ledger.Result, bool) { return c.encode(err) }
func (c codecFuncs) Decode(r ledger.Result) error           { return c.decode(r) }

// assertFinal fails unless err is a *finalErr with the given code and
// message.
func assertFinal(t testing.TB, what string, err error, code uint32, msg string) {
	t.Helper()
	var f *finalErr
	if !errors.As(err, &f) || f.code != code || err.Error() != msg {
		t.Fatalf("%s: error %v (%T), want a final error with code %d and message %q", what, err, err, code, msg)
	}
}

// env is one target with a fresh ledger table, a business table and a
// Store on them.
type env struct {
	*testdb.Env
	l *ledger.Store
}

// herdCallers is how many concurrent calls the herd tests make.
const herdCallers = 64

// forEachTarget runs f in a parallel subtest per target of the given
// families (every target when none is given) with a pool of maxConns
// connections, reserved from the server's budget before the pool opens
// (see testdb.Reserve), so that -parallel and the other packages' tests
// cannot exhaust the database servers.
func forEachTarget(t *testing.T, maxConns int, f func(t *testing.T, e *env), families ...string) {
	t.Helper()
	testdb.ForEachParallel(t, maxConns, func(t *testing.T, te *testdb.Env) { f(t, withStore(t, te)) }, families...)
}

// forEachPostgres runs f on the PostgreSQL targets (lib/pq and pgx).
func forEachPostgres(t *testing.T, maxConns int, f func(t *testing.T, e *env)) {
	t.Helper()
	forEachTarget(t, maxConns, f, "postgres")
}

func withStore(t testing.TB, te *testdb.Env) *env {
	t.Helper()
	l, err := ledger.New(te.Dialect, ledger.WithTable(te.Table))
	if err != nil {
		t.Fatal(err)
	}
	return &env{Env: te, l: l}
}

// runner returns a Runner on the target with the test codec (so that a
// *finalErr is final and every acquired call takes a savepoint unless
// opts say otherwise) and opts.
func (e *env) runner(t testing.TB, opts ...txmiddleware.Option) *txmiddleware.Runner {
	t.Helper()
	return e.noCodecRunner(t, append([]txmiddleware.Option{txmiddleware.WithErrorCodec(testCodec{})}, opts...)...)
}

// noCodecRunner returns a Runner with opts only: without an ErrorCodec,
// unless opts give one.
func (e *env) noCodecRunner(t testing.TB, opts ...txmiddleware.Option) *txmiddleware.Runner {
	t.Helper()
	r, err := txmiddleware.New(e.DB, e.l, opts...)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// requireLockWaiter skips when the dialect cannot bound lock waits.
func (e *env) requireLockWaiter(t testing.TB) {
	t.Helper()
	if _, ok := e.Dialect.(dialects.LockWaiter); !ok {
		t.Skipf("dialect %s does not implement dialects.LockWaiter", e.Dialect.Name())
	}
}

// lookup reads the committed entry for key.
func (e *env) lookup(t testing.TB, key string) (*ledger.Entry, error) {
	t.Helper()
	return e.l.Lookup(context.Background(), e.DB, mustID(t, key))
}

// assertNothing checks that nothing was recorded or written for key.
func (e *env) assertNothing(t testing.TB, key string) {
	t.Helper()
	if _, err := e.lookup(t, key); !errors.Is(err, ledger.ErrNotFound) {
		t.Fatalf("key %s: lookup %v, want ErrNotFound", key, err)
	}
	if n := e.BizRows(t, key); n != 0 {
		t.Fatalf("key %s: %d business rows persisted, want 0", key, n)
	}
}

// claimWaiters lists, per database family, SQL that counts the
// transactions whose claim waits for a lock (one argument: the start of
// the claim's statement), for a family whose dialectkit.Sessions view
// undercounts a herd: MariaDB's INNODB_LOCK_WAITS, which
// dialectkit.Sessions.BlockedBy reads, at times leaves out a few of 63
// waits on one record for as long as they last (seen: 60 of 63 for 20
// s), while INNODB_TRX lists every waiting transaction. Empty means
// waitQueued's own way. TiDB has no INNODB_TRX: there the dialect's view
// (DATA_LOCK_WAITS) is used.
var claimWaiters = []struct{ family, query string }{
	{"sqlite", ""},
	{"postgres", ""},
	{"mysql", "SELECT COUNT(*) FROM information_schema.INNODB_TRX WHERE trx_state = 'LOCK WAIT' AND LOCATE(?, trx_query) = 1"},
}

// waitQueued waits until n other callers' claims are queued behind the
// holder, the transaction that holds an identity (holder is its session
// id, 0 where the dialect shows no sessions). Where the dialect
// implements dialectkit.Sessions, that is when the database shows n
// sessions waiting for the holder's locks, or, with a waiting query (see
// claimWaiters), when it shows one session waiting for the holder and n
// claims waiting. On a database with serial writers (SQLite), whose
// callers wait for the write lock at BEGIN on a pooled connection each,
// it is when n+1 connections of the pool are in use. It fails after 20
// seconds, or when done closes first (a caller returned instead of
// waiting).
func (e *env) waitQueued(t testing.TB, holder int64, n int, done <-chan struct{}, waiting string) {
	t.Helper()
	count := func() (int, error) { return e.DB.Stats().InUse - 1, nil }
	switch _, sessions := e.Dialect.(dialectkit.Sessions); {
	case sessions && waiting == "":
		testdb.WaitBlocked(t, e.DB, e.Dialect, holder, n, done)
		return
	case sessions:
		testdb.WaitBlocked(t, e.DB, e.Dialect, holder, 1, done)
		claim := "INSERT INTO " + e.Dialect.QuoteIdent(e.Table)
		count = func() (int, error) {
			var got int
			err := e.DB.QueryRow(waiting, claim).Scan(&got)
			return got, err
		}
	case !dialectkit.TraitsOf(e.Dialect).SerialWriters:
		t.Fatalf("dialect %s neither shows sessions nor has serial writers: no way to see callers wait", e.Dialect.Name())
	}
	deadline := time.Now().Add(20 * time.Second)
	for {
		got, err := count()
		if err != nil {
			t.Fatalf("count the waiting callers: %v", err)
		}
		if got >= n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("after 20s the database shows %d of %d callers waiting behind the holder", got, n)
		}
		select {
		case <-done:
			t.Fatal("a caller returned while the holder held the identity")
		case <-time.After(5 * time.Millisecond):
		}
	}
}

// warm opens n connections of the pool, at once, and leaves them idle in
// it: a herd then starts on open connections, and the test's own queries
// still find one when every caller holds its own.
func (e *env) warm(t testing.TB, n int) {
	t.Helper()
	conns := make([]*sql.Conn, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() { conns[i], errs[i] = e.DB.Conn(context.Background()) })
	}
	wg.Wait()
	for _, c := range conns {
		if c != nil {
			c.Close()
		}
	}
	if err := errors.Join(errs...); err != nil {
		t.Fatalf("open %d connections: %v", n, err)
	}
}

func mustID(t testing.TB, key string) ledger.Identity {
	t.Helper()
	return testdb.ID(t, "tenant-a", method, key)
}

func req(t testing.TB, key string) ledger.ClaimRequest {
	t.Helper()
	return ledger.ClaimRequest{Identity: mustID(t, key), Fingerprint: ledger.FingerprintOf([]byte(key))}
}

// bizWork writes one business row for key and returns a response naming
// the worker; it counts its runs in runs.
func (e *env) bizWork(key string, worker int, runs *atomic.Int64) txmiddleware.Work {
	return func(ctx context.Context, tx *sql.Tx) (ledger.Result, error) {
		runs.Add(1)
		if err := e.WriteBiz(ctx, tx, key, worker); err != nil {
			return ledger.Result{}, err
		}
		return ledger.Result{Response: []byte("done " + key + " by " + strconv.Itoa(worker)), TypeName: "pay.v1.TransferResponse"}, nil
	}
}
