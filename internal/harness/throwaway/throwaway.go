// Package throwaway starts database servers of its own for tests and for
// `opledger chaos`: a PostgreSQL cluster (initdb + postgres), a MariaDB
// instance (mariadb-install-db + mariadbd) and a PgBouncer in transaction
// pooling mode in front of a throw-away PostgreSQL. Each has its own port,
// data directory, unix socket and log under a temporary directory, so that
// it can be stopped, restarted, crashed (SIGKILL) and removed without
// touching the machine's shared services.
//
// Every wait is bounded by the caller's context and watches the server's
// own readiness (a connection and a ping), never a fixed sleep. When the
// binaries are not installed the Start functions return an error that
// matches ErrNotInstalled. Running as root, the servers run as the
// "postgres" (PostgreSQL, PgBouncer) and "mysql" (MariaDB) system users,
// because initdb, postgres and pgbouncer refuse root.
//
// A server dies with the process that started it (Linux's parent-death
// signal), so a test binary killed by its timeout leaves no server running
// (its directory stays in the temporary folder). The signal belongs to the
// OS thread that started the server: Go ends a thread only when a
// goroutine locked to it (runtime.LockOSThread) exits, so do not start
// servers from such a goroutine.
package throwaway

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	mrand "math/rand/v2"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// ErrNotInstalled is matched (errors.Is) by the error of a Start function
// whose server binaries are not installed.
var ErrNotInstalled = errors.New("throwaway: server binaries not installed")

// ErrStopped is returned by Crash, Stop and Kill of a server that is not
// running, and by every method after Cleanup.
var ErrStopped = errors.New("throwaway: server not running")

// Kinds of server.
const (
	KindPostgres  = "postgres"
	KindMariaDB   = "mariadb"
	KindPgBouncer = "pgbouncer"
)

// Server is one throw-away database server process. Its methods are safe
// for concurrent use; Stop, Start, Restart, Kill and Crash are serialised.
type Server struct {
	kind string
	dir  string
	port int
	dsn  string
	log  string

	// command builds the server's command line (a new one per start).
	command func() *exec.Cmd
	// ping checks readiness with one connection attempt.
	ping func(ctx context.Context) error
	// stopSignal asks the server for a clean, fast shutdown.
	stopSignal syscall.Signal

	mu      sync.Mutex
	cmd     *exec.Cmd
	exited  chan struct{}
	removed bool
	starts  int
	// ends counts the ends asked for (Stop, Kill and the methods built
	// on them): an exit with no new one is the server's own (a crash).
	ends int
	// superviseCtx is set by Supervise: while it lasts, an exit of the
	// server's own is recorded in crashes and the server started again.
	superviseCtx context.Context
	crashes      []Crash
}

// Kind returns KindPostgres, KindMariaDB or KindPgBouncer.
func (s *Server) Kind() string { return s.kind }

// DSN returns the data source name for the server's test database: a URL
// postgres://postgres@127.0.0.1:PORT/postgres?sslmode=disable for
// PostgreSQL and PgBouncer (lib/pq and pgx both read it; add the driver
// settings a pooler needs yourself), and the go-sql-driver form
// root@tcp(127.0.0.1:PORT)/test for MariaDB. The DSN stays the same across
// restarts.
func (s *Server) DSN() string { return s.dsn }

// DSN settings a PostgreSQL driver needs behind PgBouncer in transaction
// mode (docs/poolers.md), in the form DriverDSN appends them.
const (
	PgxPoolerSetting = "&default_query_exec_mode=exec" // pgx: no statement cache
	PQPoolerSetting  = "&binary_parameters=yes"        // lib/pq: Parse, Bind and Execute in one round trip
)

// DriverDSN returns DSN() for driver ("pgx", "postgres" for lib/pq,
// "mysql"): for a PgBouncer, with the setting the driver needs
// (PgxPoolerSetting, PQPoolerSetting); otherwise DSN() itself.
func (s *Server) DriverDSN(driver string) string {
	if s.kind == KindPgBouncer {
		switch driver {
		case "pgx":
			return s.dsn + PgxPoolerSetting
		case "postgres":
			return s.dsn + PQPoolerSetting
		}
	}
	return s.dsn
}

// Addr returns the server's TCP address, 127.0.0.1:PORT.
func (s *Server) Addr() string { return net.JoinHostPort("127.0.0.1", strconv.Itoa(s.port)) }

// Port returns the server's TCP port.
func (s *Server) Port() int { return s.port }

// Dir returns the temporary directory holding the server's data, socket
// and log; Cleanup removes it.
func (s *Server) Dir() string { return s.dir }

// LogPath returns the path of the server's log file.
func (s *Server) LogPath() string { return s.log }

// Starts returns how many times the server was started (1 after the Start
// function, one more per Start, Restart and Crash).
func (s *Server) Starts() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.starts
}

// PID returns the process id of the server's main process (the
// postmaster, mariadbd, pgbouncer), 0 when it is not running.
func (s *Server) PID() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.runningLocked() {
		return 0
	}
	return s.cmd.Process.Pid
}

// Running reports whether the server process is running.
func (s *Server) Running() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.runningLocked()
}

func (s *Server) runningLocked() bool {
	if s.cmd == nil {
		return false
	}
	select {
	case <-s.exited:
		return false
	default:
		return true
	}
}

// Start starts the stopped (or crashed) server and waits until it accepts
// connections or ctx ends. Starting a running server does nothing.
func (s *Server) Start(ctx context.Context) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.startLocked(ctx)
}

func (s *Server) startLocked(ctx context.Context) error {
	if s.removed {
		return ErrStopped
	}
	if s.runningLocked() {
		return nil
	}
	logf, err := os.OpenFile(s.log, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return fmt.Errorf("throwaway: %s log: %w", s.kind, err)
	}
	cmd := s.command()
	cmd.Stdout, cmd.Stderr = logf, logf
	if cmd.SysProcAttr == nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{}
	}
	// Its own process group, so that a ^C of ours does not reach it, and
	// killed with this process (a test binary that times out leaves no
	// server behind; PostgreSQL's backends end with their postmaster).
	cmd.SysProcAttr.Setpgid = true
	cmd.SysProcAttr.Pdeathsig = syscall.SIGKILL
	if err := cmd.Start(); err != nil {
		logf.Close()
		return fmt.Errorf("throwaway: start %s: %w", s.kind, err)
	}
	exited := make(chan struct{})
	ends, logFrom := s.ends, fileSize(s.log)
	go func() {
		_ = cmd.Wait()
		logf.Close()
		close(exited)
		s.afterExit(cmd, ends, logFrom)
	}()
	s.cmd, s.exited = cmd, exited
	s.starts++
	if err := s.waitReady(ctx); err != nil {
		s.killLocked(context.Background())
		return err
	}
	return nil
}

// waitReady pings until the server answers, its process exits or ctx ends.
func (s *Server) waitReady(ctx context.Context) error {
	var last error
	for {
		select {
		case <-s.exited:
			return fmt.Errorf("throwaway: %s exited while starting: %s", s.kind, s.logTail())
		default:
		}
		pctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		last = s.ping(pctx)
		cancel()
		if last == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("throwaway: %s not ready (last ping: %v): %w", s.kind, last, ctx.Err())
		case <-s.exited:
		case <-time.After(25 * time.Millisecond): // the poll's pace, not a wait for an event
		}
	}
}

// Stop shuts the server down cleanly (PostgreSQL's fast shutdown, mariadbd's
// SIGTERM, PgBouncer's immediate shutdown) and waits for its process to
// exit. If ctx ends first the server is killed and ctx's error returned.
func (s *Server) Stop(ctx context.Context) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.stopLocked(ctx)
}

func (s *Server) stopLocked(ctx context.Context) error {
	s.ends++
	if !s.runningLocked() {
		return ErrStopped
	}
	_ = s.cmd.Process.Signal(s.stopSignal)
	select {
	case <-s.exited:
		return nil
	case <-ctx.Done():
		s.killLocked(context.Background())
		return fmt.Errorf("throwaway: %s did not stop: %w", s.kind, ctx.Err())
	}
}

// Restart stops the server cleanly and starts it again.
func (s *Server) Restart(ctx context.Context) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.stopLocked(ctx); err != nil && !errors.Is(err, ErrStopped) {
		return err
	}
	return s.startLocked(ctx)
}

// Kill stops the server's main process (SIGSTOP: it forks nothing more),
// sends SIGKILL to it and to every process below it (PostgreSQL's
// backends: like a crash of its machine or container, nothing is flushed
// or shut down) and waits until they are gone. The server stays down
// until Start.
func (s *Server) Kill(ctx context.Context) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.runningLocked() {
		return ErrStopped
	}
	return s.killLocked(ctx)
}

func (s *Server) killLocked(ctx context.Context) error {
	s.ends++
	if s.cmd == nil {
		return nil
	}
	pid := s.cmd.Process.Pid
	// Stopped, the server forks no new process while its tree is read.
	// PostgreSQL's backends each lead a process group of their own
	// (setsid), so the group alone does not reach them.
	_ = syscall.Kill(pid, syscall.SIGSTOP)
	waitStopped(ctx, pid)
	tree := descendants(pid)
	_ = syscall.Kill(-pid, syscall.SIGKILL)
	_ = s.cmd.Process.Kill()
	for _, p := range tree {
		_ = syscall.Kill(p, syscall.SIGKILL)
	}
	select {
	case <-s.exited:
	case <-ctx.Done():
		return fmt.Errorf("throwaway: %s did not exit after SIGKILL: %w", s.kind, ctx.Err())
	}
	s.waitGone(ctx, tree)
	if s.kind == KindPostgres {
		s.sweepSharedMemory(ctx)
	}
	return ctx.Err()
}

// Crash kills the server (Kill) and starts it again: recovery runs.
func (s *Server) Crash(ctx context.Context) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.runningLocked() {
		return ErrStopped
	}
	if err := s.killLocked(ctx); err != nil {
		return err
	}
	return s.startLocked(ctx)
}

// Cleanup kills the server if it runs and removes its directory. It is
// safe to call more than once; later calls do nothing.
func (s *Server) Cleanup() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.removed {
		return nil
	}
	s.removed = true
	if s.runningLocked() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		_ = s.killLocked(ctx)
		cancel()
	}
	if err := os.RemoveAll(s.dir); err != nil {
		return fmt.Errorf("throwaway: remove %s: %w", s.dir, err)
	}
	return nil
}

// waitGone waits (bounded by ctx and 10 seconds) until none of pids is
// alive: a killed PostgreSQL's backends outlive their postmaster for a
// moment, and a new postmaster refuses to start while they still hold the
// old shared memory.
func (s *Server) waitGone(ctx context.Context, pids []int) {
	deadline := time.Now().Add(10 * time.Second)
	for _, p := range pids {
		for alive(p) && time.Now().Before(deadline) && ctx.Err() == nil {
			time.Sleep(2 * time.Millisecond) // the poll's pace
		}
	}
}

// waitStopped waits (bounded by ctx and a second) until pid is stopped
// or gone. SIGSTOP is delivered asynchronously: until it takes effect the
// process may still fork, and a child whose fork was under way when the
// signal was sent appears in /proc only once the fork has returned.
func waitStopped(ctx context.Context, pid int) {
	deadline := time.Now().Add(time.Second)
	for time.Now().Before(deadline) && ctx.Err() == nil {
		state, _, ok := procStat(pid)
		if !ok || state == "T" || state == "t" || state == "Z" || state == "X" {
			return
		}
		time.Sleep(time.Millisecond) // the poll's pace
	}
}

// sweepSharedMemory kills whatever process still maps the System V shared
// memory segment a killed PostgreSQL named in its postmaster.pid, and
// waits (bounded by ctx and 10 seconds) until none does. A backend the
// tree walk missed outlives its postmaster until it notices, and while it
// holds the segment no postgres (a new postmaster, pg_rewind's
// single-user recovery) starts in that data directory ("pre-existing
// shared memory block is still in use").
func (s *Server) sweepSharedMemory(ctx context.Context) {
	name, ok := sharedMemoryName(filepath.Join(s.dir, "data", "postmaster.pid"))
	if !ok {
		return
	}
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) && ctx.Err() == nil {
		holders := mapping(name)
		if len(holders) == 0 {
			return
		}
		for _, p := range holders {
			_ = syscall.Kill(p, syscall.SIGKILL)
		}
		time.Sleep(2 * time.Millisecond) // the poll's pace
	}
}

// sharedMemoryName returns the name /proc/PID/maps shows for the System V
// segment whose key is on the seventh line of a postmaster.pid file
// ("/SYSV" and the key in eight hexadecimal digits).
func sharedMemoryName(pidFile string) (string, bool) {
	b, err := os.ReadFile(pidFile)
	if err != nil {
		return "", false
	}
	lines := strings.Split(string(b), "\n")
	if len(lines) < 7 {
		return "", false
	}
	f := strings.Fields(lines[6])
	if len(f) < 1 {
		return "", false
	}
	key, err := strconv.ParseUint(f[0], 10, 32)
	if err != nil || key == 0 {
		return "", false
	}
	return fmt.Sprintf("/SYSV%08x", key), true
}

// mapping returns the live processes whose memory map names name.
func mapping(name string) []int {
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	var out []int
	for _, e := range ents {
		p, err := strconv.Atoi(e.Name())
		if err != nil || !alive(p) {
			continue
		}
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "maps"))
		if err == nil && strings.Contains(string(b), name+" ") {
			out = append(out, p)
		}
	}
	return out
}

// procStat returns the state and parent pid of process pid from /proc.
func procStat(pid int) (state string, ppid int, ok bool) {
	b, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "stat"))
	if err != nil {
		return "", 0, false
	}
	// pid (comm) state ppid ...; comm may hold spaces.
	rest := string(b)
	if i := strings.LastIndexByte(rest, ')'); i >= 0 {
		rest = rest[i+1:]
	}
	f := strings.Fields(rest)
	if len(f) < 2 {
		return "", 0, false
	}
	ppid, _ = strconv.Atoi(f[1])
	return f[0], ppid, true
}

// alive reports whether pid is a live process (not a zombie).
func alive(pid int) bool {
	state, _, ok := procStat(pid)
	return ok && state != "Z" && state != "X"
}

// descendants returns every process below pid, reading /proc (none where
// there is no /proc).
func descendants(pid int) []int {
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	children := map[int][]int{}
	for _, e := range ents {
		p, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if _, ppid, ok := procStat(p); ok {
			children[ppid] = append(children[ppid], p)
		}
	}
	var out []int
	queue := []int{pid}
	for len(queue) > 0 {
		p := queue[0]
		queue = queue[1:]
		for _, c := range children[p] {
			out = append(out, c)
			queue = append(queue, c)
		}
	}
	return out
}

// state says whether the server runs, and otherwise how its last process
// ended (for example "signal: killed").
func (s *Server) state() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	switch {
	case s.cmd == nil:
		return "never started"
	case s.runningLocked():
		return fmt.Sprintf("running (pid %d, %d starts%s)", s.cmd.Process.Pid, s.starts, s.crashNoteLocked())
	case s.cmd.ProcessState != nil:
		return fmt.Sprintf("exited: %s (%d starts%s)", s.cmd.ProcessState, s.starts, s.crashNoteLocked())
	default:
		return "exited"
	}
}

// logTail returns the last lines of the server's log.
func (s *Server) logTail() string {
	b, _ := os.ReadFile(s.log)
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	if len(lines) > 40 {
		lines = lines[len(lines)-40:]
	}
	return strings.Join(lines, "\n")
}

// newServer makes the directory (readable by acct) and picks the port of
// a server of kind, whose log is logName in the directory and whose DSN
// dsn formats with the port.
func newServer(kind string, acct *account, logName, dsn string, stop syscall.Signal) (*Server, error) {
	dir, err := newDir(kind, acct)
	if err != nil {
		return nil, err
	}
	port, err := freePort()
	if err != nil {
		os.RemoveAll(dir)
		return nil, fmt.Errorf("throwaway: %w", err)
	}
	return &Server{
		kind:       kind,
		dir:        dir,
		port:       port,
		log:        filepath.Join(dir, logName),
		dsn:        fmt.Sprintf(dsn, port),
		stopSignal: stop,
	}, nil
}

// setupFailed removes s's directory after its setup command failed and
// returns the error with the end of the log.
func (s *Server) setupFailed(what string, err error) error {
	tail := s.logTail()
	os.RemoveAll(s.dir)
	return fmt.Errorf("throwaway: %s: %v: %s", what, err, tail)
}

// launch starts s for the first time; on error nothing is left behind.
func launch(ctx context.Context, s *Server) (*Server, error) {
	s.mu.Lock()
	err := s.startLocked(ctx)
	s.mu.Unlock()
	if err != nil {
		s.Cleanup()
		return nil, err
	}
	return s, nil
}

// freePort returns a TCP port on 127.0.0.1 that nothing listens on,
// below the kernel's range of ephemeral ports where it can: between this
// check and the server's bind (initdb takes a second or two), an outgoing
// connection of another test could take a port of that range as its local
// port, and the server would fail to bind it.
func freePort() (int, error) {
	low := 32768
	if b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range"); err == nil {
		if f := strings.Fields(string(b)); len(f) == 2 {
			if n, err := strconv.Atoi(f[0]); err == nil {
				low = n
			}
		}
	}
	if low > 11000 {
		for range 50 {
			port := 10000 + mrand.IntN(low-10000)
			l, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
			if err == nil {
				l.Close()
				return port, nil
			}
		}
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// account is the system user a server runs as.
type account struct {
	name     string
	uid, gid int
}

// runAs returns the account a server must run as: name when this process
// is root, nil (this process's own user) otherwise.
func runAs(name string) (*account, error) {
	if os.Geteuid() != 0 {
		return nil, nil
	}
	u, err := user.Lookup(name)
	if err != nil {
		return nil, fmt.Errorf("throwaway: running as root needs the system user %q: %w", name, err)
	}
	uid, _ := strconv.Atoi(u.Uid)
	gid, _ := strconv.Atoi(u.Gid)
	return &account{name: name, uid: uid, gid: gid}, nil
}

// credential sets cmd to run as a (when not nil).
func (a *account) credential(cmd *exec.Cmd) {
	if a == nil {
		return
	}
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uint32(a.uid), Gid: uint32(a.gid)}}
}

// chown gives the tree under dir to a (when not nil).
func (a *account) chown(dir string) error {
	if a == nil {
		return nil
	}
	return filepath.Walk(dir, func(p string, _ os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		return os.Lchown(p, a.uid, a.gid)
	})
}

// newDir makes the server's temporary directory, readable by a.
func newDir(kind string, a *account) (string, error) {
	dir, err := os.MkdirTemp("", "opledger-"+kind+"-")
	if err != nil {
		return "", fmt.Errorf("throwaway: %w", err)
	}
	if err := a.chown(dir); err != nil {
		os.RemoveAll(dir)
		return "", fmt.Errorf("throwaway: %w", err)
	}
	return dir, nil
}

// findBinary returns the first of names found in PATH or in dirs.
func findBinary(names []string, dirs ...string) (string, bool) {
	for _, n := range names {
		if p, err := exec.LookPath(n); err == nil {
			return p, true
		}
	}
	for _, d := range dirs {
		for _, n := range names {
			p := filepath.Join(d, n)
			if fi, err := os.Stat(p); err == nil && !fi.IsDir() && fi.Mode()&0o111 != 0 {
				return p, true
			}
		}
	}
	return "", false
}

// run runs a setup command (initdb, mariadb-install-db) bounded by ctx,
// with its output in logPath.
func run(ctx context.Context, logPath string, cmd *exec.Cmd) error {
	logf, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	defer logf.Close()
	cmd.Stdout, cmd.Stderr = logf, logf
	if cmd.SysProcAttr == nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{}
	}
	cmd.SysProcAttr.Setpgid = true
	if err := cmd.Start(); err != nil {
		return err
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		<-done
		return ctx.Err()
	}
}

// pingSQL opens one connection through driver to dsn and pings it.
func pingSQL(ctx context.Context, driver, dsn string) error {
	db, err := sql.Open(driver, dsn)
	if err != nil {
		return err
	}
	defer db.Close()
	return db.PingContext(ctx)
}

func openSQL(driver, dsn string) (*sql.DB, error) { return sql.Open(driver, dsn) }
