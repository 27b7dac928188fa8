package txmiddleware_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"github.com/opledger/opledger/internal/keybirth"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/opledger/opledger/internal/harness/otelread"
	"github.com/opledger/opledger/internal/outcomes"
	"github.com/opledger/opledger/internal/txledger"
	"github.com/opledger/opledger/ledger"
	"github.com/opledger/opledger/txmiddleware"
)

func outcomeIs(o string) attribute.KeyValue { return attribute.String("opledger.outcome", o) }

// TestObservedRun: on every database, a herd of 16 runs of one key, a
// replay, a key reuse, a recorded final error and a take-over of an
// expired entry, through a runner and a ledger that record into the SDK:
// the metrics count what Run returned, the runner's span is the parent of
// the ledger's, each refusal and the take-over is one log event with the
// method, the outcome and the key's short hash, and no key appears in any
// log line, attribute or span.
func TestObservedRun(t *testing.T) {
	t.Parallel()
	const workers = 16
	forEachTarget(t, workers, func(t *testing.T, e *env) {
		ctx := context.Background()
		m, sp, logs := otelread.NewMetrics(), otelread.NewSpans(), otelread.NewLogs()
		t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
		var now atomic.Int64
		now.Store(t0.UnixMicro())
		store, err := ledger.New(e.Dialect, ledger.WithTable(e.Table), ledger.WithRetention(time.Hour),
			ledger.WithClock(func() time.Time { return time.UnixMicro(now.Load()) }),
			ledger.WithMeterProvider(m.Provider), ledger.WithTracerProvider(sp.Provider))
		if err != nil {
			t.Fatal(err)
		}
		r, err := txmiddleware.New(e.DB, store, txmiddleware.WithErrorCodec(testCodec{}),
			txmiddleware.WithMeterProvider(m.Provider), txmiddleware.WithTracerProvider(sp.Provider), txmiddleware.WithLogger(logs.Logger))
		if err != nil {
			t.Fatal(err)
		}
		keys := []string{"herd-k-4d1f7e", "final-k-90aa3c"}

		// The herd.
		var (
			runs     atomic.Int64
			mu       sync.Mutex
			returned = map[string]int{}
			attempts int
			wg       sync.WaitGroup
			start    = make(chan struct{})
		)
		pctx, parent := sp.Provider.Tracer("test").Start(ctx, "caller")
		for w := 0; w < workers; w++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				out, err := r.Run(pctx, req(t, keys[0]), e.bizWork(keys[0], w, &runs))
				mu.Lock()
				defer mu.Unlock()
				attempts += out.Attempts
				switch {
				case err == nil && out.Executed:
					returned[outcomes.Executed]++
				case err == nil && out.Replayed:
					returned[outcomes.Replayed]++
				default:
					t.Errorf("herd run: %+v %v", out, err)
				}
			}()
		}
		close(start)
		wg.Wait()
		parent.End()
		if returned[outcomes.Executed] != 1 || runs.Load() != 1 {
			t.Fatalf("herd: %v, %d runs of the work", returned, runs.Load())
		}

		// A replay, a key reuse, a final error, a take-over.
		if out, err := r.Run(ctx, req(t, keys[0]), e.bizWork(keys[0], 99, &runs)); err != nil || !out.Replayed {
			t.Fatalf("replay: %+v %v", out, err)
		}
		returned[outcomes.Replayed]++
		reused := ledger.ClaimRequest{Identity: mustID(t, keys[0]), Fingerprint: ledger.FingerprintOf([]byte("another request"))}
		if _, err := r.Run(ctx, reused, e.bizWork(keys[0], 98, &runs)); !errors.Is(err, ledger.ErrKeyReused) {
			t.Fatalf("key reuse: %v", err)
		}
		returned[outcomes.KeyReused]++
		if out, err := r.Run(ctx, req(t, keys[1]), func(context.Context, *sql.Tx) (ledger.Result, error) {
			return ledger.Result{}, &finalErr{code: codeFailedPrecondition, msg: "insufficient funds"}
		}); err == nil || !out.Executed {
			t.Fatalf("final error: %+v %v", out, err)
		}
		returned[outcomes.Executed]++ // a recorded final error is executed, with error.type final_error
		now.Store(t0.Add(2 * time.Hour).UnixMicro())
		if out, err := r.Run(ctx, req(t, keys[0]), e.bizWork(keys[0], 97, &runs)); err != nil || !out.Executed {
			t.Fatalf("take-over: %+v %v", out, err)
		}
		returned[outcomes.Executed]++
		// A key born before the window (an hour's retention) is refused as
		// expired, before anything runs.
		stale := keybirth.New(t0.Add(-time.Hour))
		if _, err := r.Run(ctx, req(t, stale), e.bizWork(stale, 96, &runs)); !errors.Is(err, ledger.ErrKeyExpired) {
			t.Fatalf("a key born before the window: %v", err)
		}
		returned[outcomes.KeyExpired]++

		points, err := m.Collect(ctx)
		if err != nil {
			t.Fatal(err)
		}
		total := 0
		for o, n := range returned {
			total += n
			if got := otelread.Sum(points, "opledger.tx.duration", outcomeIs(o)); got != float64(n) {
				t.Errorf("opledger.tx.duration{%s} counts %v runs, Run returned %d (%v)", o, got, n, returned)
			}
		}
		if got := otelread.Sum(points, "opledger.tx.attempts"); got != float64(total) {
			t.Errorf("opledger.tx.attempts has %v measurements, want %d", got, total)
		}
		if got := otelread.HistSum(points, "opledger.tx.attempts", outcomeIs(outcomes.Executed), attribute.String("opledger.method", method)); got < 2 {
			t.Errorf("attempts of the executed runs sum to %v", got)
		}
		if got := otelread.Sum(points, "opledger.tx.duration", outcomeIs(outcomes.Executed),
			attribute.String("error.type", outcomes.ErrorTypeFinal)); got != 1 {
			t.Errorf("executed runs that recorded a final error: %v, want 1", got)
		}
		if got := otelread.Sum(points, "opledger.ledger.claims", outcomeIs(outcomes.TakenOver)); got != 1 {
			t.Errorf("ledger take-overs %v, want 1", got)
		}
		if got := otelread.Sum(points, "opledger.tx.commit_unknown"); got != 0 {
			t.Errorf("commit unknown %v, want 0", got)
		}

		// Logs: the key reuse and the take-over, each once, with the key's
		// short hash.
		for _, ev := range []struct{ msg, outcome string }{
			{"opledger: claim refused", outcomes.KeyReused},
			{"opledger: expired entry taken over", outcomes.TakenOver},
		} {
			want := map[string]string{"msg": ev.msg, "outcome": ev.outcome, "method": method, "key_hash": shortKeyHash(keys[0])}
			if n := logs.Count(want); n != 1 {
				t.Errorf("%d log events %v, want 1; log:\n%s", n, want, logs.Text())
			}
		}
		want := map[string]string{"msg": "opledger: claim refused", "outcome": outcomes.KeyExpired, "level": "INFO", "key_hash": shortKeyHash(stale)}
		if n := logs.Count(want); n != 1 {
			t.Errorf("%d log events %v, want 1; log:\n%s", n, want, logs.Text())
		}
		if n := len(logs.Events()); n != 3 {
			t.Errorf("%d log events, want 3:\n%s", n, logs.Text())
		}

		// The runner's span is the caller's child and the ledger's parent.
		spans := sp.Ended()
		txSpans := map[[8]byte]bool{}
		for _, s := range spans {
			if s.Name == "opledger.tx" && s.Parent.SpanID() == parent.SpanContext().SpanID() {
				txSpans[s.SpanContext.SpanID()] = true
			}
		}
		if len(txSpans) != workers {
			t.Errorf("%d opledger.tx spans under the caller's, want %d", len(txSpans), workers)
		}
		claims := 0
		for _, s := range spans {
			if s.Name == "opledger.claim" && txSpans[s.Parent.SpanID()] {
				claims++
			}
		}
		if claims < workers {
			t.Errorf("%d claim spans under the herd's tx spans, want at least %d", claims, workers)
		}
		noKeys(t, keys, logs.Text(), points, spans)
	})
}

// TestObservedCommitUnknown: the backend dies while COMMIT runs. Run's
// ErrCommitUnknown is counted once and logged once.
func TestObservedCommitUnknown(t *testing.T) {
	t.Parallel()
	forEachPostgres(t, 4, func(t *testing.T, e *env) {
		ctx := context.Background()
		m, logs := otelread.NewMetrics(), otelread.NewLogs()
		slow := e.slowCommitTable(t, 60)
		key := "commit-unknown-k-31c2"
		var killer sync.WaitGroup
		r := e.runner(t, txmiddleware.WithMeterProvider(m.Provider), txmiddleware.WithLogger(logs.Logger))
		_, err := r.Run(ctx, req(t, key), func(ctx context.Context, tx *sql.Tx) (ledger.Result, error) {
			var pid int
			if err := tx.QueryRowContext(ctx, "SELECT pg_backend_pid()").Scan(&pid); err != nil {
				return ledger.Result{}, err
			}
			if _, err := tx.ExecContext(ctx, "INSERT INTO "+slow+" (k) VALUES ($1)", key); err != nil {
				return ledger.Result{}, err
			}
			killer.Go(func() {
				if err := e.awaitBackend(pid, "lower(query) = 'commit' AND "+inPgSleep, 1); err != nil {
					t.Errorf("COMMIT: %v", err)
				}
				e.terminate(t, pid)
			})
			return ledger.Result{Response: []byte("done")}, nil
		})
		killer.Wait()
		if !errors.Is(err, txmiddleware.ErrCommitUnknown) {
			t.Fatalf("%v, want ErrCommitUnknown", err)
		}
		points, err := m.Collect(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if got := otelread.Sum(points, "opledger.tx.commit_unknown", attribute.String("opledger.method", method)); got != 1 {
			t.Errorf("opledger.tx.commit_unknown = %v, want 1", got)
		}
		p := otelread.Select(points, "opledger.tx.duration", outcomeIs(outcomes.CommitUnknown))
		if len(p) != 1 || p[0].Attr("error.type") != "connection_failure" {
			t.Errorf("duration points %v, want one commit-unknown with error.type connection_failure", p)
		}
		want := map[string]string{"msg": "opledger: commit outcome unknown", "level": "ERROR", "outcome": outcomes.CommitUnknown,
			"method": method, "key_hash": shortKeyHash(key)}
		if n := logs.Count(want); n != 1 {
			t.Errorf("%d events %v, want 1:\n%s", n, want, logs.Text())
		}
		noKeys(t, []string{key}, logs.Text(), points, nil)
	})
}

func shortKeyHash(key string) string {
	h := mustIDHash(key)
	return fmt.Sprintf("%x", h[:6])
}

func mustIDHash(key string) [32]byte {
	id, err := ledger.NewIdentity("tenant-a", method, key)
	if err != nil {
		panic(err)
	}
	return txledger.KeyHash(id)
}

// noKeys fails when a raw key (or the tests' caller) appears in the log,
// a metric attribute or a span attribute.
func noKeys(t *testing.T, keys []string, log string, points []otelread.Point, spans tracetest.SpanStubs) {
	t.Helper()
	var b strings.Builder
	b.WriteString(log)
	for _, p := range points {
		b.WriteString(p.String())
	}
	for _, x := range spans {
		b.WriteString(x.Name)
		for _, kv := range x.Attributes {
			b.WriteString(string(kv.Key) + "=" + kv.Value.Emit() + " ")
		}
	}
	all := b.String()
	for _, k := range append(keys, "tenant-a") {
		if strings.Contains(all, k) {
			t.Errorf("%q appears in the logs, metrics or spans", k)
		}
	}
}
