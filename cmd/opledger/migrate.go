package main

import (
	"context"
	"database/sql"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/opledger/opledger/dialects"
	"github.com/opledger/opledger/internal/dialectkit"
	"github.com/opledger/opledger/internal/txledger"
	"github.com/opledger/opledger/ledger"
	"github.com/opledger/opledger/migrations"
)

// newFlags returns a flag set that reports errors instead of exiting,
// with a usage text that names the command and its summary. Parse it
// with parseFlags.
func newFlags(name string, stderr io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		w := fs.Output()
		fmt.Fprintf(w, "usage: opledger %s [flags]\n", name)
		if first, _, _ := strings.Cut(name, " "); commands()[first].summary != "" {
			fmt.Fprintf(w, "\n%s.\n", commands()[first].summary)
		}
		fmt.Fprintln(w, "\nflags:")
		fs.PrintDefaults()
	}
	return fs
}

// parseFlags parses args with fs, the Go flag convention: -h, -help or
// --help prints fs's usage to stdout and stops with exit code 0; a bad
// flag prints one line to fs's output (stderr) and stops with exit
// code 2. The line masks any credential of the arguments it repeats (the
// flag package's "invalid value … for flag" quotes the value).
func parseFlags(fs *flag.FlagSet, args []string, stdout io.Writer) (code int, stop bool) {
	errOut := fs.Output()
	fs.SetOutput(io.Discard) // the flag package would print the usage after the error
	err := fs.Parse(args)
	fs.SetOutput(errOut)
	switch {
	case err == nil:
		return 0, false
	case errors.Is(err, flag.ErrHelp):
		fs.SetOutput(stdout)
		fs.Usage()
		fs.SetOutput(errOut)
		return 0, true
	}
	fmt.Fprintf(errOut, "opledger %s: %s (opledger %s --help lists the flags)\n", fs.Name(), oneLine(errors.New(newArgMasker(args).mask(err.Error()))), fs.Name())
	return 2, true
}

// unexpectedArg is the error for the first argument left after fs's
// flags. It repeats the argument with any credential masked: a DSN
// given without --dsn (or a second one after it) is one.
func unexpectedArg(fs *flag.FlagSet) error {
	return fmt.Errorf("unexpected argument %q (flags go before arguments; a DSN goes after --dsn)", maskCredentials(fs.Arg(0)))
}

// fail prints a one-line error and returns exit code 2.
func fail(stderr io.Writer, cmd string, err error) int {
	fmt.Fprintf(stderr, "opledger %s: %s\n", cmd, oneLine(err))
	return 2
}

// migrateHelp is what opledger migrate --help adds to the usage line.
const migrateHelp = `up      creates the ledger's table and its outbox's (and a SQLite file that does not exist)
down    removes them
status  lists the migrations and when each was applied
export  writes the migration files of a dialect into DIR, for your own migration tool

opledger migrate SUBCOMMAND --help lists the subcommand's flags.`

func runMigrate(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	const help = "usage: opledger migrate up|down|status [--dsn DSN] [--table NAME]\n" +
		"       opledger migrate export --dialect postgres|sqlite|mysql|tidb --dir DIR [--table NAME]"
	if len(args) == 0 {
		fmt.Fprintln(stderr, help)
		return 2
	}
	sub := args[0]
	switch sub {
	case "up", "down", "status", "export":
	case "-h", "-help", "--help", "help":
		fmt.Fprintln(stdout, help+"\n\n"+migrateHelp)
		return 0
	default:
		fmt.Fprintf(stderr, "opledger migrate: unknown subcommand %q (want up, down, status or export; opledger migrate --help)\n", maskCredentials(sub))
		return 2
	}
	fs := newFlags("migrate "+sub, stderr)
	dsn := fs.String("dsn", "", "database (default $OPLEDGER_DSN, else the SQLite file opledger.db)")
	table := fs.String("table", ledger.DefaultTable, "ledger table name")
	dialect := fs.String("dialect", "", "dialect to export (export only)")
	dir := fs.String("dir", "", "directory to export into (export only)")
	if code, stop := parseFlags(fs, args[1:], stdout); stop {
		return code
	}
	if fs.NArg() > 0 {
		return fail(stderr, "migrate", unexpectedArg(fs))
	}
	if sub == "export" {
		if *dialect == "" || *dir == "" {
			fmt.Fprintln(stderr, help)
			return 2
		}
		d, err := dialectByName(*dialect)
		if err != nil {
			return fail(stderr, "migrate export", err)
		}
		paths, err := migrations.Export(*dir, d, *table)
		if err != nil {
			return fail(stderr, "migrate export", err)
		}
		for _, p := range paths {
			fmt.Fprintln(stdout, p)
		}
		return 0
	}
	if err := dialectkit.CheckTableName(*table); err != nil {
		return fail(stderr, "migrate", err) // before a SQLite file is created
	}
	open := openExisting // status and down read a ledger that is there
	if sub == "up" {
		open = openDB
	}
	db, t, err := open(ctx, dsnFrom(*dsn))
	if err != nil {
		return fail(stderr, "migrate", err)
	}
	defer db.Close()
	m, err := migrations.New(db, t.dialect, migrations.WithTable(*table))
	if err != nil {
		return fail(stderr, "migrate", err)
	}
	switch sub {
	case "up", "down":
		var rs []migrations.MigrationResult
		if sub == "up" {
			rs, err = m.Up(ctx)
		} else {
			rs, err = m.Down(ctx)
		}
		if err != nil {
			return fail(stderr, "migrate "+sub, err)
		}
		if len(rs) == 0 {
			fmt.Fprintf(stdout, "%s: nothing to do (table %s)\n", t.display, *table)
		}
		for _, r := range rs {
			fmt.Fprintf(stdout, "%s: %-4s %s (%s)\n", t.display, r.Direction, r.Name, r.Duration.Round(time.Microsecond))
		}
	case "status":
		ss, err := m.Status(ctx)
		if err != nil {
			return fail(stderr, "migrate status", err)
		}
		tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
		fmt.Fprintf(tw, "VERSION\tMIGRATION\tAPPLIED\n")
		for _, s := range ss {
			applied := "pending"
			if s.Applied {
				applied = s.AppliedAt.UTC().Format(time.RFC3339)
			}
			fmt.Fprintf(tw, "%d\t%s\t%s\n", s.Version, s.Name, applied)
		}
		tw.Flush()
	}
	return 0
}

func runSweep(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := newFlags("sweep", stderr)
	dsn := fs.String("dsn", "", "database (default $OPLEDGER_DSN, else the SQLite file opledger.db)")
	table := fs.String("table", ledger.DefaultTable, "ledger table name")
	batch := fs.Int("batch", 1000, "entries deleted per statement (each statement commits on its own)")
	maxDuration := fs.Duration("max-duration", 0, "stop after this long, leaving the rest for the next run (0: until no expired entry is left)")
	lockWait := fs.Duration("lock-wait", defaultSweepLockWait, "longest wait for an entry another transaction holds, which is then skipped (0: the database's own bound)")
	width := fs.Duration("bucket-width", 0, "on a table partitioned by birth, the width of the buckets to create, as ledger.WithBucketWidth (0: a 24th of --retention, at least an hour)")
	retention := fs.Duration("retention", 24*time.Hour, "on a table partitioned by birth, the ledger's retention, as the servers' ledger.WithRetention: a bucket is dropped once this, and the retention its entries were written with, have passed since its end")
	skew := fs.Duration("clock-skew", -1, "the ledger's clock skew, as the servers' ledger.WithClockSkew (default 1m, or a tenth of --retention when shorter)")
	if code, stop := parseFlags(fs, args, stdout); stop {
		return code
	}
	lw, err := (&windowFlags{retention: retention, skew: skew, resolve: new(time.Duration(0))}).window()
	if err != nil {
		return fail(stderr, "sweep", err)
	}
	switch {
	case fs.NArg() > 0:
		return fail(stderr, "sweep", unexpectedArg(fs))
	case *width < 0:
		return fail(stderr, "sweep", errors.New("--bucket-width must not be negative"))
	case *batch < 1 || *batch > 1_000_000:
		return fail(stderr, "sweep", errors.New("--batch must be 1 to 1000000"))
	case *maxDuration < 0:
		return fail(stderr, "sweep", errors.New("--max-duration must not be negative"))
	case *lockWait < 0:
		return fail(stderr, "sweep", errors.New("--lock-wait must not be negative"))
	}
	db, t, err := openExisting(ctx, dsnFrom(*dsn))
	if err != nil {
		return fail(stderr, "sweep", err)
	}
	defer db.Close()
	lopts := []ledger.Option{ledger.WithTable(*table), ledger.WithRetention(lw.retention), ledger.WithClockSkew(lw.skew)}
	if *lockWait > 0 {
		lopts = append(lopts, ledger.WithSweepLockWait(*lockWait))
	}
	if *width > 0 {
		lopts = append(lopts, ledger.WithBucketWidth(*width))
	}
	l, err := ledger.New(t.dialect, lopts...)
	if err != nil {
		return fail(stderr, "sweep", err)
	}
	expired, err := countExpired(ctx, db, t.dialect, *table, time.Now())
	if err != nil {
		return fail(stderr, "sweep", t.scrubErr(err))
	}
	sctx := ctx
	if *maxDuration > 0 {
		var cancel context.CancelFunc
		sctx, cancel = context.WithTimeout(ctx, *maxDuration)
		defer cancel()
	}
	// Progress: how many of the entries expired at the start are gone,
	// counted once a second on another connection (the sweep itself runs
	// as the ledger does it, each batch committing on its own).
	p := newProgress(stderr, expired)
	cutoff := time.Now()
	stopProgress := make(chan struct{})
	progressDone := make(chan struct{})
	go func() {
		defer close(progressDone)
		tick := time.NewTicker(time.Second)
		defer tick.Stop()
		for {
			select {
			case <-stopProgress:
				return
			case <-tick.C:
				if left, err := countExpired(sctx, db, t.dialect, *table, cutoff); err == nil {
					p.set(expired - left)
				}
			}
		}
	}()
	start := time.Now()
	n, err := l.Sweep(sctx, db, *batch)
	elapsed := time.Since(start)
	close(stopProgress)
	<-progressDone
	p.set(n)
	p.done()
	stopped := errors.Is(err, context.DeadlineExceeded) && ctx.Err() == nil
	var held *ledger.HeldError
	if err != nil && !stopped && !errors.As(err, &held) {
		return fail(stderr, "sweep", fmt.Errorf("after %d entries: %w", n, t.scrubErr(err)))
	}
	fmt.Fprintf(stdout, "%s: swept %d expired entries from %s in %s (%s)", t.display, n, *table, elapsed.Round(time.Millisecond), rate(n, elapsed))
	if stopped {
		fmt.Fprintf(stdout, "; stopped at --max-duration %s with about %d expired entries left for the next run", *maxDuration, max(expired-n, 0))
	}
	if held != nil {
		fmt.Fprintf(stdout, "; %d expired %s left for the next run: other open transactions hold %s", held.Held, plural(held.Held, "entry", "entries"), plural(held.Held, "it", "them"))
		if held.Err != nil {
			fmt.Fprintf(stdout, " (%s)", oneLine(t.scrubErr(held.Err)))
		}
	}
	fmt.Fprintln(stdout)
	return 0
}

// defaultSweepLockWait is sweep's --lock-wait: long enough for a claim's
// transaction to end, far shorter than InnoDB's 50 s.
const defaultSweepLockWait = 5 * time.Second

// plural returns one for n == 1, else many.
func plural(n int64, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}

// countExpired counts the entries a sweep at now deletes (through the
// expires_at index).
func countExpired(ctx context.Context, db *sql.DB, d dialects.Dialect, table string, now time.Time) (int64, error) {
	var n int64
	err := db.QueryRowContext(ctx, "SELECT COUNT(*) FROM "+d.QuoteIdent(table)+" WHERE expires_at <= "+d.Placeholder(1), now.UnixMicro()).Scan(&n)
	return n, err
}

func rate(n int64, d time.Duration) string {
	if d <= 0 {
		return "- rows/s"
	}
	return fmt.Sprintf("%.0f rows/s", float64(n)/d.Seconds())
}

// progress shows a sweep's progress on stderr: a bar redrawn in place on
// a terminal, otherwise a plain line at most once a second.
type progress struct {
	w        io.Writer
	tty      bool
	total    int64
	n        int64
	start    time.Time
	last     time.Time
	drawn    bool
	drawnN   int64         // n when last drawn
	interval time.Duration // the least time between two drawings
}

func newProgress(w io.Writer, total int64) *progress {
	return &progress{w: w, tty: isTerminal(w), total: total, start: time.Now()}
}

// set records that n entries are gone and draws, at most once per
// interval.
func (p *progress) set(n int64) {
	p.n = max(n, 0)
	if now := time.Now(); now.Sub(p.last) >= p.interval {
		p.last = now
		p.draw()
	}
}

func (p *progress) draw() {
	p.drawn, p.drawnN = true, p.n
	elapsed := time.Since(p.start)
	total := max(p.total, p.n)
	if !p.tty {
		fmt.Fprintf(p.w, "sweep: %d of about %d expired entries deleted, %s\n", p.n, total, rate(p.n, elapsed))
		return
	}
	const width = 30
	frac := 1.0
	if total > 0 {
		frac = float64(p.n) / float64(total)
	}
	full := int(frac * width)
	fmt.Fprintf(p.w, "\r[%s%s] %3.0f%% %d/%d %s ", strings.Repeat("#", full), strings.Repeat(".", width-full), frac*100, p.n, total, rate(p.n, elapsed))
}

// done draws the last state and ends the bar's line.
func (p *progress) done() {
	if !p.drawn || p.drawnN != p.n {
		p.draw()
	}
	if p.tty {
		fmt.Fprintln(p.w)
	}
}

func runInspect(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := newFlags("inspect", stderr)
	dsn := fs.String("dsn", "", "database (default $OPLEDGER_DSN, else the SQLite file opledger.db)")
	table := fs.String("table", ledger.DefaultTable, "ledger table name")
	caller := fs.String("caller", "", "caller fingerprint")
	method := fs.String("method", "", "method: a full gRPC method, /pkg.Service/Method, or an HTTP route, \"POST /orders/{id}\" (alone: list that method's entries)")
	key := fs.String("key", "", "idempotency key (hashed before use; never printed)")
	pending := fs.Bool("pending", false, "list the entries committed without a result (stuck keys)")
	olderThan := fs.Duration("older-than", 0, "with --pending: only entries at least this old")
	limit := fs.Int("limit", 50, "most entries listed")
	if code, stop := parseFlags(fs, args, stdout); stop {
		return code
	}
	if fs.NArg() > 0 {
		return fail(stderr, "inspect", unexpectedArg(fs))
	}
	if *key == "" && *caller == "" && (*pending || *method != "") {
		return listCommand(ctx, stdout, stderr, *dsn, *table, *pending, *olderThan, *method, *limit)
	}
	if *pending || *olderThan != 0 {
		return fail(stderr, "inspect", errors.New("--pending lists entries: give it without --caller and --key"))
	}
	id, err := ledger.NewIdentity(*caller, *method, *key)
	if err != nil {
		return fail(stderr, "inspect", err)
	}
	db, t, err := openExisting(ctx, dsnFrom(*dsn))
	if err != nil {
		return fail(stderr, "inspect", err)
	}
	defer db.Close()
	l, err := ledger.New(t.dialect, ledger.WithTable(*table))
	if err != nil {
		return fail(stderr, "inspect", err)
	}
	e, err := l.Lookup(ctx, db, id)
	if errors.Is(err, ledger.ErrNotFound) {
		fmt.Fprintf(stdout, "no live entry for %s\n", id)
		return 1
	}
	if err != nil {
		return fail(stderr, "inspect", err)
	}
	idb := id.ID()
	var b strings.Builder
	fmt.Fprintf(&b, "entry       %s\n", hex.EncodeToString(idb[:]))
	fmt.Fprintf(&b, "caller      %s\nmethod      %s\n", e.Identity.Caller(), e.Identity.Method())
	fmt.Fprintf(&b, "request fp  %s\n", hex.EncodeToString(e.Fingerprint[:]))
	fmt.Fprintf(&b, "created     %s\nexpires     %s\n", e.CreatedAt.Format(time.RFC3339Nano), e.ExpiresAt.Format(time.RFC3339Nano))
	if e.State == ledger.Completed {
		fmt.Fprintf(&b, "state       completed %s\n", e.CompletedAt.Format(time.RFC3339Nano))
		fmt.Fprintf(&b, "result      code %d, %d bytes of %s\n", e.Result.Code, len(e.Result.Response), orNone(e.Result.TypeName))
	} else {
		b.WriteString("state       committed without a result (incomplete)\n")
	}
	io.WriteString(stdout, b.String())
	return 0
}

// listCommand is inspect --pending / --method.
func listCommand(ctx context.Context, stdout, stderr io.Writer, dsn, table string, pending bool, olderThan time.Duration, method string, limit int) int {
	switch {
	case limit < 1 || limit > 100_000:
		return fail(stderr, "inspect", errors.New("--limit must be 1 to 100000"))
	case olderThan < 0:
		return fail(stderr, "inspect", errors.New("--older-than must not be negative"))
	case olderThan > 0 && !pending:
		return fail(stderr, "inspect", errors.New("--older-than goes with --pending"))
	}
	if method != "" {
		if err := txledger.CheckMethod(method); err != nil {
			return fail(stderr, "inspect", err)
		}
	}
	if err := dialectkit.CheckTableName(table); err != nil {
		return fail(stderr, "inspect", err)
	}
	db, t, err := openExisting(ctx, dsnFrom(dsn))
	if err != nil {
		return fail(stderr, "inspect", err)
	}
	defer db.Close()
	now := time.Now()
	ls, err := listEntries(ctx, db, t.dialect, table, now, pending, olderThan, method, limit)
	if err != nil {
		return fail(stderr, "inspect", t.scrubErr(err))
	}
	printListing(stdout, ls, now, limit)
	return 0
}

func orNone(s string) string {
	if s == "" {
		return "(no type)"
	}
	return s
}
