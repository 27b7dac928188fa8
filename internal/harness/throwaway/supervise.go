package throwaway

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"time"
)

// Crash is one exit of a supervised server that nothing asked for: the
// server died by itself.
type Crash struct {
	// At is when the exit was seen.
	At time.Time
	// Exit says how the process ended ("exit status 1", "signal: killed").
	Exit string
	// Fatal is the last line of the server's log that says FATAL or
	// PANIC (how PgBouncer and PostgreSQL report the error they die
	// of), from that word on; "" when there is none.
	Fatal string
	// Restart is the error of starting the server again, nil when it
	// answered again.
	Restart error
}

// String returns the crash as one line.
func (c Crash) String() string {
	s := c.Exit
	if c.Fatal != "" {
		s += ": " + c.Fatal
	}
	if c.Restart != nil {
		s += " (not restarted: " + c.Restart.Error() + ")"
	}
	return s
}

// restartTimeout bounds each start of a supervised server after a crash.
const restartTimeout = time.Minute

// Supervise makes s start again by itself, and wait until it answers,
// whenever its process exits without Stop, Restart, Kill, Crash or
// Cleanup asking for it, as a service manager does for a service with
// systemd's Restart=on-failure, until ctx ends. Each such exit is recorded
// (Crashes) with the line of the log that says why. A restart that fails
// is recorded too and not tried again. While s is stopped (Stop, Kill)
// nothing is started.
//
// A supervised server's crash is a fault of its own, and its clients see
// it as one: every connection ends and new ones are refused until the
// restart; a test decides what the crash means.
func (s *Server) Supervise(ctx context.Context) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.superviseCtx = ctx
}

// Crashes returns the exits of s that nothing asked for while it was
// supervised (Supervise), oldest first.
func (s *Server) Crashes() []Crash {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]Crash(nil), s.crashes...)
}

// afterExit runs when the process cmd, started when s.ends was ends and
// its log logFrom bytes long, has exited: when nothing asked for the exit
// and s is supervised, it records the crash and starts s again.
func (s *Server) afterExit(cmd *exec.Cmd, ends int, logFrom int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.removed || s.ends != ends || s.cmd != cmd || s.superviseCtx == nil || s.superviseCtx.Err() != nil {
		return
	}
	c := Crash{At: time.Now(), Exit: "exited", Fatal: lastLineWith(s.log, logFrom, " FATAL ", "PANIC")}
	if cmd.ProcessState != nil {
		c.Exit = cmd.ProcessState.String()
	}
	ctx, cancel := context.WithTimeout(s.superviseCtx, restartTimeout)
	c.Restart = s.startLocked(ctx)
	cancel()
	s.crashes = append(s.crashes, c)
}

// LastLogLine returns the last line of the server's log (within its last
// 256 KiB) that contains word, from word on; "" when none does.
func (s *Server) LastLogLine(word string) string { return lastLineWith(s.log, 0, word) }

// crashNoteLocked says how many crashes a supervised server had, for
// state ("" for none).
func (s *Server) crashNoteLocked() string {
	if len(s.crashes) == 0 {
		return ""
	}
	return fmt.Sprintf(", %d crashes, the last %s", len(s.crashes), s.crashes[len(s.crashes)-1])
}

// lastLineWith returns the last line of the file at path, after its
// first from bytes (and within its last 256 KiB), that contains one of
// words, from that word on (without the log's timestamp and pid); ""
// when none does.
func lastLineWith(path string, from int64, words ...string) string {
	f, err := os.Open(path)
	if err != nil {
		return ""
	}
	defer f.Close()
	const tail = 256 << 10
	if fi, err := f.Stat(); err == nil {
		from = max(from, fi.Size()-tail)
	}
	if _, err := f.Seek(max(from, 0), io.SeekStart); err != nil {
		return ""
	}
	b, _ := io.ReadAll(f)
	lines := strings.Split(string(b), "\n")
	for i := len(lines) - 1; i >= 0; i-- {
		for _, w := range words {
			if j := strings.Index(lines[i], w); j >= 0 {
				return strings.TrimSpace(lines[i][j:])
			}
		}
	}
	return ""
}

// fileSize returns the size of the file at path, 0 when it cannot.
func fileSize(path string) int64 {
	fi, err := os.Stat(path)
	if err != nil {
		return 0
	}
	return fi.Size()
}
