package chaos

import (
	"context"
	"fmt"
	"strings"

	"github.com/opledger/opledger/internal/harness/throwaway"
)

// A connection pooler of the run's own (the throw-away PgBouncer of the
// pgbouncer databases) may die under the run's faults: PgBouncer 1.18.0 to
// 1.20.x crash on some cancel requests (docs/poolers.md), and the drivers
// send one whenever a query's context ends, here whenever a cut between
// the client and a replica ends a call in flight. The run restarts a dead
// pooler as a service manager would (systemd's Restart=on-failure) and
// counts the restarts: for the calls it is a fault like a database crash
// (every connection through it ends, new ones are refused for a moment),
// and the check after the run is the same. A restart hides no duplicate,
// loss or wrong answer.

// pooler returns the run's own pooler, nil when the database has none.
func (s *serverDB) pooler() *throwaway.Server {
	if s.backend != nil && s.srv != s.backend {
		return s.srv
	}
	return nil
}

// supervisePooler restarts db's pooler (when it has one of the run's
// own) whenever it dies, until ctx ends, and returns what fills the
// report's pooler fields at the end of the run.
func supervisePooler(ctx context.Context, db database) func(*Report) {
	p, ok := db.(interface{ pooler() *throwaway.Server })
	if !ok || p.pooler() == nil {
		return func(*Report) {}
	}
	pb := p.pooler()
	pb.Supervise(ctx)
	version := poolerVersion(pb) // read now: the log grows
	return func(r *Report) {
		r.Pooler = version
		r.PoolerRestarts, r.PoolerCrashes = 0, nil
		for _, c := range pb.Crashes() {
			if c.Restart == nil {
				r.PoolerRestarts++
			}
			r.PoolerCrashes = append(r.PoolerCrashes, c.String())
		}
	}
}

// poolerVersion returns the pooler's name and version as its log says
// them at start ("PgBouncer 1.18.0"), its kind when the log does not.
func poolerVersion(pb *throwaway.Server) string {
	if v := pb.LastLogLine("process up: "); v != "" {
		v = strings.TrimPrefix(v, "process up: ")
		v, _, _ = strings.Cut(v, ",")
		return v
	}
	return pb.Kind()
}

// KnownPoolerBug reports whether a pooler's crash (a line of
// throwaway.Crash) is PgBouncer failing one of its own state checks
// ("bad client state", "bad server state", "server in bad state"): the
// crashes of its cancel handling (pgbouncer#801, #849, #904, #822) are
// of that kind. Any other crash is unexplained: Settings.Strict fails on
// it.
func KnownPoolerBug(crash string) bool {
	for _, s := range []string{"bad client state", "bad server state", "server in bad state"} {
		if strings.Contains(crash, "FATAL") && strings.Contains(crash, s) {
			return true
		}
	}
	return false
}

// unexplainedPoolerCrashes returns the report's pooler crashes that are
// not a known PgBouncer bug.
func (r Report) unexplainedPoolerCrashes() []string {
	var out []string
	for _, c := range r.PoolerCrashes {
		if !KnownPoolerBug(c) {
			out = append(out, c)
		}
	}
	return out
}

// poolerRow is the table's pooler restarts cell (the crashes are listed
// below the table).
func (r Report) poolerRow() any {
	switch {
	case r.Pooler == "":
		return "-"
	case len(r.PoolerCrashes) > r.PoolerRestarts:
		return fmt.Sprintf("%d (%d not restarted)", r.PoolerRestarts, len(r.PoolerCrashes)-r.PoolerRestarts)
	}
	return r.PoolerRestarts
}
