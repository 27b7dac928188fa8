package main

import (
	"context"
	"crypto/rand"
	"database/sql"
	"errors"
	"flag"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/grpc"
	"google.golang.org/grpc/reflection"

	"github.com/opledger/opledger/connectint"
	"github.com/opledger/opledger/examples/payments"
	"github.com/opledger/opledger/examples/payments/connectpay"
	"github.com/opledger/opledger/examples/payments/paymentspb"
	"github.com/opledger/opledger/grpcint"
	"github.com/opledger/opledger/httpint"
	"github.com/opledger/opledger/keyed"
	"github.com/opledger/opledger/ledger"
	"github.com/opledger/opledger/migrations"
)

func init() {
	extraCommands["serve"] = command{"serve the example payments service on gRPC (with reflection), connect and HTTP until interrupted, for clients in any language", runServe}
}

// serveTokenEnv holds the bearer token serve accepts, when it is given
// one: the token itself is never on a command line, where ps shows it.
const serveTokenEnv = "OPLEDGER_SERVE_TOKEN"

// defaultServeListen is serve's --listen: gRPC's customary port, connect
// and HTTP on the next two.
const defaultServeListen = "127.0.0.1:50051"

const serveUsage = `usage: opledger serve [--listen HOST:PORT] [--dsn DSN] [--caller NAME] [--token-sha256 HEX]

Serves the example payments service (package examples/payments: the keyed
mutation Transfer, and GetTransfer) behind the kit's keyed servers, for clients
in any language, until interrupted (SIGINT or SIGTERM): then it stops
gracefully (calls in flight finish, within --grace).

Three listeners, one per transport, on HOST (loopback by default):
  gRPC     PORT     grpc-go through grpcint, with server reflection (grpcurl needs no .proto)
  connect  PORT+1   connect-go handlers through connectint, on HTTP/1.1 and h2c: the Connect
                    protocol (JSON or binary), gRPC-Web, and gRPC over h2c (no reflection)
  HTTP     PORT+2   POST /transfers (JSON) through httpint
With port 0 each listener takes a free port. The FIRST line of stdout names
every endpoint, machine-readable, as key=value pairs separated by spaces:
  grpc=HOST:PORT connect=http://HOST:PORT http=http://HOST:PORT [token-file=PATH]
Everything else comes after it.

The database: --dsn or OPLEDGER_DSN (any DSN the other commands take), else a
SQLite file in a temporary directory removed at exit. The ledger's table (--table)
is migrated up at start, as opledger migrate up does; the transfers go to
--transfers-table, created if it does not exist. No output repeats a password.

The caller. The ledger keys every operation by (caller, method, key), and the
caller comes from authentication, never from a name the client sends: every
call must carry exactly one "Authorization: Bearer TOKEN" header (gRPC metadata
"authorization"), of the one token serve accepts, and runs as the caller
--caller names. The token is $OPLEDGER_SERVE_TOKEN, or the token whose SHA-256
(hex) --token-sha256 gives; with neither, serve makes a random token and writes
it to a file (mode 0600) in its temporary directory, named by token-file= on the
first line, removed at exit. A call without the token is UNAUTHENTICATED (gRPC,
connect) or 401 (HTTP), and nothing runs. gRPC reflection needs no token.

A keyed call carries its key: idempotency-key (gRPC metadata) or
Idempotency-Key (connect; on HTTP a structured-field string, in double quotes:
Idempotency-Key: "KEY"); a UUIDv7 key carries its birth. The same key
again replays the stored answer, marked idempotency-replayed: true (gRPC
trailer), Trailer-Idempotency-Replayed: true (the Connect protocol over
HTTP/1.1) or Idempotency-Replayed: true (HTTP). idempotency-resolve: 1 with
the key asks for the stored answer without running anything (404 / NOT_FOUND:
nothing was committed, sending the call again with the key is safe); grpcurl
can send it with -H or -rpc-header. docs/serve.md has the commands.
`

// serveFlags are serve's flags.
type serveFlags struct {
	listen, dsn, table, transfers, caller, tokenSHA string
	lockWait, grace                                 time.Duration
	faults                                          float64 // test only: answers lost after commit
	faultsSeed                                      uint64
}

func defineServeFlags(fs *flag.FlagSet) *serveFlags {
	f := &serveFlags{}
	fs.StringVar(&f.listen, "listen", defaultServeListen, "HOST:PORT: gRPC on PORT, connect on PORT+1, HTTP on PORT+2; port 0: three free ports")
	fs.StringVar(&f.dsn, "dsn", "", "database for the ledger and the transfers (default $OPLEDGER_DSN, else a SQLite file in a temporary directory removed at exit)")
	fs.StringVar(&f.table, "table", ledger.DefaultTable, "the ledger's table, migrated up at start")
	fs.StringVar(&f.transfers, "transfers-table", payments.DefaultTable, "the transfers' table, created if it does not exist")
	fs.StringVar(&f.caller, "caller", "client", "the caller (principal) the token authenticates: the ledger's caller of every call")
	fs.StringVar(&f.tokenSHA, "token-sha256", "", "the hex SHA-256 of the bearer token to accept (default: $"+serveTokenEnv+", else a random token written to token-file)")
	fs.DurationVar(&f.lockWait, "lock-wait", 0, "the claim's lock-wait bound (default 2s, 10s on SQLite)")
	fs.DurationVar(&f.grace, "grace", 10*time.Second, "how long calls in flight may take to finish once interrupted")
	fs.Float64Var(&f.faults, "faults", 0, "for tests of clients only: the probability, 0 to 1, that a call's answer is lost after it committed (UNAVAILABLE / 503, as a proxy that lost it)")
	fs.Uint64Var(&f.faultsSeed, "faults-seed", 0, "the seed of --faults (default random)")
	return f
}

// runServe implements "opledger serve".
func runServe(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := newFlags("serve", stderr)
	fs.Usage = func() {
		io.WriteString(fs.Output(), serveUsage+"\nflags:\n")
		fs.PrintDefaults()
	}
	f := defineServeFlags(fs)
	if code, stop := parseFlags(fs, args, stdout); stop {
		return code
	}
	addrs, err := f.check(fs)
	if err != nil {
		return fail(stderr, "serve", err)
	}
	dir, err := os.MkdirTemp("", "opledger-serve-")
	if err != nil {
		return fail(stderr, "serve", err)
	}
	defer os.RemoveAll(dir)
	tokens, tokenFile, err := serveTokens(dir, f.caller, f.tokenSHA)
	if err != nil {
		return fail(stderr, "serve", err)
	}
	app, err := openServeApp(ctx, f, dir)
	if err != nil {
		return fail(stderr, "serve", err)
	}
	defer app.db.Close()
	var faults *payments.Faults
	if f.faults > 0 {
		faults = payments.NewFaults(payments.FaultSettings{DropAfterCommit: f.faults, Seed: f.faultsSeed})
	}
	srv, err := newServeServers(app, tokens, faults)
	if err != nil {
		return fail(stderr, "serve", err)
	}
	lis, err := listenAll(addrs)
	if err != nil {
		return fail(stderr, "serve", err)
	}
	errc := srv.start(lis)
	printServeBanner(stdout, lis, tokenFile, app, f.caller)
	select {
	case <-ctx.Done():
	case err = <-errc:
	}
	srv.stop(f.grace)
	if err != nil {
		return fail(stderr, "serve", err)
	}
	return 0
}

// check validates f and returns the three listen addresses: gRPC,
// connect, HTTP.
func (f *serveFlags) check(fs *flag.FlagSet) ([3]string, error) {
	var addrs [3]string
	switch {
	case fs.NArg() > 0:
		return addrs, unexpectedArg(fs)
	case f.caller == "":
		return addrs, errors.New("--caller must not be empty")
	case f.lockWait < 0 || f.grace < 0:
		return addrs, errors.New("--lock-wait and --grace must not be negative")
	case !(f.faults >= 0 && f.faults <= 1):
		return addrs, errors.New("--faults must be 0 to 1")
	}
	host, p, err := net.SplitHostPort(f.listen)
	if err != nil {
		return addrs, fmt.Errorf("--listen %q: want HOST:PORT (127.0.0.1:0 for free ports)", maskCredentials(f.listen))
	}
	port, err := strconv.Atoi(p)
	if err != nil || port < 0 || port > 65535-2 {
		return addrs, fmt.Errorf("--listen %q: the port must be 0 to 65533 (gRPC on PORT, connect on PORT+1, HTTP on PORT+2)", maskCredentials(f.listen))
	}
	for i := range addrs {
		q := port
		if q != 0 {
			q += i
		}
		addrs[i] = net.JoinHostPort(host, strconv.Itoa(q))
	}
	return addrs, nil
}

// serveTokens returns the tokens serve accepts, for caller: the one
// whose digest is sha, else $OPLEDGER_SERVE_TOKEN, else a new random one
// written to a file in dir, whose path it returns.
func serveTokens(dir, caller, sha string) (*payments.Tokens, string, error) {
	tokens := payments.NewTokens()
	if sha != "" {
		if err := tokens.Allow(strings.ToLower(sha), caller); err != nil {
			return nil, "", fmt.Errorf("--token-sha256: %w", err)
		}
		return tokens, "", nil
	}
	if tok := os.Getenv(serveTokenEnv); tok != "" {
		if strings.TrimSpace(tok) != tok || strings.ContainsAny(tok, " \t\r\n") {
			return nil, "", errors.New("$" + serveTokenEnv + " must not hold blanks (not repeated here: it is a secret)")
		}
		if err := tokens.Allow(payments.TokenDigest(tok), caller); err != nil {
			return nil, "", err
		}
		return tokens, "", nil
	}
	tok := rand.Text()
	path := filepath.Join(dir, "token")
	if err := os.WriteFile(path, []byte(tok+"\n"), 0o600); err != nil {
		return nil, "", err
	}
	if err := tokens.Allow(payments.TokenDigest(tok), caller); err != nil {
		return nil, "", err
	}
	return tokens, path, nil
}

// serveApp is the service serve runs and its database.
type serveApp struct {
	db       *sql.DB
	t        target
	temp     bool // a SQLite file in serve's temporary directory
	txs      keyed.Transactions
	svc      *payments.Service
	lockWait time.Duration
}

// openServeApp opens the database (migrating the ledger's table up, as
// the demo does, and creating the transfers' table) and builds the
// service on it.
func openServeApp(ctx context.Context, f *serveFlags, dir string) (*serveApp, error) {
	app := &serveApp{lockWait: f.lockWait}
	d := f.dsn
	if d == "" {
		d = os.Getenv("OPLEDGER_DSN")
	}
	if d == "" {
		d, app.temp = "sqlite:"+filepath.Join(dir, "serve.db"), true
	}
	db, t, err := openDB(ctx, d)
	if err != nil {
		return nil, err
	}
	app.db, app.t = db, t
	if app.lockWait == 0 {
		app.lockWait = 2 * time.Second
		if t.sqlitePath != "" {
			app.lockWait = 10 * time.Second // one writer at a time
		}
	}
	if err := app.build(ctx, f.table, f.transfers); err != nil {
		db.Close()
		return nil, err
	}
	return app, nil
}

func (app *serveApp) build(ctx context.Context, table, transfers string) error {
	m, err := migrations.New(app.db, app.t.dialect, migrations.WithTable(table))
	if err != nil {
		return err
	}
	if _, err := m.Up(ctx); err != nil {
		return app.t.scrubErr(err)
	}
	if err := payments.CreateTable(ctx, app.db, app.t.dialect, transfers); err != nil {
		return fmt.Errorf("--transfers-table: %s", app.t.scrub(err.Error()))
	}
	store, err := ledger.New(app.t.dialect, ledger.WithTable(table))
	if err != nil {
		return err
	}
	app.txs = keyed.SQL(app.db, store)
	app.svc, err = payments.NewService(app.db, app.t.dialect, transfers)
	return err
}

// serveServers are serve's three servers.
type serveServers struct {
	grpc          *grpc.Server
	connect, http *http.Server
	served        sync.WaitGroup
}

// newServeServers builds the three servers of app's service, each with
// the tokens in front of the kit's keyed server, as the demo's
// transports are built (examples/payments); faults, when not nil, lose
// answers after commit on every transport.
func newServeServers(app *serveApp, tokens *payments.Tokens, faults *payments.Faults) (*serveServers, error) {
	cat, err := payments.Catalog()
	if err != nil {
		return nil, err
	}
	lw := keyed.WithLockWait(app.lockWait)
	g, err := grpcint.NewServerFor(app.txs, cat, grpcint.CallerFromPrincipal(payments.Principal), lw)
	if err != nil {
		return nil, err
	}
	unary := []grpc.UnaryServerInterceptor{tokens.UnaryServerInterceptor(), g.UnaryServerInterceptor()}
	if faults != nil {
		unary = append([]grpc.UnaryServerInterceptor{faults.UnaryServerInterceptor()}, unary...)
	}
	s := &serveServers{grpc: grpc.NewServer(grpc.ChainUnaryInterceptor(unary...),
		grpc.ChainStreamInterceptor(g.StreamServerInterceptor()))}
	paymentspb.RegisterPaymentsServer(s.grpc, app.svc)
	reflection.Register(s.grpc)
	if err := g.CheckRegistered(s.grpc); err != nil {
		return nil, err
	}
	c, err := connectint.NewServerFor(app.txs, cat, connectint.CallerFromPrincipal(payments.Principal), lw)
	if err != nil {
		return nil, err
	}
	ics := []connect.Interceptor{connectpay.Authenticate(tokens), c.Interceptor()}
	if faults != nil {
		ics = append([]connect.Interceptor{connectpay.ServerFaults(faults)}, ics...)
	}
	path, h := connectpay.NewHandler(app.svc, connect.WithInterceptors(ics...))
	mux := http.NewServeMux()
	mux.Handle(path, h)
	s.connect = connectpay.NewHTTPServer(mux)
	mw, err := httpint.NewFor(app.txs, httpint.CallerFromPrincipal(payments.Principal), []string{payments.TransferRoute}, lw)
	if err != nil {
		return nil, err
	}
	var hh http.Handler = tokens.HTTPMiddleware(mw.Handler(app.svc.HTTPHandler()))
	if faults != nil {
		hh = faults.HTTPMiddleware(hh)
	}
	s.http = &http.Server{Handler: hh,
		ReadHeaderTimeout: 10 * time.Second, ErrorLog: log.New(io.Discard, "", 0)}
	return s, nil
}

// listenAll listens on the three addresses, or on none.
func listenAll(addrs [3]string) ([3]net.Listener, error) {
	var lis [3]net.Listener
	for i, a := range addrs {
		l, err := net.Listen("tcp", a)
		if err != nil {
			for _, o := range lis[:i] {
				o.Close()
			}
			return lis, fmt.Errorf("--listen: %w", err)
		}
		lis[i] = l
	}
	return lis, nil
}

// start serves the three listeners (gRPC, connect, HTTP); the channel
// gets the first error that stops one before stop is called.
func (s *serveServers) start(lis [3]net.Listener) <-chan error {
	errc := make(chan error, 3)
	s.served.Go(func() {
		if err := s.grpc.Serve(lis[0]); err != nil {
			errc <- fmt.Errorf("gRPC: %w", err)
		}
	})
	for i, h := range []*http.Server{s.connect, s.http} {
		s.served.Go(func() {
			if err := h.Serve(lis[i+1]); !errors.Is(err, http.ErrServerClosed) {
				errc <- fmt.Errorf("%s: %w", [2]string{"connect", "HTTP"}[i], err)
			}
		})
	}
	return errc
}

// stop stops the servers gracefully: no new calls, and the calls in
// flight finish within grace; then whatever is left is cut.
func (s *serveServers) stop(grace time.Duration) {
	ctx, cancel := context.WithTimeout(context.Background(), grace)
	defer cancel()
	var wg sync.WaitGroup
	wg.Go(func() {
		done := make(chan struct{})
		go func() { s.grpc.GracefulStop(); close(done) }()
		select {
		case <-done:
		case <-ctx.Done():
			s.grpc.Stop()
			<-done
		}
	})
	for _, h := range []*http.Server{s.connect, s.http} {
		wg.Go(func() {
			if h.Shutdown(ctx) != nil {
				h.Close()
			}
		})
	}
	wg.Wait()
	s.served.Wait()
}

// serveEndpoints is serve's first line: every endpoint, as key=value
// pairs.
func serveEndpoints(lis [3]net.Listener, tokenFile string) string {
	line := fmt.Sprintf("grpc=%s connect=http://%s http=http://%s", lis[0].Addr(), lis[1].Addr(), lis[2].Addr())
	if tokenFile != "" {
		line += " token-file=" + tokenFile
	}
	return line
}

// printServeBanner prints the endpoints line, then how to call them.
func printServeBanner(w io.Writer, lis [3]net.Listener, tokenFile string, app *serveApp, caller string) {
	var b strings.Builder
	fmt.Fprintln(&b, serveEndpoints(lis, tokenFile))
	db := app.t.display
	if app.temp {
		db = "SQLite " + app.t.sqlitePath + " (temporary, removed at exit)"
	}
	fmt.Fprintf(&b, "opledger serve: %s (Transfer keyed) on %s\n", paymentspb.ServiceName, maskCredentials(db))
	token := "$" + serveTokenEnv
	if tokenFile != "" {
		token = "$(cat " + tokenFile + ")"
	}
	fmt.Fprintf(&b, "caller %q: every call sends \"Authorization: Bearer TOKEN\", TOKEN=%s\n", caller, token)
	body := `'{"from_account":"alice","to_account":"bob","amount_cents":100,"reference":"r1"}'`
	fmt.Fprintf(&b, "  grpcurl -plaintext -H \"authorization: Bearer $TOKEN\" -rpc-header \"idempotency-key: $KEY\" -d %s %s %s\n",
		body, lis[0].Addr(), strings.TrimPrefix(paymentspb.TransferMethod, "/"))
	fmt.Fprintf(&b, "  curl -i -H \"Authorization: Bearer $TOKEN\" -H \"Idempotency-Key: $KEY\" -H 'Content-Type: application/json' -d %s http://%s%s\n",
		body, lis[1].Addr(), paymentspb.TransferMethod)
	fmt.Fprintf(&b, "  curl -i -H \"Authorization: Bearer $TOKEN\" -H \"Idempotency-Key: \\\"$KEY\\\"\" -H 'Content-Type: application/json' -d %s http://%s/transfers\n",
		body, lis[2].Addr())
	fmt.Fprintln(&b, "the same key again replays; idempotency-resolve: 1 asks for the stored answer without running anything (grpcurl: -H or -rpc-header). Interrupt to stop.")
	if ip := net.ParseIP(hostOf(lis[0].Addr())); ip != nil && !ip.IsLoopback() {
		fmt.Fprintln(&b, "warning: listening beyond loopback, without TLS: the bearer token crosses the network in clear")
	}
	io.WriteString(w, b.String())
}

func hostOf(a net.Addr) string {
	h, _, _ := net.SplitHostPort(a.String())
	return h
}
