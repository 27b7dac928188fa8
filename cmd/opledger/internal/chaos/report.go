package chaos

import (
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"sort"
	"strings"
	"text/tabwriter"

	"github.com/opledger/opledger/cmd/opledger/internal/timeline"
)

// Report is what one database's run measured. Its JSON names are the
// command's --json output (WriteJSON).
type Report struct {
	Database            string         `json:"database"`
	Transport           string         `json:"transport"` // grpc or connect
	Owner               string         `json:"owner"`
	Order               string         `json:"order"` // claim-first or claim-at-commit
	Seed                uint64         `json:"seed"`
	Replicas            int            `json:"replicas"`
	Calls               int            `json:"logical_calls"`
	Attempts            int64          `json:"attempts"`
	Executed            int            `json:"executed"`
	Replayed            int64          `json:"replayed"`
	Resolved            int64          `json:"resolved"`
	ReturnedOK          int            `json:"returned_ok"`
	Definite            int            `json:"definite_failures"`
	Ambiguous           int            `json:"ambiguous"`
	AmbiguousEarly      int            `json:"ambiguous_with_deadline_left"`
	AmbiguousMaxLeftMS  float64        `json:"ambiguous_max_deadline_left_ms"`
	Reconciled          int            `json:"reconciled_after_run"`
	Unresolved          int            `json:"unresolved"`
	Duplicates          int            `json:"duplicate_effects"`
	Lost                int            `json:"lost_effects"`
	RowsNoLedger        int            `json:"rows_without_ledger_entry"`
	LedgerNoRow         int            `json:"ledger_entries_without_row"`
	WrongAnswers        int            `json:"wrong_answers"`
	Killed              int            `json:"replicas_killed"`
	KilledAfterCommit   int            `json:"replicas_killed_after_commit"`
	DBRestarts          int            `json:"database_restarts"`
	DBRestartNote       string         `json:"database_restart_note,omitempty"`
	Cuts                int64          `json:"proxy_cuts"`
	Blackholes          int64          `json:"proxy_blackholes"`
	Amplification       float64        `json:"amplification"`
	OutageCalls         int64          `json:"outage_calls"`
	OutageAmplification float64        `json:"outage_amplification"`
	OutageKind          string         `json:"outage"`
	Pooler              string         `json:"pooler,omitempty"`         // the run's own pooler ("PgBouncer 1.18.0"), "" for none
	PoolerRestarts      int            `json:"pooler_restarts"`          // the pooler died by itself and was started again (pooler.go)
	PoolerCrashes       []string       `json:"pooler_crashes,omitempty"` // how it died, each time
	P50ms               float64        `json:"p50_ms"`
	P99ms               float64        `json:"p99_ms"`
	ElapsedS            float64        `json:"elapsed_s"`
	StartFailures       int            `json:"replica_start_failures"`
	FailedBy            map[string]int `json:"failed_by,omitempty"`
	ReplicaTrouble      []string       `json:"replica_trouble,omitempty"`
	CutEvents           int64          `json:"proxy_cut_events"`

	// The replicas' own record of the transfers they committed (their
	// commit log), against the database after the run.
	CommittedLost int `json:"committed_lost"`    // committed (the database said so), not in the database after the run
	ExecutedTwice int `json:"executed_twice"`    // logical calls whose work committed more than once
	AckLost       int `json:"acknowledged_lost"` // answered OK, its effect not in the database after the run

	// Failover runs (Target.Failover): the primary killed, the standby
	// promoted, the old primary rejoined as the new standby.
	Replication       string    `json:"replication,omitempty"` // sync, async, remote_apply, semisync
	Driver            string    `json:"driver,omitempty"`
	Failovers         int       `json:"failovers"`
	FailoverWindowsMS []float64 `json:"failover_windows_ms,omitempty"` // from the kill to the first commit after it
	PromoteMS         []float64 `json:"failover_promote_ms,omitempty"` // from the kill until the promotion was confirmed
	RejoinMS          []float64 `json:"failover_rejoin_ms,omitempty"`  // the old primary's rewind and catch-up

	timeline []timeline.Call  // the calls, for the picture
	faults   []timeline.Fault // the faults, for the picture
}

// Failed reports whether the run broke the promise: a duplicate, a loss,
// a wrong answer, an ambiguous return that had deadline left, or an
// outcome that never resolved; and, except after a failover to an
// asynchronous standby, a commit lost or a call executed twice. After a
// failover to a synchronous standby, any ambiguous return too. An
// asynchronous failover's acknowledged-and-lost calls are the
// replication's losses, counted but not a failure of the kit.
func (r Report) Failed() bool {
	strict := r.synchronousOrNone()
	return r.Duplicates > 0 || r.Lost-r.replicationLoss() > 0 || r.WrongAnswers > 0 || r.AmbiguousEarly > 0 || r.Unresolved > 0 ||
		strict && (r.CommittedLost > 0 || r.ExecutedTwice > 0) || strict && r.Failovers > 0 && r.Ambiguous > 0
}

// shortOf says how the run injected less than s asked for ("" when it
// did not): Settings.Strict fails on it.
func (r Report) shortOf(s Settings) string {
	var short []string
	if r.Killed < s.Kills {
		short = append(short, fmt.Sprintf("%d replica kills, %d asked", r.Killed, s.Kills))
	}
	if r.DBRestartNote == "" && r.DBRestarts < s.DBRestarts {
		short = append(short, fmt.Sprintf("%d database restarts, %d asked", r.DBRestarts, s.DBRestarts))
	}
	if r.Cuts == 0 {
		short = append(short, "no proxy cut")
	}
	if r.Failovers < s.Failovers {
		short = append(short, fmt.Sprintf("%d failovers, %d asked", r.Failovers, s.Failovers))
	}
	if r.Calls < s.Calls {
		short = append(short, fmt.Sprintf("%d logical calls of %d (--duration ended the run)", r.Calls, s.Calls))
	}
	return strings.Join(short, "; ")
}

// judge reports whether r fails the run made with s: a broken promise
// (Failed) or, with s.Strict, a run short of its faults or a pooler crash
// that no known bug explains, each said on progress.
func (r Report) judge(s Settings, progress io.Writer) (failed bool) {
	failed = r.Failed()
	if short := r.shortOf(s); s.Strict && short != "" {
		fmt.Fprintf(progress, "opledger chaos: %s: --strict: %s\n", r.Database, short)
		failed = true
	}
	if u := r.unexplainedPoolerCrashes(); s.Strict && len(u) > 0 {
		fmt.Fprintf(progress, "opledger chaos: %s: --strict: the pooler crashed, not of a known PgBouncer bug: %s\n", r.Database, strings.Join(u, "; "))
		failed = true
	}
	return failed
}

// WriteJSON writes the reports as the command's --json output: an
// indented JSON array, the field names Report's.
func WriteJSON(w io.Writer, reps []Report) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(reps)
}

// PrintTable writes the reports as a table, one column per database;
// under it, each run's failed calls by kind, the replica restarts that
// failed and the pooler's crashes.
func PrintTable(w io.Writer, reps []Report) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	for _, row := range tableRows(reps) {
		fmt.Fprintf(tw, "%s\t", row.name)
		for _, r := range reps {
			fmt.Fprintf(tw, "%v\t", row.cell(r))
		}
		fmt.Fprintln(tw)
	}
	tw.Flush()
	for _, r := range reps {
		printNotes(w, r)
	}
}

// tableRow is one row of the table: its name, and its cell of a run.
type tableRow struct {
	name string
	cell func(r Report) any
}

// tableRows are the table's rows, top to bottom: the calls and what they
// returned, the effects against the promise, the faults, the cost.
func tableRows(reps []Report) []tableRow {
	rows := append(callRows(), effectRows()...)
	rows = append(rows, faultRows(reps)...)
	return append(rows, costRows()...)
}

// callRows are the run's identity, its calls and what they returned.
func callRows() []tableRow {
	return []tableRow{
		{"database", func(r Report) any { return r.Database }},
		{"transport", func(r Report) any { return r.Transport }},
		{"retry owner", func(r Report) any { return r.Owner }},
		{"claim order", func(r Report) any { return r.Order }},
		{"replicas", func(r Report) any { return r.Replicas }},
		{"logical calls", func(r Report) any { return r.Calls }},
		{"attempts", func(r Report) any { return r.Attempts }},
		{"executed (business rows)", func(r Report) any { return r.Executed }},
		{"replayed", func(r Report) any { return r.Replayed }},
		{"resolved", func(r Report) any { return r.Resolved }},
		{"returned OK", func(r Report) any { return r.ReturnedOK }},
		{"returned a definite failure", func(r Report) any { return r.Definite }},
		{"returned ambiguous", func(r Report) any { return r.Ambiguous }},
		{"  of which with ≥100ms of deadline left (must be 0)", func(r Report) any {
			if r.Ambiguous == 0 {
				return r.AmbiguousEarly
			}
			return fmt.Sprintf("%d (most left: %.0fms)", r.AmbiguousEarly, r.AmbiguousMaxLeftMS)
		}},
		{"  resolved after the run", func(r Report) any { return r.Reconciled }},
	}
}

// effectRows are the effects against the promise: what must be 0, and
// what only an asynchronous failover may make more.
func effectRows() []tableRow {
	return []tableRow{
		{"unresolved (must be 0)", func(r Report) any { return r.Unresolved }},
		{"duplicate effects (must be 0)", func(r Report) any { return r.Duplicates }},
		{"lost effects (must be 0)", func(r Report) any {
			if n := r.replicationLoss(); n > 0 {
				return fmt.Sprintf("%d (%d acknowledged and lost by the asynchronous standby)", r.Lost, n)
			}
			return r.Lost
		}},
		{"  row without ledger entry", func(r Report) any { return r.RowsNoLedger }},
		{"  ledger entry without row", func(r Report) any { return r.LedgerNoRow }},
		{"wrong answers (must be 0)", func(r Report) any { return r.WrongAnswers }},
		{"acknowledged and lost (0 but after an async failover)", func(r Report) any { return r.AckLost }},
		{"committed and lost (0 but after an async failover)", func(r Report) any { return r.CommittedLost }},
		{"executed twice (0 but after an async failover)", func(r Report) any { return r.ExecutedTwice }},
	}
}

// faultRows are the faults the run injected; the failover rows only
// when a run failed over.
func faultRows(reps []Report) []tableRow {
	rows := []tableRow{
		{"replicas killed", func(r Report) any { return r.Killed }},
		{"  of which after COMMIT, before the answer", func(r Report) any { return r.KilledAfterCommit }},
		{"replica restarts that failed (then retried)", func(r Report) any { return r.StartFailures }},
		{"database restarts", func(r Report) any {
			if r.DBRestartNote != "" {
				return fmt.Sprintf("%d (%s)", r.DBRestarts, r.DBRestartNote)
			}
			return r.DBRestarts
		}},
	}
	if slices.ContainsFunc(reps, func(r Report) bool { return r.Replication != "" }) {
		rows = append(rows,
			tableRow{"failovers (primary killed, standby promoted, old primary rejoined)", func(r Report) any { return r.Failovers }},
			tableRow{"  window: kill → first commit", func(r Report) any { return msList(r.FailoverWindowsMS) }},
			tableRow{"  kill → promotion confirmed (pg_ctl promote -w)", func(r Report) any { return msList(r.PromoteMS) }},
			tableRow{"  rejoin (pg_rewind, catch-up)", func(r Report) any { return msList(r.RejoinMS) }})
	}
	return append(rows,
		tableRow{"proxy cuts (connections)", func(r Report) any { return r.Cuts }},
		tableRow{"proxy blackholes", func(r Report) any { return r.Blackholes }},
		tableRow{"pooler restarts (it crashed; started again)", func(r Report) any { return r.poolerRow() }})
}

// costRows are what the faults cost: attempts per call, in the outage
// too, latency and time.
func costRows() []tableRow {
	return []tableRow{
		{"amplification", func(r Report) any { return fmt.Sprintf("%.2fx", r.Amplification) }},
		{"outage", func(r Report) any { return r.OutageKind }},
		{"  amplification during the outage", func(r Report) any {
			return fmt.Sprintf("%.2fx (%d calls)", r.OutageAmplification, r.OutageCalls)
		}},
		{"latency p50", func(r Report) any { return fmt.Sprintf("%.1fms", r.P50ms) }},
		{"latency p99", func(r Report) any { return fmt.Sprintf("%.1fms", r.P99ms) }},
		{"elapsed", func(r Report) any { return fmt.Sprintf("%.1fs", r.ElapsedS) }},
	}
}

// printNotes writes the lines under the table of r's run: its failed
// calls by kind, its replica restarts that failed, its pooler's crashes.
func printNotes(w io.Writer, r Report) {
	labels := make([]string, 0, len(r.FailedBy))
	for l := range r.FailedBy {
		labels = append(labels, l)
	}
	sort.Strings(labels)
	for _, l := range labels {
		fmt.Fprintf(w, "%s: failed calls: %d × %s\n", r.Database, r.FailedBy[l], l)
	}
	for _, t := range r.ReplicaTrouble {
		fmt.Fprintf(w, "%s: a replica restart failed (it was started again): %s\n", r.Database, t)
	}
	for _, c := range r.PoolerCrashes {
		fmt.Fprintf(w, "%s: the pooler (%s) crashed: %s\n", r.Database, r.Pooler, c)
	}
}

// msList writes milliseconds as "812ms, 1034ms" ("-" for none; "none" for
// a window in which nothing committed).
func msList(v []float64) string {
	if len(v) == 0 {
		return "-"
	}
	out := make([]string, len(v))
	for i, x := range v {
		out[i] = fmt.Sprintf("%.0fms", x)
		if x < 0 {
			out[i] = "none"
		}
	}
	return strings.Join(out, ", ")
}
