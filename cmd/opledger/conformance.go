package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/opledger/opledger/conformance"
	"github.com/opledger/opledger/internal/conformancekit"
)

func init() {
	extraCommands["conformance"] = command{"run the concurrency conformance suite against a database, in scratch tables", runConformance}
}

const conformanceUsage = `usage: opledger conformance [--dsn DSN] [--concurrency N] [--keys N] [--cases A,B] [--at-commit] [--json]

Runs the ledger's concurrency conformance suite against a database: many
goroutines on real connections, at every isolation level the database offers.
Each case works in its own scratch table (opl_conf_<random>), created from the
kit's migrations and dropped afterwards; nothing else is touched.

Without --dsn or OPLEDGER_DSN it runs on an embedded SQLite database in a
temporary file, removed afterwards (never ./opledger.db).

With --at-commit the units of work run claim at commit (the business write,
then the ledger's Record as the last statement), the order of
txmiddleware.WithClaimAtCommit; every case but no-poisoning applies.

Prints one line per case (case, verdict, duration, figures) or, with --json, one
JSON report. Exits 0 when every case passes or skips, 1 when any fails, 2 on a
usage or set-up error. With --json an error after the flags were read (a bad
value, a database that cannot be reached, scratch tables that cannot be
created) is a JSON report too, with "passed": false and the error in "error",
as well as the line on stderr.
`

// conformanceJSON is the --json report.
type conformanceJSON struct {
	Target      string `json:"target"`
	Dialect     string `json:"dialect"`
	Concurrency int    `json:"concurrency"`
	Keys        int    `json:"keys"`
	Passed      bool   `json:"passed"`
	DurationMS  int64  `json:"duration_ms"`
	// Error is the usage or set-up error that kept the suite from
	// running (exit status 2); empty when it ran.
	Error   string            `json:"error,omitempty"`
	Results []conformanceCase `json:"results"`
}

type conformanceCase struct {
	Name       string   `json:"name"`
	Case       string   `json:"case"`
	Level      string   `json:"level,omitempty"`
	Verdict    string   `json:"verdict"`
	DurationMS int64    `json:"duration_ms"`
	Figures    string   `json:"figures,omitempty"`
	Messages   []string `json:"messages,omitempty"`
}

// runConformance implements "opledger conformance".
func runConformance(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := newFlags("conformance", stderr)
	fs.Usage = func() {
		io.WriteString(fs.Output(), conformanceUsage+"\nflags:\n")
		fs.PrintDefaults()
	}
	dsn := fs.String("dsn", "", "database (default $OPLEDGER_DSN, else a temporary SQLite file)")
	concurrency := fs.Int("concurrency", conformance.DefaultConcurrency, "claimants racing on one key")
	keys := fs.Int("keys", conformancekit.DefaultKeys, "keys the herd runs over (other cases use a fraction)")
	cases := fs.String("cases", "", "comma-separated case names to run (default all)")
	asJSON := fs.Bool("json", false, "print one JSON report instead of a table")
	atCommit := fs.Bool("at-commit", false, "run the units claim at commit (business write, then Record)")
	if code, stop := parseFlags(fs, args, stdout); stop {
		return code
	}
	// failed reports an error that keeps the suite from running: one
	// line on stderr and, with --json, a report with the error on stdout.
	display, dialect := "", ""
	failed := func(err error) int {
		code := fail(stderr, "conformance", err)
		if *asJSON {
			writeConformanceJSON(stdout, conformance.Report{Target: display, Dialect: dialect, Concurrency: *concurrency, Keys: *keys}, oneLine(err))
		}
		return code
	}
	if fs.NArg() > 0 {
		return failed(unexpectedArg(fs))
	}
	if *concurrency < 2 {
		return failed(fmt.Errorf("--concurrency must be at least 2, not %d", *concurrency))
	}
	if *keys < 1 {
		return failed(fmt.Errorf("--keys must be at least 1, not %d", *keys))
	}
	var only []string
	if *cases != "" {
		known := map[string]bool{}
		for _, c := range conformance.Cases() {
			known[c.Name] = true
		}
		for _, c := range strings.Split(*cases, ",") {
			c = strings.TrimSpace(c)
			if !known[c] {
				return failed(fmt.Errorf("unknown case %q", c))
			}
			only = append(only, c)
		}
	}

	source := *dsn
	if source == "" {
		source = os.Getenv("OPLEDGER_DSN")
	}
	if source == "" {
		dir, err := os.MkdirTemp("", "opledger-conformance-")
		if err != nil {
			return failed(err)
		}
		defer os.RemoveAll(dir)
		source = "sqlite:" + filepath.Join(dir, "conformance.db")
	}
	display = maskCredentials(source)
	db, tgt, err := openDB(ctx, source)
	if tgt.display != "" {
		display = tgt.display
	}
	if tgt.dialect != nil {
		dialect = tgt.dialect.Name()
	}
	if err != nil {
		return failed(err)
	}
	defer db.Close()
	db.SetMaxOpenConns(*concurrency + 4)
	db.SetMaxIdleConns(*concurrency + 4)

	opts := []conformance.Option{conformance.WithConcurrency(*concurrency), conformance.WithKeys(*keys)}
	if len(only) > 0 {
		opts = append(opts, conformance.WithCases(only...))
	}
	width := nameWidth()
	if !*asJSON {
		order := ""
		if *atCommit {
			order = ", claim at commit"
		}
		fmt.Fprintf(stdout, "conformance suite on %s (%s), %d claimants, %d keys%s\n\n", tgt.display, tgt.dialect.Name(), *concurrency, *keys, order)
		fmt.Fprintf(stdout, "%-*s  %-7s  %9s  %s\n", width, "CASE", "VERDICT", "DURATION", "FIGURES")
		opts = append(opts, conformance.WithProgress(func(r conformance.CaseResult) { printCase(stdout, width, r) }))
	}
	target := conformance.StoreTarget(tgt.display, db, tgt.dialect)
	if *atCommit {
		target = target.AtCommit()
	}
	return checkConformance(ctx, target, opts, *asJSON, stdout, stderr)
}

// checkConformance runs the suite on target and reports it: exit 2 with
// the message on stderr (and, with asJSON, the report with the message in
// its "error") for a set-up error (the probes before the cases, or no case
// able to set up), else the summary or the JSON report and
// conformanceExit's code.
func checkConformance(ctx context.Context, target conformance.Target, opts []conformance.Option, asJSON bool, stdout, stderr io.Writer) int {
	rep := conformance.Check(ctx, target, opts...)
	if msg, ok := setupFailure(rep); ok {
		code := fail(stderr, "conformance", errors.New(msg))
		if asJSON {
			writeConformanceJSON(stdout, rep, oneLine(errors.New(msg)))
		}
		return code
	}
	if asJSON {
		if err := writeConformanceJSON(stdout, rep, ""); err != nil {
			return fail(stderr, "conformance", err)
		}
	} else {
		printSummary(stdout, rep)
	}
	return conformanceExit(rep)
}

// conformanceExit is the exit code for a report: 1 when any case failed.
func conformanceExit(rep conformance.Report) int {
	if rep.Failed() {
		return 1
	}
	return 0
}

// nameWidth is the widest case name with an isolation level appended.
func nameWidth() int {
	w := 0
	for _, c := range conformance.Cases() {
		n := len(c.Name)
		if c.PerLevel {
			n += len("/repeatable_read")
		}
		w = max(w, n)
	}
	return w
}

func printCase(w io.Writer, width int, r conformance.CaseResult) {
	fig := r.Figures
	if r.Verdict == conformance.Skip && len(r.Messages) > 0 {
		fig = r.Messages[0]
	}
	fmt.Fprintf(w, "%-*s  %-7s  %9s  %s\n", width, r.Name, strings.ToUpper(string(r.Verdict)), roundDuration(r.Duration), fig)
	if r.Verdict == conformance.Fail {
		const shown = 5
		for i, m := range r.Messages {
			if i == shown {
				fmt.Fprintf(w, "%*s  … %d more\n", width, "", len(r.Messages)-shown)
				break
			}
			fmt.Fprintf(w, "%*s  - %s\n", width, "", oneLine(errors.New(m)))
		}
	}
}

func roundDuration(d time.Duration) string {
	if d < time.Second {
		return d.Round(time.Millisecond).String()
	}
	return d.Round(10 * time.Millisecond).String()
}

func printSummary(w io.Writer, rep conformance.Report) {
	var pass, failed, skip int
	for _, r := range rep.Results {
		switch r.Verdict {
		case conformance.Pass:
			pass++
		case conformance.Fail:
			failed++
		default:
			skip++
		}
	}
	verdict := "PASS"
	if failed > 0 {
		verdict = "FAIL"
	}
	fmt.Fprintf(w, "\n%s: %d passed, %d failed, %d skipped in %s\n", verdict, pass, failed, skip, roundDuration(rep.Duration))
}

// writeConformanceJSON writes rep as the --json report; setupErr, when
// not empty, is the error that kept the suite from running, and the
// report does not pass.
func writeConformanceJSON(w io.Writer, rep conformance.Report, setupErr string) error {
	out := conformanceJSON{
		Target: rep.Target, Dialect: rep.Dialect, Concurrency: rep.Concurrency, Keys: rep.Keys,
		Passed: !rep.Failed() && setupErr == "", DurationMS: rep.Duration.Milliseconds(), Error: setupErr,
		Results: []conformanceCase{},
	}
	for _, r := range rep.Results {
		out.Results = append(out.Results, conformanceCase{
			Name: r.Name, Case: r.Case, Level: r.Level, Verdict: string(r.Verdict),
			DurationMS: r.Duration.Milliseconds(), Figures: r.Figures, Messages: r.Messages,
		})
	}
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(out)
}

// setupFailure reports a database on which no case could even create its
// scratch table (no rights, read-only): a set-up error, not a verdict.
func setupFailure(rep conformance.Report) (string, bool) {
	msg, ran := "", 0
	for _, r := range rep.Results {
		if r.Verdict == conformance.Skip {
			continue
		}
		ran++
		if r.Verdict != conformance.Fail || len(r.Messages) == 0 || !strings.HasPrefix(r.Messages[0], "set-up:") {
			return "", false
		}
		msg = r.Messages[0]
	}
	return msg, ran > 0
}
