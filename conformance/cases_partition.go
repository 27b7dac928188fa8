package conformance

import (
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/opledger/opledger/internal/dialectkit"
	"github.com/opledger/opledger/ledger"
)

// partitions returns the partitions by born_at of the case's table, nil
// when it is not partitioned that way (or the dialect cannot tell).
func (e *env) partitions() []dialectkit.Partition {
	e.t.Helper()
	pt, ok := e.d.(dialectkit.Partitioner)
	if !ok {
		return nil
	}
	parts, ok, err := pt.Partitions(e.ctx, e.db, e.table)
	if err != nil {
		e.t.Fatalf("partitions of %s: %v", e.table, err)
	}
	if !ok {
		return nil
	}
	return parts
}

// bucketOf returns the bucket of parts that holds births at t.
func bucketOf(parts []dialectkit.Partition, t time.Time) (dialectkit.Partition, bool) {
	us := t.UnixMicro()
	for _, p := range parts {
		if p.Kind == dialectkit.Bucket && p.From <= us && us < p.To {
			return p, true
		}
	}
	return dialectkit.Partition{}, false
}

// boundaryAnswer is one attempt of caseWindowPartitionDrop.
type boundaryAnswer struct {
	won           bool
	result        ledger.Result
	err           error
	before, after time.Time
}

func caseWindowPartitionDrop(e *env) {
	parts := e.partitions()
	if parts == nil {
		e.t.Skipf("the ledger's table is not partitioned by born_at (the migrations partition a new table on PostgreSQL and MySQL/MariaDB/TiDB; SQLite and a table moved by hand sweep by DELETE)")
		return
	}
	sw, ok := e.l.sweeper()
	if !ok {
		e.t.Skipf("the ledger has no Sweep: nothing creates or drops its partitions")
		return
	}
	r, s, _ := e.window()
	here, ok := bucketOf(parts, e.clock.Now())
	if !ok {
		if _, err := sw(e.ctx, 100); err != nil && !errors.Is(err, ledger.ErrInProgress) {
			e.t.Fatalf("Sweep: %v", err)
		}
		if here, ok = bucketOf(e.partitions(), e.clock.Now()); !ok {
			e.t.Fatalf("no bucket holds the births of now, even after a Sweep (which creates them ahead)")
		}
	}
	boundary := time.UnixMicro(here.To)
	const keys, gap = 8, 2 * time.Millisecond
	ids := make([]ledger.Identity, keys)
	births := make([]time.Time, keys)
	names := make([]string, keys)
	for k := range keys {
		births[k] = boundary.Add(time.Duration(k-keys/2)*gap + gap/2) // half below the boundary, half above
		ids[k] = e.bornID(births[k])
		births[k], _ = ids[k].Birth()
		names[k] = fmt.Sprintf("partition-drop-%d", k)
	}
	// The clock sweeps from before the keys' window edges (birth +
	// retention - skew) to past the lower bucket's drop time (boundary +
	// retention + skew) during the herd.
	e.clock.Advance(boundary.Add(r - s - 20*time.Millisecond).Sub(e.clock.Now()))
	claimants := e.conc
	// The first wave alone moves the clock past every edge (40 ms), both
	// waves past the drop time.
	step := max(80*time.Millisecond, 2*s+80*time.Millisecond) / time.Duration(claimants)
	forms := e.forms()
	answers := make([]boundaryAnswer, claimants)
	fresh := make([]ledger.Identity, claimants)
	var (
		wg, first   sync.WaitGroup
		start, stop = make(chan struct{}), make(chan struct{})
		second      = make(chan struct{})
		swept       = make(chan error, 1)
		sweeps      int
	)
	// Two waves: the second starts once the first has moved the clock
	// past every key's edge (claims may all pass the window check before
	// any returns, and then none would be refused).
	first.Add(claimants / 2)
	go func() { first.Wait(); close(second) }()
	go func() {
		for {
			select {
			case <-stop:
				swept <- nil
				return
			default:
			}
			if _, err := sw(e.ctx, 100); err != nil && !errors.Is(err, ledger.ErrInProgress) && !errors.Is(err, ledger.ErrRetryable) {
				swept <- err
				return
			}
			sweeps++
		}
	}()
	for w := range claimants {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			if w >= claimants/2 {
				<-second
			}
			k := w % keys
			id, key := ids[k], names[k]
			if w%4 == 3 {
				// A fresh key born now, in the bucket above the boundary:
				// claims commit there while the one below is dropped.
				id, key = e.bornID(e.clock.Now()), fmt.Sprintf("partition-drop-fresh-%d", w)
				fresh[w] = id
			}
			a := &answers[w]
			a.before = e.clock.Now()
			c, won, err := e.unitIn(forms[w%len(forms)], ledger.ClaimRequest{Identity: id, Fingerprint: fpOf(key)}, key, w, resultFor(key, w))
			a.after = e.clock.Now()
			a.won, a.err = won, err
			if c != nil && c.Outcome == ledger.Replay {
				a.result = c.Result
			}
			e.clock.Advance(step)
			if w < claimants/2 {
				first.Done()
			}
		}()
	}
	close(start)
	wg.Wait()
	e.clock.Advance(boundary.Add(r + s + time.Second).Sub(e.clock.Now())) // past the drop time, whatever the herd reached
	if _, err := sw(e.ctx, 100); err != nil && !errors.Is(err, ledger.ErrInProgress) {
		e.t.Errorf("Sweep after the herd: %v", err)
	}
	close(stop)
	if err := <-swept; err != nil {
		e.t.Errorf("Sweep during the herd: %v", err)
	}
	for _, p := range e.partitions() {
		if p.Kind == dialectkit.Bucket && p.To == here.To {
			e.t.Errorf("bucket %s (births before %v) still there past its drop time", p.Name, boundary.UTC())
		}
	}

	var won, replayed, expired int
	for k := range keys {
		edge := births[k].Add(r - s)
		var winner *boundaryAnswer
		n := 0
		for w := k; w < claimants; w += keys {
			if a := &answers[w]; w%4 != 3 && a.won {
				n++
				winner = a
			}
		}
		if n > 1 {
			e.t.Errorf("key born %v: %d acquisitions; want at most one", births[k], n)
		}
		if got := e.bizRows(names[k]); got != n {
			e.t.Errorf("key born %v: %d business rows for %d acquisitions", births[k], got, n)
		}
		rows := e.rowsOf(ids[k])
		switch {
		case births[k].Before(boundary) && rows != 0:
			e.t.Errorf("key born %v, below the boundary: %d ledger rows after its bucket was dropped", births[k], rows)
		case !births[k].Before(boundary) && rows != n:
			e.t.Errorf("key born %v, above the boundary: %d ledger rows for %d acquisitions (a commit lost)", births[k], rows, n)
		}
		for w := k; w < claimants; w += keys {
			a := answers[w]
			if w%4 == 3 {
				continue
			}
			switch {
			case a.err != nil && !errors.Is(a.err, ledger.ErrKeyExpired):
				e.t.Errorf("key born %v, claimant %d: %v; want the committed result or ErrKeyExpired", births[k], w, a.err)
			case a.err != nil:
				expired++
				if !a.after.After(edge) {
					e.t.Errorf("key born %v, claimant %d: ErrKeyExpired at %v, before its edge %v", births[k], w, a.after, edge)
				}
			case a.before.After(edge):
				e.t.Errorf("key born %v, claimant %d: answered %v at %v, after its edge %v (the key ran, or replayed, past the window)", births[k], w, a.won, a.before, edge)
			case a.won:
				won++
			case winner == nil || !sameResult(a.result, resultFor(names[k], workerOf(winner, answers))):
				e.t.Errorf("key born %v, claimant %d: replayed %q; want the committed result", births[k], w, a.result.Response)
			default:
				replayed++
			}
		}
		e.refusedIn(fmt.Sprintf("key born %v, after the drop", births[k]), ids[k], names[k], ledger.ErrKeyExpired)
		e.lookupIs(fmt.Sprintf("of the key born %v, after the drop", births[k]), ids[k], ledger.ErrKeyExpired)
	}
	var freshWon int
	for w, id := range fresh {
		if id.IsZero() {
			continue
		}
		a := answers[w]
		switch {
		case a.err != nil || !a.won:
			e.t.Errorf("fresh key of claimant %d: won=%v %v; want it acquired and committed", w, a.won, a.err)
		case e.rowsOf(id) != 1:
			e.t.Errorf("fresh key of claimant %d: %d ledger rows after the drop; want its entry (a commit lost)", w, e.rowsOf(id))
		default:
			freshWon++
		}
	}
	if won == 0 || expired == 0 {
		e.t.Errorf("the herd never straddled the edges: %d acquired, %d expired", won, expired)
	}
	e.figure("%s; %d claimants (forms %v) on %d keys born on both sides of the bucket boundary %v and %d fresh keys, while %d sweeps created and dropped partitions: %d acquired, %d replayed, %d ErrKeyExpired, %d fresh keys committed; the bucket below dropped, 0 duplicates",
		e.windowNote(), claimants, forms, keys, boundary.UTC().Format(time.RFC3339), len(fresh)/4, sweeps, won, replayed, expired, freshWon)
}

// workerOf returns the claimant whose answer a is.
func workerOf(a *boundaryAnswer, answers []boundaryAnswer) int {
	for w := range answers {
		if &answers[w] == a {
			return w
		}
	}
	return -1
}
