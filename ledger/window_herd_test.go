package ledger_test

import (
	"context"
	"database/sql"
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

// errWindowReplayed ends a claim-at-commit unit that replayed: its work is
// rolled back, and the replay is its answer.
var errWindowReplayed = errors.New("replayed: roll the work back")

// windowAnswer is what one attempt of a herd ended with.
type windowAnswer struct {
	worker   int
	acquired bool   // acquired (or recorded) and committed
	result   []byte // stored when acquired, replayed otherwise
	err      error
	// before and after are the ledger's clock just before the attempt's
	// last claim and just after it returned.
	before, after time.Time
}

// windowUnit runs one attempt for req at level: claim first (Claim, then
// the business write of biz and Complete with resp) when record is false,
// claim at commit (the business write, then Record) when it is true; a
// retryable failure retries the whole transaction. now, when not nil, is
// read around the last claim.
func (e *env) windowUnit(ctx context.Context, l *ledger.Store, level sql.IsolationLevel, retries *atomic.Int64, req ledger.ClaimRequest, record bool, biz string, worker int, resp []byte, now func() time.Time) windowAnswer {
	a := windowAnswer{worker: worker}
	stamp := func(at *time.Time) {
		if now != nil {
			*at = now()
		}
	}
	res := ledger.Result{Response: resp, TypeName: "pay.v1.TransferResponse"}
	err := e.unit(ctx, level, retries, func(tx *sql.Tx) error {
		a.acquired, a.result = false, nil
		if record {
			if err := e.WriteBiz(ctx, tx, biz, worker); err != nil {
				return err
			}
			stamp(&a.before)
			c, err := l.Record(ctx, tx, req, res)
			stamp(&a.after)
			switch {
			case err != nil:
				return err
			case c.Recorded():
				a.acquired, a.result = true, resp
				return nil
			}
			a.result = c.Result.Response
			return errWindowReplayed
		}
		stamp(&a.before)
		c, err := l.Claim(ctx, tx, req)
		stamp(&a.after)
		if err != nil {
			return err
		}
		if !c.Acquired() {
			a.result = c.Result.Response
			return nil
		}
		if err := e.WriteBiz(ctx, tx, biz, worker); err != nil {
			return err
		}
		a.acquired, a.result = true, resp
		return l.Complete(ctx, tx, c, res)
	})
	if !errors.Is(err, errWindowReplayed) {
		a.err = err
	}
	return a
}

// rowsOf counts id's ledger rows.
func (e *env) rowsOf(t *testing.T, id ledger.Identity) int {
	t.Helper()
	b := id.ID()
	return e.Count(t, "SELECT COUNT(*) FROM "+e.Dialect.QuoteIdent(e.Table)+" WHERE id = "+e.Ph(1), b[:])
}

// storedResponse reads id's stored response straight from the table (a
// lookup through the ledger would answer ErrKeyExpired past the window).
func (e *env) storedResponse(t *testing.T, id ledger.Identity) ([]byte, bool) {
	t.Helper()
	b := id.ID()
	var resp []byte
	var done sql.NullInt64
	err := e.DB.QueryRow("SELECT response, completed_at FROM "+e.Dialect.QuoteIdent(e.Table)+" WHERE id = "+e.Ph(1), b[:]).Scan(&resp, &done)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, false
	}
	if err != nil {
		t.Fatal(err)
	}
	return resp, done.Valid
}

// TestWindowFirstSentHerd proves the rule chosen for a first-sent time
// (ledger.Identity.WithFirstSent): it is part of the identity. 64
// goroutines on real connections claim one key that carries no birth of
// its own, half sending one first-sent time and half another, half claim
// first and half claim at commit: exactly one effect per (key, first
// sent), and every attempt is answered by its own operation (acquired, or
// a replay of the result of the winner with its own first-sent time),
// never by the other's.
func TestWindowFirstSentHerd(t *testing.T) {
	t.Parallel()
	const workers = 64
	rounds := 6
	if testing.Short() {
		rounds = 2
	}
	forEachTarget(t, workers, func(t *testing.T, e *env) {
		ctx := context.Background()
		rounds := testdb.Scaled(e.Name, rounds)
		sent := [2]time.Time{time.Now().Truncate(time.Second).Add(-time.Second), time.Now().Truncate(time.Second)}
		for _, level := range e.IsolationLevels() {
			t.Run(level.String(), func(t *testing.T) {
				var retries atomic.Int64
				for r := range rounds {
					key := fmt.Sprintf("first-sent-herd-%s-%d", level, r)
					base := testdb.ID(t, "tenant-a", method, key)
					var ids [2]ledger.Identity
					for i := range ids {
						id, err := base.WithFirstSent(sent[i])
						if err != nil {
							t.Fatal(err)
						}
						ids[i] = id
					}
					biz := func(i int) string { return fmt.Sprintf("%s#sent-%d", key, i) }
					answers := make([]windowAnswer, workers)
					var wg sync.WaitGroup
					start := make(chan struct{})
					for w := range workers {
						wg.Add(1)
						go func() {
							defer wg.Done()
							<-start
							i := w % 2
							req := ledger.ClaimRequest{Identity: ids[i], Fingerprint: fp(key)}
							resp := []byte(fmt.Sprintf("%s sent %d, run by worker %d", key, i, w))
							answers[w] = e.windowUnit(ctx, e.l, level, &retries, req, w%4 >= 2, biz(i), w, resp, nil)
						}()
					}
					close(start)
					wg.Wait()

					var winners [2][]byte
					var won [2]int
					for w, a := range answers {
						if a.err != nil {
							t.Fatalf("key %s, worker %d (first sent %d): %v", key, w, w%2, a.err)
						}
						if a.acquired {
							won[w%2]++
							winners[w%2] = a.result
						}
					}
					for i := range 2 {
						if won[i] != 1 {
							t.Fatalf("key %s, first sent %d: %d acquisitions; want exactly 1 per (key, first sent)", key, i, won[i])
						}
						if n := e.BizRows(t, biz(i)); n != 1 {
							t.Fatalf("key %s, first sent %d: %d effects; want exactly 1", key, i, n)
						}
						if n := e.rowsOf(t, ids[i]); n != 1 {
							t.Fatalf("key %s, first sent %d: %d ledger rows; want 1", key, i, n)
						}
						en, err := e.l.Lookup(ctx, e.DB, ids[i])
						if err != nil || string(en.Result.Response) != string(winners[i]) {
							t.Fatalf("key %s, first sent %d: Lookup %+v %v; want its own winner's %q", key, i, en, err, winners[i])
						}
					}
					for w, a := range answers {
						if !a.acquired && string(a.result) != string(winners[w%2]) {
							mixed := string(a.result) == string(winners[1-w%2])
							t.Fatalf("key %s, worker %d (first sent %d): replayed %q (the other first-sent's: %v); want its own operation's %q", key, w, w%2, a.result, mixed, winners[w%2])
						}
					}
				}
				t.Logf("%s %s: %d keys × %d attempts over two first-sent times, claim first and at commit: 2 effects per key, no answer mixed; %d whole-transaction retries", e.Name, level, rounds, workers, retries.Load())
			})
		}
	})
}

// TestWindowEdgeHerd: 64 claimants (half claim first, half claim at
// commit) of keys born on both sides of the window's edge while an
// injected clock crosses it (every attempt moves it a millisecond on, so
// that the edge sweeps over the keys' births during the herd): no
// duplicate effect, no lost commit (an acquisition's entry is in the table
// with its result), every answer the acquisition, a replay of the
// committed result or ErrKeyExpired; a refusal only once the clock has
// passed the key's edge, an acquisition or a replay only before it; and
// once the clock is past every edge, no key is acquired again.
func TestWindowEdgeHerd(t *testing.T) {
	t.Parallel()
	const (
		workers = 64
		keys    = 8
		step    = time.Millisecond
		// gap between the keys' births: the clock moves workers × step
		// during a herd, so the edge passes over every key's birth.
		gap       = workers * step / keys
		retention = time.Hour
		skew      = time.Minute
		window    = retention - skew
	)
	rounds := 5
	if testing.Short() {
		rounds = 2
	}
	forEachTarget(t, workers, func(t *testing.T, e *env) {
		ctx := context.Background()
		rounds := testdb.Scaled(e.Name, rounds)
		for _, level := range e.IsolationLevels() {
			t.Run(level.String(), func(t *testing.T) {
				c := &clock{now: time.Now().Truncate(time.Millisecond)}
				l := e.store(t, ledger.WithRetention(retention), ledger.WithClockSkew(skew), ledger.WithClock(c.Now))
				var (
					retries                     atomic.Int64
					acquired, replayed, expired int
				)
				for r := range rounds {
					t0 := c.Now()
					ids := make([]ledger.Identity, keys)
					edges := make([]time.Time, keys)
					names := make([]string, keys)
					for k := range keys {
						// Births from half the herd's sweep before the edge at t0
						// to half after it: the first keys are already past
						// their edge, the last still inside when the herd ends
						// (the clock moves workers × step in all).
						birth := t0.Add(-window + time.Duration(k-keys/2)*gap + gap/2)
						ids[k] = testdb.ID(t, "tenant-a", method, keybirth.New(birth))
						b, _ := ids[k].Birth()
						edges[k] = b.Add(window)
						names[k] = fmt.Sprintf("edge-%s-%d-%d", level, r, k)
					}
					answers := make([]windowAnswer, workers)
					var wg sync.WaitGroup
					start := make(chan struct{})
					for w := range workers {
						wg.Add(1)
						go func() {
							defer wg.Done()
							<-start
							k := w % keys
							req := ledger.ClaimRequest{Identity: ids[k], Fingerprint: fp(names[k])}
							resp := []byte(fmt.Sprintf("%s run by worker %d", names[k], w))
							answers[w] = e.windowUnit(ctx, l, level, &retries, req, w%2 == 1, names[k], w, resp, c.Now)
							c.Add(step)
						}()
					}
					close(start)
					wg.Wait()

					for k := range keys {
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
						switch {
						case won == 1 && (!done || string(stored) != string(winner)):
							t.Fatalf("key %s: the acquisition's commit is lost: stored %q (completed %v), want %q", names[k], stored, done, winner)
						case won == 0 && e.rowsOf(t, ids[k]) != 0:
							t.Fatalf("key %s: an entry without an acquisition", names[k])
						}
						for w := k; w < workers; w += keys {
							a := answers[w]
							switch {
							case a.err != nil && !errors.Is(a.err, ledger.ErrKeyExpired):
								t.Fatalf("key %s, worker %d: %v; want the committed result or ErrKeyExpired", names[k], w, a.err)
							case a.err != nil:
								expired++
								if !a.after.After(edges[k]) {
									t.Fatalf("key %s, worker %d: ErrKeyExpired at %v, before the key's edge %v", names[k], w, a.after, edges[k])
								}
							case a.before.After(edges[k]):
								t.Fatalf("key %s, worker %d: acquired %v (or replayed) at %v, after the key's edge %v", names[k], w, a.acquired, a.before, edges[k])
							case a.acquired:
								acquired++
							case winner == nil || string(a.result) != string(winner):
								t.Fatalf("key %s, worker %d: replayed %q; want the committed result %q", names[k], w, a.result, winner)
							default:
								replayed++
							}
						}
					}
					// Past every edge: every key refused, none acquired again.
					c.Add(gap * keys)
					for k := range keys {
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
					t.Fatalf("the herds never straddled the edge: %d acquired, %d expired", acquired, expired)
				}
				t.Logf("%s %s: %d rounds × %d claimants over %d keys across the edge: %d acquired, %d replayed, %d ErrKeyExpired, 0 duplicates; %d whole-transaction retries",
					e.Name, level, rounds, workers, keys, acquired, replayed, expired, retries.Load())
			})
		}
	})
}
