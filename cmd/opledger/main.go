// Command opledger operates the opledger operation ledger: it migrates the
// ledger's table (and its outbox), sweeps expired entries, inspects
// entries, relays the outbox to NATS JetStream, runs the concurrency
// conformance suite against a database, checks retry ownership in a
// service config, runs a demo (with --chain: a chain of keyed services
// and the outbox), serves the example payments service on gRPC,
// connect and HTTP for clients in any language (serve), and checks a
// deployed keyed endpoint's promises over the wire (probe), and serves an
// operator's web page over the ledger, the outbox and the window
// (console).
//
// Usage:
//
//	opledger <command> [flags]
//
// The database is chosen with --dsn or OPLEDGER_DSN: postgres:// (or
// postgresql://) URLs, mysql:// (or mariadb://) URLs (TiDB behind one is
// detected), tidb:// URLs, the go-sql-driver format
// user:pass@tcp(host:port)/db, sqlite: or file: names, or a plain file
// path for SQLite. Without either, the embedded default is the SQLite file
// opledger.db in the working directory; the commands that read or operate
// a ledger refuse a SQLite file that does not exist (migrate up creates
// it). No output repeats a password or a token, of a DSN or of a NATS
// URL, however it was given. --help exits 0, a usage error 2.
package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/signal"
	"sort"
	"strings"
	"syscall"
)

// command is one subcommand: it gets its own arguments and returns the
// process exit code (0 success, 1 a failed check, 2 usage or set-up error).
// A command without a summary is hidden from the usage text.
type command struct {
	summary string
	run     func(ctx context.Context, args []string, stdout, stderr io.Writer) int
}

func commands() map[string]command {
	cmds := map[string]command{
		"migrate": {"create, remove or show the ledger's table (up, down, status, export)", runMigrate},
		"sweep":   {"delete expired ledger entries in bounded batches", runSweep},
		"inspect": {"show the ledger entry for a caller, method and key", runInspect},
	}
	for name, c := range extraCommands {
		cmds[name] = c
	}
	return cmds
}

// extraCommands is filled by the files that add commands (policy,
// conformance, demo), each in an init function, so that main.go does not
// change when one is added.
var extraCommands = map[string]command{}

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// run runs the command args name. Everything it prints passes through
// an argMasker: no output repeats an argument (or OPLEDGER_DSN) that
// holds a credential unmasked.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	m := newArgMasker(args)
	stdout, stderr = maskingWriter{stdout, m}, maskingWriter{stderr, m}
	cmds := commands()
	if len(args) == 0 {
		usage(stderr, cmds)
		return 2
	}
	switch args[0] {
	case "-h", "-help", "--help", "help":
		if len(args) > 1 {
			if c, ok := cmds[args[1]]; ok {
				// opledger help CMD: CMD's own help.
				return c.run(ctx, []string{"--help"}, stdout, stderr)
			}
			fmt.Fprintf(stderr, "opledger help: unknown command %q\n", maskCredentials(args[1]))
			return 2
		}
		usage(stdout, cmds)
		return 0
	}
	c, ok := cmds[args[0]]
	if !ok {
		fmt.Fprintf(stderr, "opledger: unknown command %q (run opledger help)\n", maskCredentials(args[0]))
		return 2
	}
	return c.run(ctx, args[1:], stdout, stderr)
}

func usage(w io.Writer, cmds map[string]command) {
	names := make([]string, 0, len(cmds))
	for n := range cmds {
		names = append(names, n)
	}
	sort.Strings(names)
	var b strings.Builder
	b.WriteString("usage: opledger <command> [flags]\n\ncommands:\n")
	for _, n := range names {
		if cmds[n].summary == "" {
			continue // a hidden command (chaos-replica)
		}
		fmt.Fprintf(&b, "  %-12s %s\n", n, cmds[n].summary)
	}
	b.WriteString("\nThe database: --dsn or OPLEDGER_DSN (postgres://…, mysql://…, tidb://…, user:pass@tcp(host:port)/db, sqlite:PATH or a file path).\n" +
		"Default: the SQLite file opledger.db in the working directory (migrate, sweep, inspect, stats, evict, relay, console),\n" +
		"or a temporary SQLite file (demo, conformance, serve). chaos runs on throw-away databases unless given --dsn.\n" +
		"stats, inspect, sweep, evict, relay, console, migrate status and down refuse a SQLite file that does not exist (migrate up creates it).\n" +
		"opledger CMD --help (or opledger help CMD) shows a command's flags. Exit codes: 0 success (and help),\n" +
		"1 a failed check, 2 a usage or set-up error. No output repeats a password or token.\n")
	io.WriteString(w, b.String())
}
