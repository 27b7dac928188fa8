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

// boundaryAnswer is one attempt of caseWindowPartitionDrop.
type boundaryAnswer struct {
	won           bool
	result        ledger.Result
	err           error
	before, after time.Time
}

// dropRun is one run of caseWindowPartitionDrop: the keys on both sides
// of the boundary, the fresh keys, and every claimant's answer.
type dropRun struct {
	e        *env
	sw       func(ctx context.Context, batch int) (int64, error)
	r, s     time.Duration
	here     dialectkit.Partition // the bucket below the boundary
	boundary time.Time
	ids      []ledger.Identity
	births   []time.Time
	names    []string
	forms    []string
	answers  []boundaryAnswer
	fresh    []ledger.Identity
	sweeps   int
}

const dropKeys, dropGap = 8, 2 * time.Millisecond

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
	d := &dropRun{e: e, sw: sw, forms: e.forms()}
	d.r, d.s, _ = e.window()
	d.setUp(parts)
	d.herd()
	won, replayed, expired := d.checkKeys()
	freshWon := d.checkFresh()
	if won == 0 || expired == 0 {
		e.t.Errorf("the herd never straddled the edges: %d acquired, %d expired", won, expired)
	}
	e.figure("%s; %d claimants (forms %v) on %d keys born on both sides of the bucket boundary %v and %d fresh keys, while %d sweeps created and dropped partitions: %d acquired, %d replayed, %d ErrKeyExpired, %d fresh keys committed; the bucket below dropped, 0 duplicates",
		e.windowNote(), len(d.answers), d.forms, dropKeys, d.boundary.UTC().Format(time.RFC3339), len(d.fresh)/4, d.sweeps, won, replayed, expired, freshWon)
}

// setUp finds the bucket of now and its end, the boundary, and makes
// keys born on both sides of it.
func (d *dropRun) setUp(parts []dialectkit.Partition) {
	e := d.e
	here, ok := dialectkit.BucketOf(parts, e.clock.Now())
	if !ok {
		if _, err := d.sw(e.ctx, 100); err != nil && !errors.Is(err, ledger.ErrInProgress) {
			e.t.Fatalf("Sweep: %v", err)
		}
		if here, ok = dialectkit.BucketOf(e.partitions(), e.clock.Now()); !ok {
			e.t.Fatalf("no bucket holds the births of now, even after a Sweep (which creates them ahead)")
		}
	}
	d.here, d.boundary = here, time.UnixMicro(here.To)
	for k := range dropKeys {
		birth := d.boundary.Add(time.Duration(k-dropKeys/2)*dropGap + dropGap/2) // half below the boundary, half above
		id := e.bornID(birth)
		birth, _ = id.Birth()
		d.ids, d.births = append(d.ids, id), append(d.births, birth)
		d.names = append(d.names, fmt.Sprintf("partition-drop-%d", k))
	}
}

// herd runs the claimants in two waves while a sweeper loops, the clock
// sweeping from before the keys' window edges (birth + retention - skew)
// to past the lower bucket's drop time (boundary + retention + skew),
// then sweeps once more past it and checks the bucket is gone.
func (d *dropRun) herd() {
	e := d.e
	// The clock is real time plus an offset: the first wave starts well
	// before every key's edge (birth + retention - skew), so that however
	// slow its claims are (a pooler, a loaded machine) they all meet the
	// keys inside the window.
	const lead = 30 * time.Second
	e.clock.Advance(d.boundary.Add(d.r - d.s - lead).Sub(e.clock.Now()))
	claimants := e.conc
	// The second wave's steps move the clock towards the drop time, which
	// the final move passes; the first wave moves it only at its end,
	// past every edge.
	step := max(80*time.Millisecond, 2*d.s+80*time.Millisecond) / time.Duration(claimants)
	d.answers, d.fresh = make([]boundaryAnswer, claimants), make([]ledger.Identity, claimants)
	var (
		wg, first   sync.WaitGroup
		start, stop = make(chan struct{}), make(chan struct{})
		second      = make(chan struct{})
		swept       = make(chan error, 1)
	)
	// Two waves: the second starts once the first has ended and the clock
	// has moved past every key's edge, so that both the claims inside the
	// window and the refusals past it are met on every run.
	first.Add(claimants / 2)
	go func() {
		first.Wait()
		if past := d.boundary.Add(d.r - d.s + 40*time.Millisecond).Sub(e.clock.Now()); past > 0 {
			e.clock.Advance(past) // past every key's edge (the latest is 7 ms after the boundary's)
		}
		close(second)
	}()
	go d.sweepLoop(stop, swept)
	for w := range claimants {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			if w >= claimants/2 {
				<-second
			}
			d.attempt(w)
			if w < claimants/2 {
				first.Done()
				return
			}
			e.clock.Advance(step)
		}()
	}
	close(start)
	wg.Wait()
	d.afterHerd(stop, swept)
}

// afterHerd moves the clock past the drop time, sweeps once more, stops
// the sweep loop and checks that the boundary's bucket is gone.
func (d *dropRun) afterHerd(stop chan<- struct{}, swept <-chan error) {
	e := d.e
	e.clock.Advance(d.boundary.Add(d.r + d.s + time.Second).Sub(e.clock.Now())) // past the drop time, whatever the herd reached
	if _, err := d.sw(e.ctx, 100); err != nil && !errors.Is(err, ledger.ErrInProgress) {
		e.t.Errorf("Sweep after the herd: %v", err)
	}
	close(stop)
	if err := <-swept; err != nil {
		e.t.Errorf("Sweep during the herd: %v", err)
	}
	for _, p := range e.partitions() {
		if p.Kind == dialectkit.Bucket && p.To == d.here.To {
			e.t.Errorf("bucket %s (births before %v) still there past its drop time", p.Name, d.boundary.UTC())
		}
	}
}

// sweepLoop sweeps until stop, counting the sweeps; it sends the error
// that ended it (nil at stop).
func (d *dropRun) sweepLoop(stop <-chan struct{}, swept chan<- error) {
	for {
		select {
		case <-stop:
			swept <- nil
			return
		default:
		}
		if _, err := d.sw(d.e.ctx, 100); err != nil && !errors.Is(err, ledger.ErrInProgress) && !errors.Is(err, ledger.ErrRetryable) {
			swept <- err
			return
		}
		d.sweeps++
	}
}

// attempt is claimant w's unit: on a key by the boundary, or (one in
// four) on a fresh key born now, in the bucket above, so that claims
// commit there while the one below is dropped.
func (d *dropRun) attempt(w int) {
	e := d.e
	k := w % dropKeys
	id, key := d.ids[k], d.names[k]
	if w%4 == 3 {
		id, key = e.bornID(e.clock.Now()), fmt.Sprintf("partition-drop-fresh-%d", w)
		d.fresh[w] = id
	}
	a := &d.answers[w]
	a.before = e.clock.Now()
	c, won, err := e.unitIn(d.forms[w%len(d.forms)], ledger.ClaimRequest{Identity: id, Fingerprint: fpOf(key)}, key, w, resultFor(key, w))
	a.after = e.clock.Now()
	a.won, a.err = won, err
	if c != nil && c.Outcome == ledger.Replay {
		a.result = c.Result
	}
}

// checkKeys checks the keys by the boundary: at most one effect each,
// every answer true, the entry there unless its bucket was dropped, and
// afterwards refused by every form and by Lookup.
func (d *dropRun) checkKeys() (won, replayed, expired int) {
	e := d.e
	for k := range dropKeys {
		winner, n := d.winner(k)
		if n > 1 {
			e.t.Errorf("key born %v: %d acquisitions; want at most one", d.births[k], n)
		}
		if got := e.bizRows(d.names[k]); got != n {
			e.t.Errorf("key born %v: %d business rows for %d acquisitions", d.births[k], got, n)
		}
		rows := e.rowsOf(d.ids[k])
		switch below := d.births[k].Before(d.boundary); {
		case below && rows != 0:
			e.t.Errorf("key born %v, below the boundary: %d ledger rows after its bucket was dropped", d.births[k], rows)
		case !below && rows != n:
			e.t.Errorf("key born %v, above the boundary: %d ledger rows for %d acquisitions (a commit lost)", d.births[k], rows, n)
		}
		w, r, x := d.checkAnswers(k, winner)
		won, replayed, expired = won+w, replayed+r, expired+x
		e.refusedIn(fmt.Sprintf("key born %v, after the drop", d.births[k]), d.ids[k], d.names[k], ledger.ErrKeyExpired)
		e.lookupIs(fmt.Sprintf("of the key born %v, after the drop", d.births[k]), d.ids[k], ledger.ErrKeyExpired)
	}
	return won, replayed, expired
}

// winner returns the claimant that acquired key k (-1: none) and how
// many did.
func (d *dropRun) winner(k int) (winner, n int) {
	winner = -1
	for w := k; w < len(d.answers); w += dropKeys {
		if w%4 != 3 && d.answers[w].won {
			n++
			winner = w
		}
	}
	return winner, n
}

// checkAnswers checks every answer for key k: an acquisition or a replay
// of the winner's result before the key's edge, ErrKeyExpired after it.
func (d *dropRun) checkAnswers(k, winner int) (won, replayed, expired int) {
	e := d.e
	edge := d.births[k].Add(d.r - d.s)
	for w := k; w < len(d.answers); w += dropKeys {
		a := d.answers[w]
		if w%4 == 3 {
			continue
		}
		switch {
		case a.err != nil && !errors.Is(a.err, ledger.ErrKeyExpired):
			e.t.Errorf("key born %v, claimant %d: %v; want the committed result or ErrKeyExpired", d.births[k], w, a.err)
		case a.err != nil:
			expired++
			if !a.after.After(edge) {
				e.t.Errorf("key born %v, claimant %d: ErrKeyExpired at %v, before its edge %v", d.births[k], w, a.after, edge)
			}
		case a.before.After(edge):
			e.t.Errorf("key born %v, claimant %d: answered %v at %v, after its edge %v (the key ran, or replayed, past the window)", d.births[k], w, a.won, a.before, edge)
		case a.won:
			won++
		case winner < 0 || !sameResult(a.result, resultFor(d.names[k], winner)):
			e.t.Errorf("key born %v, claimant %d: replayed %q; want the committed result", d.births[k], w, a.result.Response)
		default:
			replayed++
		}
	}
	return won, replayed, expired
}

// checkFresh checks that every fresh key was acquired and its entry kept.
func (d *dropRun) checkFresh() (committed int) {
	e := d.e
	for w, id := range d.fresh {
		if id.IsZero() {
			continue
		}
		a := d.answers[w]
		switch {
		case a.err != nil || !a.won:
			e.t.Errorf("fresh key of claimant %d: won=%v %v; want it acquired and committed", w, a.won, a.err)
		case e.rowsOf(id) != 1:
			e.t.Errorf("fresh key of claimant %d: %d ledger rows after the drop; want its entry (a commit lost)", w, e.rowsOf(id))
		default:
			committed++
		}
	}
	return committed
}
