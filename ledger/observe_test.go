package ledger_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"

	"github.com/opledger/opledger/dialects"
	"github.com/opledger/opledger/internal/dialectkit"
	"github.com/opledger/opledger/internal/harness/otelread"
	"github.com/opledger/opledger/internal/outcomes"
	"github.com/opledger/opledger/internal/testkit/testdb"
	"github.com/opledger/opledger/internal/txledger"
	"github.com/opledger/opledger/ledger"
)

const (
	claimsMetric   = "opledger.ledger.claims"
	claimDuration  = "opledger.ledger.claim.duration"
	completeMetric = "opledger.ledger.complete.duration"
)

func outcome(o string) attribute.KeyValue { return attribute.String("opledger.outcome", o) }

// TestMetricsOfARealRun: a herd of 16 transactions on one key, a replay,
// a key reuse, a take-over of an expired entry and a failing claim, on
// every database, recorded through the SDK's manual reader and an
// in-memory span exporter: the counter by outcome equals what the claims
// returned, every claim is timed, the spans are children of the caller's,
// and no attribute holds a key or a caller.
func TestMetricsOfARealRun(t *testing.T) {
	t.Parallel()
	const workers = 16
	forEachTarget(t, workers, func(t *testing.T, e *env) {
		ctx := context.Background()
		m, sp := otelread.NewMetrics(), otelread.NewSpans()
		t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
		var now atomic.Int64
		now.Store(t0.UnixMicro())
		l := e.store(t, ledger.WithMeterProvider(m.Provider), ledger.WithTracerProvider(sp.Provider),
			ledger.WithRetention(time.Hour), ledger.WithClock(func() time.Time { return time.UnixMicro(now.Load()) }))

		// The herd: count what the claims returned, per outcome.
		const key = "herd-key-7f3a9c"
		id := testdb.ID(t, "tenant-secret-name", method, key)
		var (
			mu       sync.Mutex
			returned = map[string]int{}
			wg       sync.WaitGroup
			start    = make(chan struct{})
		)
		for w := 0; w < workers; w++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				for attempt := 0; attempt < 50; attempt++ {
					tx, err := e.DB.BeginTx(ctx, nil)
					if err != nil {
						if e.Dialect.Classify(err) == dialects.ClassLockTimeout || e.Dialect.Classify(err).Retryable() {
							continue // SQLite: the write lock at BEGIN; no claim was made
						}
						t.Error(err)
						return
					}
					c, err := l.Claim(ctx, tx, ledger.ClaimRequest{Identity: id, Fingerprint: fp("herd")})
					mu.Lock()
					returned[ledger.OutcomeOf(c, err)]++
					mu.Unlock()
					if err == nil && c.Acquired() {
						err = l.Complete(ctx, tx, c, ledger.Result{Response: []byte("done")})
					}
					if err == nil {
						err = tx.Commit()
					} else {
						tx.Rollback()
					}
					if err == nil {
						return
					}
					if !errors.Is(err, ledger.ErrRetryable) && !errors.Is(err, ledger.ErrInProgress) && !e.Dialect.Classify(err).Retryable() {
						t.Error(err)
						return
					}
				}
				t.Error("herd worker still failing after 50 attempts")
			}()
		}
		close(start)
		wg.Wait()
		if returned[outcomes.Acquired] != 1 || returned[outcomes.Replayed] < 1 {
			t.Fatalf("herd returned %v: want one acquisition and replays", returned)
		}

		// A replay, a key reuse, then a take-over once the entry expired.
		if c, err := claimOnce(t, e, l, id, fp("herd"), ""); err != nil || c.Outcome != ledger.Replay {
			t.Fatalf("replay: %v %v", c, err)
		}
		returned[outcomes.Replayed]++
		if _, err := claimOnce(t, e, l, id, fp("another request"), ""); !errors.Is(err, ledger.ErrKeyReused) {
			t.Fatalf("key reuse: %v", err)
		}
		returned[outcomes.KeyReused]++
		now.Store(t0.Add(2 * time.Hour).UnixMicro())
		c, err := claimOnce(t, e, l, id, fp("after expiry"), "new")
		if err != nil || !c.Acquired() || !txledger.TookOver(c) {
			t.Fatalf("take-over: %+v %v", c, err)
		}
		returned[outcomes.TakenOver]++

		// A claim that fails in the database: its table is gone.
		broken, err := ledger.New(e.Dialect, ledger.WithTable("opl_no_such_table"), ledger.WithMeterProvider(m.Provider))
		if err != nil {
			t.Fatal(err)
		}
		tx, err := e.DB.BeginTx(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		defer tx.Rollback()
		if _, err := broken.Claim(ctx, tx, ledger.ClaimRequest{Identity: id, Fingerprint: fp("x")}); err == nil {
			t.Fatal("claim on a missing table succeeded")
		}
		tx.Rollback()

		points, err := m.Collect(ctx)
		if err != nil {
			t.Fatal(err)
		}
		total := 0
		for o, n := range returned {
			total += n
			if got := otelread.Sum(points, claimsMetric, outcome(o), attribute.String("db.collection.name", e.Table)); got != float64(n) {
				t.Errorf("%s %s = %v, claims returned %d (all: %v)", claimsMetric, o, got, n, returned)
			}
		}
		if got := otelread.Sum(points, claimDuration, attribute.String("db.collection.name", e.Table)); got != float64(total) {
			t.Errorf("%s has %v measurements, want %d", claimDuration, got, total)
		}
		// Complete ran once per acquisition: the herd's winner and the take-over.
		if got := otelread.Sum(points, completeMetric, outcome("ok")); got != 2 {
			t.Errorf("%s ok = %v, want 2", completeMetric, got)
		}
		failed := otelread.Select(points, claimsMetric, outcome(outcomes.Failed), attribute.String("db.collection.name", "opl_no_such_table"))
		if len(failed) != 1 || failed[0].Value != 1 || failed[0].Attr("db.response.status_code") == "" || failed[0].Attr("error.type") == "" {
			t.Errorf("failed claim: %v, want one with db.response.status_code and error.type", failed)
		}
		t.Logf("failed claim: %v", failed)
		for _, p := range points {
			if p.Attr("db.system.name") != dialectkit.SystemNameOf(e.Dialect) || p.Attr("opledger.method") != method {
				t.Errorf("point %v: want db.system.name %s and opledger.method %s", p, dialectkit.SystemNameOf(e.Dialect), method)
			}
			if enc := p.Attrs.Encoded(attribute.DefaultEncoder()); strings.Contains(enc, key) || strings.Contains(enc, "tenant-secret-name") {
				t.Errorf("point %v carries the key or the caller", p)
			}
		}

		// Spans: one per Claim and Complete, children of the caller's span.
		sp2 := otelread.NewSpans()
		traced := e.store(t, ledger.WithTracerProvider(sp2.Provider))
		pctx, parent := sp2.Provider.Tracer("test").Start(ctx, "caller")
		id2 := testdb.ID(t, "tenant-secret-name", method, "traced-key-5be1")
		tx, err = e.DB.BeginTx(pctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		defer tx.Rollback()
		c, err = traced.Claim(pctx, tx, ledger.ClaimRequest{Identity: id2, Fingerprint: fp("t")})
		if err != nil {
			t.Fatal(err)
		}
		if err := traced.Complete(pctx, tx, c, ledger.Result{Response: []byte("r")}); err != nil {
			t.Fatal(err)
		}
		if err := tx.Commit(); err != nil {
			t.Fatal(err)
		}
		parent.End()
		spans := sp2.Ended()
		names := map[string]bool{}
		for _, s := range spans {
			names[s.Name] = true
			if s.Name == "caller" {
				continue
			}
			if s.Parent.SpanID() != parent.SpanContext().SpanID() {
				t.Errorf("span %s is not a child of the caller's span", s.Name)
			}
			for _, kv := range s.Attributes {
				if v := kv.Value.Emit(); strings.Contains(v, "traced-key-5be1") || strings.Contains(v, "tenant-secret-name") {
					t.Errorf("span %s attribute %s = %q holds the key or the caller", s.Name, kv.Key, v)
				}
			}
		}
		if !names["opledger.claim"] || !names["opledger.complete"] {
			t.Errorf("spans %v, want opledger.claim and opledger.complete", names)
		}
		keyHash := txledger.KeyHash(id2)
		if got := otelread.SpanAttr(spans, "opledger.claim", "opledger.key_hash"); got != fmt.Sprintf("%x", keyHash[:6]) {
			t.Errorf("claim span key hash %q, want the short SHA-256 of the key", got)
		}
		if got := otelread.SpanAttr(spans, "opledger.claim", "opledger.outcome"); got != outcomes.Acquired {
			t.Errorf("claim span outcome %q", got)
		}
	})
}

// TestOutcomeNames: a claim's Outcome is named as the metrics name it.
func TestOutcomeNames(t *testing.T) {
	for o, want := range map[ledger.ClaimOutcome]string{ledger.Acquired: outcomes.Acquired, ledger.Replay: outcomes.Replayed,
		ledger.Recorded: outcomes.Recorded} {
		if got := ledger.OutcomeName(o); got != want {
			t.Errorf("%d: %q, want %q", int(o), got, want)
		}
	}
}
