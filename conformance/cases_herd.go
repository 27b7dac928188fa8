package conformance

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/opledger/opledger/internal/dialectkit"
	"github.com/opledger/opledger/ledger"
)

func caseHerd(e *env) {
	keys := e.o.keys
	tl := e.herds("herd", keys, herdOpts{l: e.l, claimants: e.conc})
	e.figure("%d claimants × %d keys: %s", e.conc, keys, tl)
	if n := e.ledgerRows(); n != keys && !e.t.Failed() {
		e.t.Errorf("%d ledger rows after %d keys; want one per key", n, keys)
	}
}

func casePriorRead(e *env) {
	claimants := minInt(16, e.conc)
	keys := e.keysFrac(8, 10)
	tl := e.herds("prior", keys, herdOpts{l: e.l, claimants: claimants, priorRead: true})
	e.figure("%d pooled connections reading before each claim × %d keys: %s", claimants, keys, tl)
	if dialectkit.TraitsOf(e.d).SerialWriters && tl.retried > 0 {
		e.t.Errorf("%d transactions had to be retried after reading first (SQLITE_BUSY/BUSY_SNAPSHOT): open the pool with immediate transactions (sqlite.DSN)", tl.retried)
	}
}

// oldLedger is the ledger under test with a clock two retentions behind,
// so that what it claims is already expired for e.l.
func (e *env) oldLedger() safeLedger {
	return e.newLedger(func() time.Time { return e.clock.Now().Add(-2 * retention) })
}

func oldResult(key string) ledger.Result {
	return ledger.Result{Code: 99, Response: []byte("expired result of " + key), TypeName: suiteType + ".Old"}
}

func caseExpiry(e *env) {
	old := e.oldLedger()
	claimants := minInt(16, e.conc)
	keys := minInt(e.keysFrac(10, 5), 20)
	tl := e.herds("expiry", keys, herdOpts{
		l: e.l, claimants: claimants,
		before: func(key string) {
			if err := e.claimOnce(old, key, oldResult(key)); err != nil {
				e.t.Fatalf("set-up: write an entry that is already expired: %v", err)
			}
			if _, err := e.lookup(key); !errors.Is(err, ledger.ErrNotFound) {
				e.t.Fatalf("Lookup of an expired entry: %v, want ErrNotFound", err)
			}
		},
		forbidden: func(key string) (ledger.Result, bool) { return oldResult(key), true },
	})
	e.figure("%d claimants × %d expired keys: %s", claimants, keys, tl)
	if n := e.ledgerRows(); n != keys && !e.t.Failed() {
		e.t.Errorf("%d ledger rows after taking over %d keys; want one per key", n, keys)
	}
}

// sweeper runs Sweep in a loop until stopped, returning how many entries
// it deleted and any error other than the stop.
type sweeper struct {
	stop    context.CancelFunc
	done    chan struct{}
	deleted int64
	runs    int
	retried int // sweeps that lost a lock wait or a deadlock and were retried
	err     error
}

// sweepFunc is the ledger's Sweep on the case's table.
type sweepFunc func(ctx context.Context, batch int) (int64, error)

func (e *env) startSweeper(sw sweepFunc, batch int) *sweeper {
	ctx, stop := context.WithCancel(e.ctx)
	s := &sweeper{stop: stop, done: make(chan struct{})}
	go func() {
		defer close(s.done)
		for ctx.Err() == nil {
			n, err := sw(ctx, batch)
			s.deleted += n
			s.runs++
			if n == 0 {
				sleep(ctx, 200*time.Microsecond)
			}
			if err != nil && ctx.Err() == nil {
				if errors.Is(err, ledger.ErrInProgress) || errors.Is(err, ledger.ErrRetryable) {
					// A sweep statement that timed out on a lock (SQLite's busy
					// timeout) or was chosen as a deadlock victim (InnoDB) deleted
					// nothing; a sweeper simply runs again.
					s.retried++
					continue
				}
				s.err = err
				return
			}
		}
	}()
	return s
}

func (s *sweeper) halt() {
	s.stop()
	<-s.done
}

func (e *env) sweeperOrSkip() sweepFunc {
	sw, ok := e.l.sweeper()
	if !ok {
		e.t.Skipf("the ledger has no Sweep method")
	}
	return sw
}

func caseDeleteRace(e *env) {
	sw := e.sweeperOrSkip()
	old := e.oldLedger()
	keys := e.keysFrac(4, 10)
	s := e.startSweeper(sw, 1)
	var (
		mu      sync.Mutex
		created int
	)
	tl := e.herds("delrace", keys, herdOpts{
		l: e.l, claimants: e.conc, jitter: 3 * time.Millisecond,
		before: func(key string) {
			if err := e.claimOnce(old, key, oldResult(key)); err != nil {
				e.t.Errorf("set-up: write an expired entry: %v", err)
				return
			}
			mu.Lock()
			created++
			mu.Unlock()
		},
		forbidden: func(key string) (ledger.Result, bool) { return oldResult(key), true },
	})
	s.halt()
	if s.err != nil {
		e.t.Errorf("sweeper: %v", s.err)
	}
	e.figure("%d claimants × %d expired keys with a sweeper deleting (%d sweeps, %d retried; %d of %d expired entries deleted under the claimants): %s",
		e.conc, keys, s.runs, s.retried, s.deleted, created, tl)
	if n := e.ledgerRows(); n != keys && !e.t.Failed() {
		e.t.Errorf("%d ledger rows after %d keys; want one per key", n, keys)
	}
}

func caseSweepUnderLoad(e *env) {
	sw := e.sweeperOrSkip()
	old := e.oldLedger()
	const expired, live = 40, 40
	for i := range expired {
		key := fmt.Sprintf("sweep-expired-%d", i)
		if err := e.claimOnce(old, key, oldResult(key)); err != nil {
			e.t.Fatalf("set-up: expired entry: %v", err)
		}
	}
	for i := range live {
		key := fmt.Sprintf("sweep-live-%d", i)
		if err := e.claimOnce(e.l, key, resultFor(key, 1000+i)); err != nil {
			e.t.Fatalf("set-up: live entry: %v", err)
		}
	}
	keys := e.keysFrac(4, 10)
	s := e.startSweeper(sw, 3)
	tl := e.herds("sweep-herd", keys, herdOpts{l: e.l, claimants: e.conc})
	s.halt()
	if s.err != nil {
		e.t.Errorf("sweeper: %v", s.err)
	}
	final, err := sw(e.ctx, 100)
	if err != nil {
		e.t.Errorf("final sweep: %v", err)
	}
	for i := range live {
		key := fmt.Sprintf("sweep-live-%d", i)
		en, err := e.lookup(key)
		if err != nil || en.State != ledger.Completed || !sameResult(en.Result, resultFor(key, 1000+i)) {
			e.t.Errorf("live entry %s after sweeping: %+v, %v; want it intact", key, en, err)
		}
	}
	for k := range keys {
		key := fmt.Sprintf("sweep-herd-%d", k)
		if en, err := e.lookup(key); err != nil || en.State != ledger.Completed {
			e.t.Errorf("herd entry %s after sweeping: %+v, %v; want it completed", key, en, err)
		}
	}
	if n := e.ledgerRows(); n != live+keys {
		e.t.Errorf("%d ledger rows after sweeping; want %d live + %d herd entries (expired ones gone, nothing else)", n, live, keys)
	}
	e.figure("%d claimants × %d keys with a sweeper looping (%d sweeps, %d retried, deleted %d of %d expired, final sweep %d; %d live entries intact): %s",
		e.conc, keys, s.runs, s.retried, s.deleted, expired, final, live, tl)
}
