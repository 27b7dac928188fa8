package main

import (
	"context"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/opledger/opledger/ledger"
	"github.com/opledger/opledger/migrations"
)

// newFlags returns a flag set that reports errors instead of exiting.
func newFlags(name string, stderr io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	return fs
}

// fail prints a one-line error and returns exit code 2.
func fail(stderr io.Writer, cmd string, err error) int {
	fmt.Fprintf(stderr, "opledger %s: %s\n", cmd, oneLine(err))
	return 2
}

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
	default:
		fmt.Fprintf(stderr, "opledger migrate: unknown subcommand %q\n%s\n", sub, help)
		return 2
	}
	fs := newFlags("migrate "+sub, stderr)
	dsn := fs.String("dsn", "", "database (default $OPLEDGER_DSN, else the SQLite file opledger.db)")
	table := fs.String("table", ledger.DefaultTable, "ledger table name")
	dialect := fs.String("dialect", "", "dialect to export (export only)")
	dir := fs.String("dir", "", "directory to export into (export only)")
	if err := fs.Parse(args[1:]); err != nil {
		return 2
	}
	if fs.NArg() > 0 {
		return fail(stderr, "migrate", fmt.Errorf("unexpected argument %q", fs.Arg(0)))
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
	db, t, err := openDB(ctx, dsnFrom(*dsn))
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
	batch := fs.Int("batch", 1000, "entries deleted per statement")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	db, t, err := openDB(ctx, dsnFrom(*dsn))
	if err != nil {
		return fail(stderr, "sweep", err)
	}
	defer db.Close()
	l, err := ledger.New(t.dialect, ledger.WithTable(*table))
	if err != nil {
		return fail(stderr, "sweep", err)
	}
	n, err := l.Sweep(ctx, db, *batch)
	if err != nil {
		return fail(stderr, "sweep", err)
	}
	fmt.Fprintf(stdout, "%s: swept %d expired entries from %s\n", t.display, n, *table)
	return 0
}

func runInspect(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := newFlags("inspect", stderr)
	dsn := fs.String("dsn", "", "database (default $OPLEDGER_DSN, else the SQLite file opledger.db)")
	table := fs.String("table", ledger.DefaultTable, "ledger table name")
	caller := fs.String("caller", "", "caller fingerprint")
	method := fs.String("method", "", "method: a full gRPC method, /pkg.Service/Method, or an HTTP route, \"POST /orders/{id}\"")
	key := fs.String("key", "", "idempotency key (hashed before use; never printed)")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	id, err := ledger.NewIdentity(*caller, *method, *key)
	if err != nil {
		return fail(stderr, "inspect", err)
	}
	db, t, err := openDB(ctx, dsnFrom(*dsn))
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

func orNone(s string) string {
	if s == "" {
		return "(no type)"
	}
	return s
}
