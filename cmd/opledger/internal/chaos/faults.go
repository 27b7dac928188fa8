package chaos

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/opledger/opledger/cmd/opledger/internal/timeline"
	"github.com/opledger/opledger/internal/harness/faultproxy"
	"github.com/opledger/opledger/internal/wait"
)

// callUnderFaults makes the logical calls with the faults on: the
// proxies' schedules, and the kills, the database restarts (an outage of
// every replica without a server to restart) and the failovers at seeded
// points of the run's progress.
func (r *run) callUnderFaults(ctx context.Context) error {
	fctx, stopFaults := context.WithCancel(ctx)
	defer stopFaults()
	proxiesDone := r.runProxyFaults(fctx)
	events := r.schedule()
	r.calls = make([]call, r.s.Calls)
	r.t0 = time.Now()
	r.deadline = r.t0.Add(r.s.Duration)
	r.rep.OutageKind = "database restart"
	if note := r.db.restartNote(); note != "" {
		r.rep.OutageKind = "every replica killed for 1s"
		r.rep.DBRestartNote = note
	}
	eventsDone := r.goEvents(ctx, fctx, events)
	failoversDone := r.goFailovers(ctx, fctx)
	r.makeCalls(ctx)
	<-eventsDone
	<-failoversDone
	r.outages.Wait()
	stopFaults()
	proxiesDone()
	if r.faultErr != nil {
		return fmt.Errorf("restart the database: %w", r.faultErr)
	}
	fmt.Fprintf(r.progress, "opledger chaos: %s: %d calls made in %.1fs; resolving and checking\n", r.db.label(), r.done.Load(), time.Since(r.start).Seconds())
	return nil
}

// runProxyFaults runs the proxies' fault schedules until fctx ends:
// cuts, latency and blackholes between the client and each replica, and
// between the replicas and each database server. wait waits for them to
// stop.
func (r *run) runProxyFaults(fctx context.Context) (wait func()) {
	var wg sync.WaitGroup
	for i, rp := range r.rs.replicas {
		wg.Go(func() {
			_ = rp.proxy.Run(fctx, faultproxy.Schedule{Seed: r.s.Seed*131 + uint64(i), Every: proxyEvery, Cut: 2, Latency: 1, Blackhole: 1, FirstCut: true,
				LatencyBy: 10 * time.Millisecond, LatencyFor: 300 * time.Millisecond, BlackholeFor: 150 * time.Millisecond,
				Observe: r.marks.observeProxy(rp.proxy, fmt.Sprintf("client → replica %d", i), 300*time.Millisecond, 150*time.Millisecond)})
		})
	}
	for i, p := range r.dbProxies {
		where := "replicas → database"
		if len(r.dbProxies) > 1 {
			where = fmt.Sprintf("replicas → database node %d", i)
		}
		wg.Go(func() {
			_ = p.Run(fctx, faultproxy.Schedule{Seed: r.s.Seed*131 + 97 + uint64(i), Every: proxyEvery * 3 / 2, Cut: 3, Latency: 1, Blackhole: 1, FirstCut: true,
				LatencyBy: 5 * time.Millisecond, LatencyFor: 300 * time.Millisecond, BlackholeFor: 200 * time.Millisecond,
				Observe: r.marks.observeProxy(p, where, 300*time.Millisecond, 200*time.Millisecond)})
		})
	}
	return wg.Wait
}

// event is a kill of a replica, or a restart of the database, due once
// the share at of the calls is answered.
type event struct {
	at      float64
	restart bool
}

// schedule draws the kills and the restarts from the run's seed, in the
// order they come: the kills anywhere from 10% to 85% of the calls, the
// restarts over the middle of the run, one per slice.
func (r *run) schedule() []event {
	rng := rand.New(rand.NewPCG(r.s.Seed, 0x5eed))
	var events []event
	for range r.s.Kills {
		events = append(events, event{at: 0.1 + 0.75*rng.Float64()})
	}
	for k := range r.s.DBRestarts {
		lo := 0.3 + 0.4*float64(k)/float64(r.s.DBRestarts)
		events = append(events, event{at: lo + 0.4/float64(r.s.DBRestarts)*rng.Float64(), restart: true})
	}
	sort.Slice(events, func(i, j int) bool { return events[i].at < events[j].at })
	return events
}

// reached waits until the share at of the calls is answered; false when
// the calls are over first (all answered, or the deadline passed) or
// fctx ends.
func (r *run) reached(fctx context.Context, at float64) bool {
	for float64(r.done.Load()) < at*float64(r.s.Calls) {
		if time.Now().After(r.deadline) || r.next.Load() >= int64(r.s.Calls) && r.done.Load() >= int64(r.s.Calls) {
			return false
		}
		if wait.Sleep(fctx, 5*time.Millisecond) != nil {
			return false
		}
	}
	return true
}

// goEvents makes the kills and the restarts of events, each when it is
// due, in a goroutine of its own; the channel closes when it is over.
// The restarts alternate: the first a crash, the next a clean restart,
// and so on.
func (r *run) goEvents(ctx, fctx context.Context, events []event) <-chan struct{} {
	over := make(chan struct{})
	go func() {
		defer close(over)
		restarts := 0
		for _, ev := range events {
			if !r.reached(fctx, ev.at) {
				return
			}
			switch {
			case !ev.restart:
				r.rs.kill(r.rs.intn(r.s.Replicas))
			case r.db.restartNote() == "":
				crash := restarts%2 == 0
				restarts++
				r.outages.Add(1)
				go r.outage(ctx, &r.restartsDone, func() error { return r.restartDB(ctx, crash) })
			default:
				r.outages.Add(1)
				go r.outage(ctx, &r.restartsDone, func() error { return r.killEveryReplica(ctx) })
			}
		}
	}()
	return over
}

// outage runs do, a fault that takes the service down, counts it in
// count when it succeeds, and counts the calls and attempts of its
// window: from its start until a second after the database (or the
// replicas) came back, time for the pools to reconnect. Calls in flight
// at its start count once in both terms: their first attempt was made
// just before. The caller has added it to r.outages.
func (r *run) outage(ctx context.Context, count *atomic.Int64, do func() error) {
	defer r.outages.Done()
	a0, _, _ := r.client.stats()
	s0, inflight := r.started.Load(), r.started.Load()-r.done.Load()
	err := do()
	if err == nil {
		err = wait.Sleep(ctx, time.Second)
	}
	a1, _, _ := r.client.stats()
	s1 := r.started.Load()
	r.outageAttempts.Add(a1 - a0 + inflight)
	r.outageCalls.Add(s1 - s0 + inflight)
	if err != nil {
		r.faultFailed(err)
		return
	}
	count.Add(1)
}

// faultFailed notes a fault the run could not inject or undo: the run
// fails with it.
func (r *run) faultFailed(err error) {
	r.faultMu.Lock()
	defer r.faultMu.Unlock()
	r.faultErr = errors.Join(r.faultErr, err)
}

// restartDB restarts the database server: with SIGKILL (crash recovery
// runs at the start) or cleanly.
func (r *run) restartDB(ctx context.Context, crash bool) error {
	rctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	at := time.Now()
	err := r.db.restart(rctx, crash)
	if crash {
		r.marks.add(timeline.FaultDBCrash, at, time.Now(), 0, "database server SIGKILLed, then started: crash recovery")
	} else {
		r.marks.add(timeline.FaultDBRestart, at, time.Now(), 0, "database server stopped cleanly, then started")
	}
	return err
}

// killEveryReplica is the outage of a database the run may not restart:
// every replica SIGKILLed, none back for a second.
func (r *run) killEveryReplica(ctx context.Context) error {
	at := time.Now()
	n := r.rs.killAll(time.Second)
	err := wait.Sleep(ctx, time.Second)
	r.marks.add(timeline.FaultOutage, at, time.Now(), n, fmt.Sprintf("every replica (%d running) SIGKILLed, none back for 1s", n))
	return err
}

// goFailovers makes the failovers of a failover run in a goroutine of
// its own, one after the other: each once its share of the calls is
// answered and the previous one's old primary has rejoined. The channel
// closes when it is over.
func (r *run) goFailovers(ctx, fctx context.Context) <-chan struct{} {
	over := make(chan struct{})
	go func() {
		defer close(over)
		if r.fo == nil {
			return
		}
		for k := range r.s.Failovers {
			at := 0.1 + 0.7*(float64(k)+0.5)/float64(r.s.Failovers)
			if !r.reached(fctx, at) {
				return
			}
			if r.done.Load() >= int64(r.s.Calls) || time.Now().After(r.deadline) {
				return // the calls are over (the previous rejoin took longer): nothing would see it
			}
			if !r.failOver(ctx) {
				return
			}
		}
	}()
	return over
}

// failOver kills the primary and promotes the standby (an outage), then
// rejoins the old primary as the new standby, recording the times; false
// when either failed.
func (r *run) failOver(ctx context.Context) bool {
	var ft failoverTimes
	promoted := false
	r.outages.Add(1)
	r.outage(ctx, &r.failoversDone, func() error {
		rctx, cancel := context.WithTimeout(ctx, time.Minute)
		defer cancel()
		var err error
		ft.killAt, ft.killed, ft.promoted, err = r.fo.failover(rctx)
		if promoted = err == nil; promoted {
			r.marks.add(timeline.FaultFailover, ft.killAt, ft.promoted, 0,
				fmt.Sprintf("primary SIGKILLed; standby promoted after %.0fms", ms(ft.promoted.Sub(ft.killAt))))
		}
		return err
	})
	if !promoted {
		return false
	}
	rctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	r0 := time.Now()
	err := r.fo.rejoin(rctx)
	cancel()
	ft.rejoinAt, ft.rejoined = r0, time.Now()
	r.fos = append(r.fos, ft)
	if err != nil {
		r.faultFailed(fmt.Errorf("rejoin the old primary: %w", err))
		return false
	}
	r.marks.add(timeline.FaultRejoin, r0, ft.rejoined, 0, fmt.Sprintf("old primary rewound and streaming as the standby after %.0fms", ms(ft.rejoined.Sub(r0))))
	return true
}

// makeCalls makes the logical calls, Concurrency at a time, until all
// are made, the deadline passes or ctx ends.
func (r *run) makeCalls(ctx context.Context) {
	var workers sync.WaitGroup
	for range r.s.Concurrency {
		workers.Go(func() {
			for {
				i := int(r.next.Add(1) - 1)
				if i >= r.s.Calls || time.Now().After(r.deadline) || ctx.Err() != nil {
					return
				}
				r.started.Add(1)
				r.calls[i] = makeCall(ctx, r.client, i, r.caller, r.s.CallTimeout)
				r.done.Add(1)
			}
		})
	}
	workers.Wait()
}
