package chaos

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/opledger/opledger/internal/harness/faultproxy"
	"github.com/opledger/opledger/internal/wait"
)

// replicaSet runs the N replica processes of a chaos run, each behind its
// own client-side fault proxy (whose address stays while the replica
// restarts on new ports), and restarts every replica that dies.
type replicaSet struct {
	exe      string
	args     []string // after the command name: --dsn … --table …
	rng      *rand.Rand
	rngMu    sync.Mutex
	dieLo    int
	dieHi    int
	replicas []*replica
	// onKill, when set, is called (with rs.mu held) for every replica
	// exit the counters count as a kill: by the run (afterCommit false)
	// or by the replica itself after a COMMIT.
	onKill func(replica int, afterCommit bool)

	mu           sync.Mutex
	pendingDies  int // self-kills after commit still to hand out
	stopping     bool
	holdUntil    time.Time // no restart before (a total outage)
	parentKills  int
	commitKills  int
	startErrors  int
	unexpected   []string
	restartGroup sync.WaitGroup
}

type replica struct {
	i     int
	proxy *faultproxy.Proxy

	mu         sync.Mutex
	cmd        *exec.Cmd
	stdin      io.WriteCloser
	running    bool
	killedByUs bool
	dieAfter   int
	stderr     *tailBuffer
	exited     chan struct{}
}

// newReplicaSet creates the client-side proxies; start starts the
// processes.
func newReplicaSet(exe string, args []string, n int, seed uint64, commitKills, dieLo, dieHi int) (*replicaSet, error) {
	rs := &replicaSet{exe: exe, args: args, rng: rand.New(rand.NewPCG(seed, 0xc4a05)), dieLo: dieLo, dieHi: max(dieHi, dieLo+1),
		pendingDies: commitKills}
	for i := range n {
		p, err := faultproxy.New("127.0.0.1:1") // the replica's address comes when it starts
		if err != nil {
			rs.close()
			return nil, err
		}
		rs.replicas = append(rs.replicas, &replica{i: i, proxy: p, stderr: &tailBuffer{max: 4 << 10}})
	}
	return rs, nil
}

// addrs returns the client-side proxies' addresses, one per replica.
func (rs *replicaSet) addrs() []string {
	out := make([]string, len(rs.replicas))
	for i, r := range rs.replicas {
		out[i] = r.proxy.Addr()
	}
	return out
}

func (rs *replicaSet) intn(n int) int {
	rs.rngMu.Lock()
	defer rs.rngMu.Unlock()
	return rs.rng.IntN(n)
}

// start starts every replica and returns once each accepts calls.
func (rs *replicaSet) start(ctx context.Context) error {
	for _, r := range rs.replicas {
		if err := rs.startOne(ctx, r); err != nil {
			return err
		}
	}
	return nil
}

// startOne starts r's process (handing it a pending self-kill), waits for
// its address and points r's proxy at it.
func (rs *replicaSet) startOne(ctx context.Context, r *replica) error {
	rs.mu.Lock()
	die := 0
	if rs.pendingDies > 0 {
		rs.pendingDies--
		die = rs.dieLo + rs.intn(rs.dieHi-rs.dieLo)
	}
	rs.mu.Unlock()
	args := append([]string{ReplicaCommand}, rs.args...)
	args = append(args, "--die-after", fmt.Sprint(die))
	cmd := exec.Command(rs.exe, args...)
	cmd.Env = append(os.Environ(), ReplicaEnv+"=1")
	cmd.Stderr = r.stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return err
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return err
	}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start replica %d: %w", r.i, err)
	}
	exited := make(chan struct{})
	addr := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			if a, ok := strings.CutPrefix(sc.Text(), "listening "); ok {
				addr <- a
			}
		}
	}()
	r.mu.Lock()
	r.cmd, r.stdin, r.running, r.killedByUs, r.dieAfter, r.exited = cmd, stdin, true, false, die, exited
	r.mu.Unlock()
	go func() {
		err := cmd.Wait()
		r.mu.Lock()
		r.running = false
		r.mu.Unlock()
		close(exited)
		rs.exitedOne(ctx, r, cmd, err)
	}()
	wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	select {
	case a := <-addr:
		return r.proxy.SetTarget(a)
	case <-exited:
		return fmt.Errorf("replica %d exited before it listened: %s", r.i, r.stderr.String())
	case <-wctx.Done():
		_ = cmd.Process.Kill()
		return fmt.Errorf("replica %d did not listen within 30s: %s", r.i, r.stderr.String())
	}
}

// exitedOne counts why r's process ended and starts it again, unless the
// run is stopping.
func (rs *replicaSet) exitedOne(ctx context.Context, r *replica, cmd *exec.Cmd, err error) {
	r.mu.Lock()
	byUs, die := r.killedByUs, r.dieAfter
	r.mu.Unlock()
	rs.mu.Lock()
	defer rs.mu.Unlock()
	if rs.stopping {
		return
	}
	var ee *exec.ExitError
	killed := errors.As(err, &ee) && ee.Sys().(syscall.WaitStatus).Signaled() && ee.Sys().(syscall.WaitStatus).Signal() == syscall.SIGKILL
	switch {
	case byUs:
		rs.parentKills++
		if die > 0 {
			rs.pendingDies++ // its self-kill did not come: the next start gets it
		}
		if rs.onKill != nil {
			rs.onKill(r.i, false)
		}
	case killed && die > 0:
		rs.commitKills++
		if rs.onKill != nil {
			rs.onKill(r.i, true)
		}
	default:
		// Not ours: a replica that failed to start (the database was
		// down: it pings first) or crashed.
		rs.startErrors++
		if len(rs.unexpected) < 5 {
			rs.unexpected = append(rs.unexpected, fmt.Sprintf("replica %d: %v: %s", r.i, err, lastLine(r.stderr.String())))
		}
		if die > 0 {
			rs.pendingDies++
		}
	}
	delay := time.Duration(100+rs.intn(400)) * time.Millisecond
	if d := time.Until(rs.holdUntil); d > delay {
		delay = d
	}
	rs.restartGroup.Add(1)
	go func() {
		defer rs.restartGroup.Done()
		if wait.Sleep(ctx, delay) != nil {
			return
		}
		rs.mu.Lock()
		stop := rs.stopping
		rs.mu.Unlock()
		if stop {
			return
		}
		// A start that fails because the process exited is counted, and
		// restarted, by its own exit; one that did not listen in time was
		// killed, and comes back the same way.
		_ = rs.startOne(ctx, r)
	}()
}

// kill SIGKILLs replica i (or the next running one); false when none
// runs.
func (rs *replicaSet) kill(i int) bool {
	for k := range rs.replicas {
		r := rs.replicas[(i+k)%len(rs.replicas)]
		r.mu.Lock()
		if r.running && !r.killedByUs {
			r.killedByUs = true
			_ = r.cmd.Process.Kill()
			r.mu.Unlock()
			return true
		}
		r.mu.Unlock()
	}
	return false
}

// killAll SIGKILLs every running replica and holds their restarts for d:
// a total outage of the service.
func (rs *replicaSet) killAll(d time.Duration) int {
	rs.mu.Lock()
	rs.holdUntil = time.Now().Add(d)
	rs.mu.Unlock()
	n := 0
	for i := range rs.replicas {
		r := rs.replicas[i]
		r.mu.Lock()
		if r.running && !r.killedByUs {
			r.killedByUs = true
			_ = r.cmd.Process.Kill()
			n++
		}
		r.mu.Unlock()
	}
	return n
}

// ensureRunning waits until every replica runs again (restarts start
// them); it starts those still down when the restarts gave up.
func (rs *replicaSet) ensureRunning(ctx context.Context) error {
	for _, r := range rs.replicas {
		for {
			r.mu.Lock()
			up := r.running && !r.killedByUs
			r.mu.Unlock()
			if up {
				break
			}
			if err := wait.Sleep(ctx, 20*time.Millisecond); err != nil {
				return fmt.Errorf("replica %d did not come back: %w", r.i, err)
			}
		}
	}
	return nil
}

// counts returns the kills counted so far.
func (rs *replicaSet) counts() (parent, afterCommit, startErrors int, unexpected []string) {
	rs.mu.Lock()
	defer rs.mu.Unlock()
	return rs.parentKills, rs.commitKills, rs.startErrors, append([]string(nil), rs.unexpected...)
}

// close stops restarting, kills every replica and closes the proxies.
func (rs *replicaSet) close() {
	rs.mu.Lock()
	rs.stopping = true
	rs.mu.Unlock()
	rs.restartGroup.Wait()
	for _, r := range rs.replicas {
		r.mu.Lock()
		cmd, stdin, exited := r.cmd, r.stdin, r.exited
		r.mu.Unlock()
		if cmd != nil {
			stdin.Close()
			_ = cmd.Process.Kill()
			<-exited
		}
		r.proxy.Close()
	}
}

// tailBuffer keeps the last max bytes written to it.
type tailBuffer struct {
	mu  sync.Mutex
	max int
	b   []byte
}

func (t *tailBuffer) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.b = append(t.b, p...)
	if len(t.b) > t.max {
		t.b = append([]byte(nil), t.b[len(t.b)-t.max:]...)
	}
	return len(p), nil
}

func (t *tailBuffer) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return string(t.b)
}

func lastLine(s string) string {
	s = strings.TrimSpace(s)
	if i := strings.LastIndexByte(s, '\n'); i >= 0 {
		return s[i+1:]
	}
	return s
}
