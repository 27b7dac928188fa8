package ledger_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/opledger/opledger/internal/keybirth"
	"github.com/opledger/opledger/internal/testkit/testdb"
	"github.com/opledger/opledger/ledger"
)

// TestWindowPartitionBoundaryHerd: 64 claimants in two waves (half claim
// first, half claim at commit) of keys born on both sides of a bucket boundary (a UTC
// midnight) while an injected clock crosses their window's edges and the
// lower bucket's drop time, and a sweeper creates and drops partitions
// all along (Store.Sweep with the same clock: on PostgreSQL and MariaDB
// partitions, on SQLite batched DELETEs). No duplicate effect; every
// answer is the acquisition, a replay of the committed result or
// ErrKeyExpired (an acquisition or a replay only before the key's edge, a
// refusal only after it); an acquisition's entry is in the table unless
// the clock has passed the entry's expiry (its bucket was dropped, or it
// was swept); past every edge no key is acquired again. On a partitioned
// table the lower bucket is gone at the end of each round.
func TestWindowPartitionBoundaryHerd(t *testing.T) {
	t.Parallel()
	const (
		workers   = 64
		keys      = 8
		step      = time.Millisecond
		retention = time.Hour
		skew      = 5 * time.Millisecond
		window    = retention - skew
	)
	rounds := 2
	forEachTarget(t, workers+2, func(t *testing.T, e *env) {
		ctx := context.Background()
		partitioned := testdb.Partitioned(t, e.DB, e.Dialect, e.Table)
		today := time.Now().UTC().Truncate(24 * time.Hour)
		day := 0
		for _, level := range e.IsolationLevels() {
			t.Run(level.String(), func(t *testing.T) {
				var (
					retries                              atomic.Int64
					acquired, replayed, expired, dropped int
				)
				for r := range rounds {
					boundary := today.Add(time.Duration(day) * 24 * time.Hour)
					day++
					// The clock sweeps workers × step from before the first
					// key's edge to past the lower bucket's drop time
					// (boundary + retention + skew).
					c := &clock{now: boundary.Add(retention - 24*step)}
					l := e.store(t, ledger.WithRetention(retention), ledger.WithClockSkew(skew), ledger.WithClock(c.Now))
					if _, err := l.Sweep(ctx, e.DB, 100); err != nil {
						t.Fatalf("sweep before the herd: %v", err)
					}
					ids := make([]ledger.Identity, keys)
					births := make([]time.Time, keys)
					names := make([]string, keys)
					for k := range keys {
						// Half born just before the boundary, half just after.
						off := time.Duration(k-keys/2)*2*step + step
						ids[k] = testdb.ID(t, "tenant-a", method, keybirth.New(boundary.Add(off)))
						births[k], _ = ids[k].Birth()
						names[k] = fmt.Sprintf("boundary-%s-%d-%d", level, r, k)
					}
					answers := make([]windowAnswer, workers)
					var wg, first sync.WaitGroup
					start, stop := make(chan struct{}), make(chan struct{})
					// Two waves: the first at the clock's start (before
					// every edge), the second once the first has moved the
					// clock past every edge (claims may all pass the window
					// check before any returns, and then none would be
					// refused).
					first.Add(workers / 2)
					second := make(chan struct{})
					go func() { first.Wait(); close(second) }()
					swept := make(chan error, 1)
					go func() {
						var err error
						for err == nil {
							select {
							case <-stop:
								swept <- nil
								return
							default:
							}
							_, err = l.Sweep(ctx, e.DB, 100)
							if errors.Is(err, ledger.ErrInProgress) {
								err = nil // held entries: the next pass
							}
						}
						swept <- err
					}()
					for w := range workers {
						wg.Add(1)
						go func() {
							defer wg.Done()
							<-start
							if w >= workers/2 {
								<-second
							}
							k := w % keys
							req := ledger.ClaimRequest{Identity: ids[k], Fingerprint: fp(names[k])}
							resp := []byte(fmt.Sprintf("%s run by worker %d", names[k], w))
							answers[w] = e.windowUnit(ctx, l, level, &retries, req, w%2 == 1, names[k], w, resp, c.Now)
							c.Add(step)
							if w < workers/2 {
								first.Done()
							}
						}()
					}
					close(start)
					wg.Wait()
					c.Add(skew + 2*step) // past the lower bucket's drop time
					if _, err := l.Sweep(ctx, e.DB, 100); err != nil && !errors.Is(err, ledger.ErrInProgress) {
						t.Fatalf("sweep after the herd: %v", err)
					}
					close(stop)
					if err := <-swept; err != nil {
						t.Fatalf("sweep during the herd: %v", err)
					}
					if partitioned {
						for _, p := range testdb.Partitions(t, e.DB, e.Dialect, e.Table) {
							if p.To == boundary.UnixMicro() {
								t.Fatalf("bucket %s (ending %v) still there at %v, past its drop time", p.Name, boundary, c.Now())
							}
						}
						dropped++
					}

					for k := range keys {
						edge := births[k].Add(window)
						var winner []byte
						won := 0
						for w := k; w < workers; w += keys {
							if a := answers[w]; a.acquired {
								won++
								winner = a.result
							}
						}
						if won > 1 {
							t.Fatalf("key %s: %d acquisitions; want at most one", names[k], won)
						}
						if n := e.BizRows(t, names[k]); n != won {
							t.Fatalf("key %s: %d effects for %d acquisitions", names[k], n, won)
						}
						stored, done := e.storedResponse(t, ids[k])
						gone := !c.Now().Before(births[k].Add(retention))
						switch {
						case won == 1 && stored == nil && !gone:
							t.Fatalf("key %s: the acquisition's commit is lost at %v, before its expiry", names[k], c.Now())
						case won == 1 && stored != nil && (!done || string(stored) != string(winner)):
							t.Fatalf("key %s: stored %q (completed %v), want %q", names[k], stored, done, winner)
						case won == 0 && stored != nil:
							t.Fatalf("key %s: an entry without an acquisition", names[k])
						}
						for w := k; w < workers; w += keys {
							a := answers[w]
							switch {
							case a.err != nil && !errors.Is(a.err, ledger.ErrKeyExpired):
								t.Fatalf("key %s, worker %d: %v; want the committed result or ErrKeyExpired", names[k], w, a.err)
							case a.err != nil:
								expired++
								if !a.after.After(edge) {
									t.Fatalf("key %s, worker %d: ErrKeyExpired at %v, before the key's edge %v", names[k], w, a.after, edge)
								}
							case a.before.After(edge):
								t.Fatalf("key %s, worker %d: acquired %v (or replayed) at %v, after the key's edge %v", names[k], w, a.acquired, a.before, edge)
							case a.acquired:
								acquired++
							case winner == nil || string(a.result) != string(winner):
								t.Fatalf("key %s, worker %d: replayed %q; want the committed result %q", names[k], w, a.result, winner)
							default:
								replayed++
							}
						}
						// Past its edge (and, below the boundary, its bucket
						// dropped): refused, never run again.
						before := e.BizRows(t, names[k])
						for _, record := range []bool{false, true} {
							a := e.windowUnit(ctx, l, level, &retries, ledger.ClaimRequest{Identity: ids[k], Fingerprint: fp(names[k])}, record, names[k], 1000, []byte("again"), nil)
							if a.acquired || !errors.Is(a.err, ledger.ErrKeyExpired) {
								t.Fatalf("key %s past its edge (record %v): acquired %v, %v; want ErrKeyExpired", names[k], record, a.acquired, a.err)
							}
						}
						if _, err := l.Lookup(ctx, e.DB, ids[k]); !errors.Is(err, ledger.ErrKeyExpired) {
							t.Fatalf("key %s past its edge: Lookup %v; want ErrKeyExpired", names[k], err)
						}
						if n := e.BizRows(t, names[k]); n != before {
							t.Fatalf("key %s past its edge: ran again", names[k])
						}
					}
				}
				if acquired == 0 || expired == 0 {
					t.Fatalf("the herds never straddled the edges: %d acquired, %d expired", acquired, expired)
				}
				t.Logf("%s %s: %d rounds × %d claimants over %d keys across a bucket boundary, with a sweeper: %d acquired, %d replayed, %d ErrKeyExpired, %d buckets dropped, 0 duplicates; %d whole-transaction retries",
					e.Name, level, rounds, workers, keys, acquired, replayed, expired, dropped, retries.Load())
			})
		}
	})
}
