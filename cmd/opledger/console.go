package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"strings"
	"time"

	"github.com/opledger/opledger/internal/dialectkit"
	"github.com/opledger/opledger/ledger"
	"github.com/opledger/opledger/outbox"

	"github.com/opledger/opledger/cmd/opledger/internal/console"
)

func init() {
	extraCommands["console"] = command{"serve a web page over the ledger, the outbox and the window (read-only unless --allow-actions)", runConsole}
}

// consoleTokenEnv is the variable the console's token can be given in.
const consoleTokenEnv = "OPLEDGER_CONSOLE_TOKEN"

// consoleFlags are opledger console's flags.
type consoleFlags struct {
	dsn, table, listen, tokenFile *string
	allowRemote, allowActions     *bool
	window                        *windowFlags
}

func runConsole(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := newFlags("console", stderr)
	f := consoleFlags{
		dsn:          fs.String("dsn", "", "database (default $OPLEDGER_DSN, else the SQLite file opledger.db)"),
		table:        fs.String("table", ledger.DefaultTable, "ledger table name (the outbox is <table>_outbox)"),
		listen:       fs.String("listen", "127.0.0.1:7420", "address to serve on: a loopback address unless --allow-remote (port 0 picks a free one)"),
		allowRemote:  fs.Bool("allow-remote", false, "allow a --listen address that is not loopback (the console has no TLS: put it behind a proxy that has)"),
		allowActions: fs.Bool("allow-actions", false, "enable retrying and discarding dead outbox messages; each action needs the token ($"+consoleTokenEnv+" or --token-file)"),
		tokenFile:    fs.String("token-file", "", "file holding the actions' token (at least 16 bytes; instead of $"+consoleTokenEnv+"; never printed)"),
		window:       &windowFlags{resolve: new(time.Duration(0))},
	}
	f.window.retention = fs.Duration("retention", 24*time.Hour, "the ledger's retention, as the servers' ledger.WithRetention")
	f.window.skew = fs.Duration("clock-skew", -1, "the ledger's clock skew, as the servers' ledger.WithClockSkew (default 1m, or a tenth of --retention when shorter)")
	if code, stop := parseFlags(fs, args, stdout); stop {
		return code
	}
	if fs.NArg() > 0 {
		return fail(stderr, "console", unexpectedArg(fs))
	}
	srv, ln, closeDB, err := newConsole(ctx, f, stderr)
	if err != nil {
		return fail(stderr, "console", err)
	}
	defer closeDB()
	mode := "read-only"
	if *f.allowActions {
		mode = "actions enabled: each needs the token"
	}
	fmt.Fprintf(stdout, "opledger console: http://%s/ (%s); stop with Ctrl-C\n", ln.Addr(), mode)
	hs := &http.Server{Handler: srv, ReadHeaderTimeout: 10 * time.Second, ReadTimeout: 30 * time.Second, WriteTimeout: time.Minute,
		ErrorLog: nil}
	done := make(chan error, 1)
	go func() { done <- hs.Serve(ln) }()
	select {
	case err := <-done:
		return fail(stderr, "console", err)
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	hs.Shutdown(sctx)
	return 0
}

// newConsole checks the flags, opens the database and the listener, and
// returns the console's server.
func newConsole(ctx context.Context, f consoleFlags, stderr io.Writer) (*console.Server, net.Listener, func(), error) {
	if err := dialectkit.CheckTableName(*f.table); err != nil {
		return nil, nil, nil, err
	}
	lw, err := f.window.window()
	if err != nil {
		return nil, nil, nil, err
	}
	loopback, err := loopbackListen(*f.listen)
	if err != nil {
		return nil, nil, nil, err
	}
	if !loopback && !*f.allowRemote {
		return nil, nil, nil, fmt.Errorf("--listen %s is not a loopback address: give --allow-remote too to serve the console beyond this machine", *f.listen)
	}
	token, err := consoleToken(*f.allowActions, *f.tokenFile)
	if err != nil {
		return nil, nil, nil, err
	}
	db, t, err := openExisting(ctx, dsnFrom(*f.dsn))
	if err != nil {
		return nil, nil, nil, err
	}
	ob, err := outbox.New(t.dialect, outbox.WithTable(outbox.TableFor(*f.table)))
	if err != nil {
		db.Close()
		return nil, nil, nil, err
	}
	b := &consoleBackend{db: db, t: t, table: *f.table, q: newLedgerSQL(t.dialect, *f.table), lw: lw, ob: ob}
	srv, err := console.New(console.Config{Backend: b, Token: token, LoopbackOnly: loopback, Scrub: t.scrub,
		Log: slog.New(slog.NewTextHandler(stderr, nil))})
	if err != nil {
		db.Close()
		return nil, nil, nil, err
	}
	ln, err := net.Listen("tcp", *f.listen)
	if err != nil {
		db.Close()
		return nil, nil, nil, err
	}
	return srv, ln, func() { db.Close() }, nil
}

// loopbackListen reports whether addr (host:port) listens on loopback
// only: a loopback IP or localhost. An empty host (every interface) is
// not.
func loopbackListen(addr string) (bool, error) {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false, fmt.Errorf("--listen %q: want host:port: %w", addr, err)
	}
	if strings.EqualFold(host, "localhost") {
		return true, nil
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback(), nil
}

// consoleToken reads the actions' token: nil unless actions are allowed,
// then from --token-file or $OPLEDGER_CONSOLE_TOKEN (one of them), at
// least console.MinTokenLen bytes. Its value is never printed.
func consoleToken(allow bool, file string) ([]byte, error) {
	env, inEnv := os.LookupEnv(consoleTokenEnv)
	if !allow {
		if file != "" {
			return nil, errors.New("--token-file goes with --allow-actions")
		}
		return nil, nil
	}
	var tok string
	switch {
	case file != "" && inEnv:
		return nil, fmt.Errorf("give the token in --token-file or in $%s, not both", consoleTokenEnv)
	case file != "":
		b, err := os.ReadFile(file)
		if err != nil {
			return nil, fmt.Errorf("--token-file: %w", err)
		}
		tok = strings.TrimRight(string(b), "\r\n")
	case inEnv:
		tok = env
	default:
		return nil, fmt.Errorf("--allow-actions needs a token: in $%s or --token-file", consoleTokenEnv)
	}
	if len(tok) < console.MinTokenLen {
		return nil, fmt.Errorf("the token must be at least %d bytes (it is not shown)", console.MinTokenLen)
	}
	return []byte(tok), nil
}
