package main

import (
	"bufio"
	"bytes"
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	reflectionpb "google.golang.org/grpc/reflection/grpc_reflection_v1"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/descriptorpb"

	"github.com/opledger/opledger/examples/payments/paymentspb"
	"github.com/opledger/opledger/internal/testkit/testdb"
	"github.com/opledger/opledger/keyed"
)

// served is a running "opledger serve", started in-process.
type served struct {
	endpoints map[string]string // the first line's key=value pairs
	token     string
	cancel    context.CancelFunc
	done      chan int      // the exit code
	copied    chan struct{} // closed once stdout is read to its end
	stopped   bool
	mu        sync.Mutex
	rest      bytes.Buffer // stdout after the first line
	stderr    bytes.Buffer
}

// startServe runs serve with args (after "serve --listen 127.0.0.1:0")
// and reads its first line; token is the token the test gives it
// through the environment, "" to read the token file the line names.
func startServe(t *testing.T, token string, args ...string) *served {
	t.Helper()
	t.Setenv(serveTokenEnv, token)
	ctx, cancel := context.WithCancel(context.Background())
	s := &served{endpoints: map[string]string{}, token: token, cancel: cancel, done: make(chan int, 1), copied: make(chan struct{})}
	pr, pw := io.Pipe()
	go func() {
		code := run(ctx, append([]string{"serve", "--listen", "127.0.0.1:0"}, args...), pw, lockedWriter{&s.mu, &s.stderr})
		pw.Close()
		s.done <- code
	}()
	t.Cleanup(func() { s.stop(t) })
	br := bufio.NewReader(pr)
	line, err := br.ReadString('\n')
	if err != nil {
		s.mu.Lock()
		defer s.mu.Unlock()
		t.Fatalf("no first line (%v); stderr: %s", err, s.stderr.String())
	}
	go func() { _, _ = io.Copy(lockedWriter{&s.mu, &s.rest}, br); close(s.copied) }()
	for f := range strings.FieldsSeq(line) {
		k, v, ok := strings.Cut(f, "=")
		if !ok {
			t.Fatalf("first line %q: %q is not key=value", line, f)
		}
		s.endpoints[k] = v
	}
	for _, k := range []string{"grpc", "connect", "http"} {
		if s.endpoints[k] == "" {
			t.Fatalf("first line %q names no %s endpoint", line, k)
		}
	}
	if token == "" {
		b, err := os.ReadFile(s.endpoints["token-file"])
		if err != nil {
			t.Fatalf("first line %q: %v", line, err)
		}
		s.token = strings.TrimSpace(string(b))
	}
	return s
}

// stop interrupts serve (as SIGINT does: its context ends) and waits
// for it; its exit code must be 0.
func (s *served) stop(t *testing.T) {
	t.Helper()
	if s.stopped {
		return
	}
	s.stopped = true
	s.cancel()
	select {
	case code := <-s.done:
		if code != 0 {
			s.mu.Lock()
			defer s.mu.Unlock()
			t.Errorf("serve exited %d; stderr: %s", code, s.stderr.String())
		}
	case <-time.After(30 * time.Second):
		t.Fatal("serve did not stop within 30s of its interrupt")
	}
}

type lockedWriter struct {
	mu *sync.Mutex
	w  io.Writer
}

func (l lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

// answer is one call's answer over any transport: the transfer id, and
// whether it carried the replay marker.
type answer struct {
	id       string
	replayed bool
}

// transport calls Transfer over one of serve's transports, as a client
// in another language would (raw metadata, headers and JSON): key "" is
// no key, resolve asks for the stored answer.
type transport func(t *testing.T, s *served, key, ref string, resolve bool) (answer, error)

func grpcTransfer(t *testing.T, s *served, key, ref string, resolve bool) (answer, error) {
	t.Helper()
	conn, err := grpc.NewClient(s.endpoints["grpc"], grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return answer{}, err // no t.Fatal: checkGracefulStop calls this from a goroutine of its own
	}
	defer conn.Close()
	md := metadata.Pairs("authorization", "Bearer "+s.token, "idempotency-key", key)
	if resolve {
		md.Append("idempotency-resolve", "1")
	}
	ctx, cancel := context.WithTimeout(metadata.NewOutgoingContext(context.Background(), md), 20*time.Second)
	defer cancel()
	var tr metadata.MD
	r, err := paymentspb.NewPaymentsClient(conn).Transfer(ctx, &paymentspb.TransferRequest{FromAccount: "alice", ToAccount: "bob",
		AmountCents: 100, Reference: ref}, grpc.Trailer(&tr))
	if err != nil {
		return answer{}, err
	}
	return answer{id: fmt.Sprint(r.GetTransferId()), replayed: strings.Join(tr.Get("idempotency-replayed"), ",") == "true"}, nil
}

// connectTransfer is the Connect protocol's JSON over HTTP/1.1, as curl
// sends it.
func connectTransfer(t *testing.T, s *served, key, ref string, resolve bool) (answer, error) {
	t.Helper()
	body := fmt.Sprintf(`{"from_account":"alice","to_account":"bob","amount_cents":100,"reference":%q}`, ref)
	h := http.Header{"Content-Type": {"application/json"}, "Idempotency-Key": {key}}
	res, b := post(t, s, s.endpoints["connect"]+paymentspb.TransferMethod, h, body, resolve)
	if res.StatusCode != http.StatusOK {
		return answer{}, fmt.Errorf("%s: %s", res.Status, b)
	}
	var out struct{ TransferID string }
	if err := json.Unmarshal(b, &out); err != nil || out.TransferID == "" {
		t.Fatalf("connect answer %s: %v", b, err)
	}
	return answer{id: out.TransferID, replayed: res.Header.Get("Trailer-Idempotency-Replayed") == "true"}, nil
}

// httpTransfer is POST /transfers, its key a structured-field string.
func httpTransfer(t *testing.T, s *served, key, ref string, resolve bool) (answer, error) {
	t.Helper()
	body := fmt.Sprintf(`{"from_account":"alice","to_account":"bob","amount_cents":100,"reference":%q}`, ref)
	h := http.Header{"Content-Type": {"application/json"}, "Idempotency-Key": {`"` + key + `"`}}
	res, b := post(t, s, s.endpoints["http"]+"/transfers", h, body, resolve)
	if res.StatusCode != http.StatusCreated {
		return answer{}, fmt.Errorf("%s: %s", res.Status, b)
	}
	var out struct {
		TransferID int64 `json:"transfer_id"`
	}
	if err := json.Unmarshal(b, &out); err != nil || out.TransferID == 0 {
		t.Fatalf("HTTP answer %s: %v", b, err)
	}
	return answer{id: fmt.Sprint(out.TransferID), replayed: res.Header.Get("Idempotent-Replayed") == "true"}, nil
}

func post(t *testing.T, s *served, url string, h http.Header, body string, resolve bool) (*http.Response, []byte) {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header = h
	if s.token != "" {
		req.Header.Set("Authorization", "Bearer "+s.token)
	}
	if resolve {
		req.Header.Set("Idempotency-Resolve", "1")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	res, err := http.DefaultClient.Do(req.WithContext(ctx))
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	if err != nil {
		t.Fatal(err)
	}
	return res, b
}

// checkTransports: over each transport a keyed transfer runs once (one
// row in the transfers' table), the retry with its key replays it with
// the marker, a resolve answers the stored transfer, replayed, and a
// resolve of a key never sent finds nothing; a call without the token
// runs nothing.
func checkTransports(t *testing.T, s *served, db *sql.DB, table string) {
	for name, call := range map[string]transport{"grpc": grpcTransfer, "connect": connectTransfer, "http": httpTransfer} {
		t.Run(name, func(t *testing.T) {
			key, ref := keyed.NewKey(), "serve-"+name+"-"+keyed.NewKey()
			first, err := call(t, s, key, ref, false)
			if err != nil || first.replayed {
				t.Fatalf("first call: %+v, %v; want a new transfer", first, err)
			}
			again, err := call(t, s, key, ref, false)
			if err != nil || again != (answer{id: first.id, replayed: true}) {
				t.Fatalf("retry with the same key: %+v, %v; want transfer %s, replayed", again, err, first.id)
			}
			res, err := call(t, s, key, "", true)
			if err != nil || res != (answer{id: first.id, replayed: true}) {
				t.Fatalf("resolve: %+v, %v; want transfer %s, replayed", res, err, first.id)
			}
			if n := countRef(t, db, table, ref); n != 1 {
				t.Fatalf("%d rows for the transfer in %s, want 1", n, table)
			}
			if _, err := call(t, s, keyed.NewKey(), "", true); err == nil || !isNotFound(err) {
				t.Fatalf("resolve of a key never sent: %v; want not found", err)
			}
			unauth := &served{endpoints: s.endpoints, token: "not-the-token"}
			ref2 := ref + "-unauthenticated"
			if _, err := call(t, unauth, keyed.NewKey(), ref2, false); err == nil || !isUnauthenticated(err) {
				t.Fatalf("call with a token serve did not issue: %v; want unauthenticated", err)
			}
			if n := countRef(t, db, table, ref2); n != 0 {
				t.Fatalf("an unauthenticated call wrote %d rows", n)
			}
		})
	}
}

func isNotFound(err error) bool {
	return status.Code(err) == codes.NotFound || strings.HasPrefix(err.Error(), "404 ")
}

func isUnauthenticated(err error) bool {
	return status.Code(err) == codes.Unauthenticated || strings.HasPrefix(err.Error(), "401 ")
}

func countRef(t *testing.T, db *sql.DB, table, ref string) int {
	t.Helper()
	var n int
	q := "SELECT COUNT(*) FROM " + table + " WHERE reference = '" + strings.ReplaceAll(ref, "'", "''") + "'"
	if err := db.QueryRow(q).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// checkReflection: gRPC server reflection lists the Payments service,
// with no token and with the key's header, as grpcurl -H sends it.
func checkReflection(t *testing.T, s *served) {
	t.Helper()
	conn, err := grpc.NewClient(s.endpoints["grpc"], grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	ctx = metadata.AppendToOutgoingContext(ctx, "idempotency-key", keyed.NewKey())
	stream, err := reflectionpb.NewServerReflectionClient(conn).ServerReflectionInfo(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := stream.Send(&reflectionpb.ServerReflectionRequest{MessageRequest: &reflectionpb.ServerReflectionRequest_ListServices{}}); err != nil {
		t.Fatal(err)
	}
	res, err := stream.Recv()
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, svc := range res.GetListServicesResponse().GetService() {
		names = append(names, svc.GetName())
	}
	if !strings.Contains(strings.Join(names, " "), paymentspb.ServiceName) {
		t.Fatalf("reflection lists %v, not %s", names, paymentspb.ServiceName)
	}
	// The protos a client in another language needs to read the kit's
	// errors and its keyed methods: google.rpc's Status and ErrorInfo, and
	// opledger.v1's option.
	for symbol, file := range map[string]string{
		"google.rpc.ErrorInfo": "google/rpc/error_details.proto",
		"google.rpc.Status":    "google/rpc/status.proto",
		"opledger.v1.Keyed":    "opledger/v1/opledger.proto",
		"opledger.v1.keyed":    "opledger/v1/opledger.proto",
	} {
		if got := reflectedFiles(t, stream, symbol); !slices.Contains(got, file) {
			t.Errorf("reflection answers %v for the file of %s, not %s", got, symbol, file)
		}
	}
	_ = stream.CloseSend()
}

// reflectedFiles asks reflection for the file that defines symbol and
// returns the names of the files of its answer.
func reflectedFiles(t *testing.T, stream reflectionpb.ServerReflection_ServerReflectionInfoClient, symbol string) []string {
	t.Helper()
	if err := stream.Send(&reflectionpb.ServerReflectionRequest{
		MessageRequest: &reflectionpb.ServerReflectionRequest_FileContainingSymbol{FileContainingSymbol: symbol}}); err != nil {
		t.Fatal(err)
	}
	res, err := stream.Recv()
	if err != nil {
		t.Fatal(err)
	}
	if e := res.GetErrorResponse(); e != nil {
		t.Fatalf("reflection of %s: %s", symbol, e.GetErrorMessage())
	}
	var names []string
	for _, b := range res.GetFileDescriptorResponse().GetFileDescriptorProto() {
		var fd descriptorpb.FileDescriptorProto
		if err := proto.Unmarshal(b, &fd); err != nil {
			t.Fatal(err)
		}
		names = append(names, fd.GetName())
	}
	return names
}

// TestServe: serve on its default database (a temporary SQLite file)
// and free ports: the first line names the three endpoints and the
// token file; each transport executes a keyed transfer once, replays
// its retry with the marker and resolves it as replayed; reflection
// lists the service; interrupted, it exits 0 and removes its temporary
// directory (the database and the token file).
func TestServe(t *testing.T) {
	t.Setenv("OPLEDGER_DSN", "")
	s := startServe(t, "")
	dir := filepath.Dir(s.endpoints["token-file"])
	if !strings.HasPrefix(filepath.Base(dir), "opledger-serve-") {
		t.Fatalf("token file %s is not in serve's temporary directory", s.endpoints["token-file"])
	}
	if fi, err := os.Stat(s.endpoints["token-file"]); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("token file: %v, %v; want mode 0600", fi, err)
	}
	db, err := sql.Open("sqlite3", filepath.Join(dir, "serve.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	checkTransports(t, s, db, "payments_transfers")
	checkReflection(t, s)
	checkOneIdentity(t, s)
	db.Close()
	s.stop(t)
	<-s.copied
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Fatalf("serve's temporary directory %s is left after the interrupt (%v)", dir, err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if !strings.Contains(s.rest.String(), "SQLite "+filepath.Join(dir, "serve.db")) || strings.Contains(s.rest.String(), s.token) {
		t.Fatalf("the lines after the first should name the database and never the token:\n%s", s.rest.String())
	}
}

// TestServePostgres: serve --dsn on PostgreSQL, the token from
// $OPLEDGER_SERVE_TOKEN, in tables of the test's own.
func TestServePostgres(t *testing.T) {
	dsn := os.Getenv(testdb.EnvPostgres)
	if dsn == "" {
		testdb.Skip(t, testdb.EnvPostgres)
	}
	testdb.Reserve(t, "postgres", 12)
	dsn, secret := withSomePassword(t, dsn)
	n := time.Now().UnixNano() % 1_000_000_000
	table, transfers := fmt.Sprintf("opl_serve_%d", n), fmt.Sprintf("opl_serve_tr_%d", n)
	db, tg, err := openDB(context.Background(), dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() }) // after the drops below
	t.Cleanup(func() {
		runCmd(t, "migrate", "down", "--dsn", dsn, "--table", table)
		dropVersionTable(t, dsn, table)
		if _, err := db.Exec("DROP TABLE IF EXISTS " + tg.dialect.QuoteIdent(transfers)); err != nil {
			t.Logf("clean-up: %v", err)
		}
	})
	s := startServe(t, "a-token-of-the-test", "--dsn", dsn, "--table", table, "--transfers-table", transfers, "--lock-wait", "30s")
	if s.endpoints["token-file"] != "" {
		t.Fatalf("a token file (%s) with the token given in $%s", s.endpoints["token-file"], serveTokenEnv)
	}
	checkTransports(t, s, db, transfers)
	checkReflection(t, s)
	checkOneIdentity(t, s)
	checkGracefulStop(t, s, db, tg, transfers)
	<-s.copied
	s.mu.Lock()
	defer s.mu.Unlock()
	if !strings.Contains(s.rest.String(), " on postgres") || (secret != "" && strings.Contains(s.rest.String()+s.stderr.String(), secret)) {
		t.Fatalf("the output should name the database, never its password (%t):\n%s%s", secret != "", s.rest.String(), s.stderr.String())
	}
}

// withSomePassword returns dsn with a password, and the password: its
// own, else cliSecret when the server lets that in (trust
// authentication ignores it), so that the output can be searched for it.
func withSomePassword(t *testing.T, dsn string) (string, string) {
	t.Helper()
	u, err := url.Parse(dsn)
	if err != nil || u.User == nil {
		t.Fatalf("%s is not a postgres:// URL with a user", testdb.EnvPostgres)
	}
	if p, ok := u.User.Password(); ok {
		return dsn, p
	}
	u.User = url.UserPassword(u.User.Username(), cliSecret)
	db, _, err := openDB(context.Background(), u.String())
	if err != nil {
		return dsn, ""
	}
	db.Close()
	return u.String(), cliSecret
}

// TestServeBadFlags: a usage error exits 2 before anything listens, and
// repeats no credential of its arguments.
func TestServeBadFlags(t *testing.T) {
	t.Setenv("OPLEDGER_DSN", "")
	t.Setenv(serveTokenEnv, "")
	for _, f := range credentialForms() {
		for _, flag := range []string{"--listen", "--table", "--transfers-table", "--token-sha256"} {
			args := []string{"serve", flag, f}
			code, out, errs := runCmd(t, args...)
			if code != 2 || out != "" {
				t.Errorf("%q: exit %d, stdout %q, want 2 and nothing (stderr %q)", args, code, out, errs)
			}
			checkNoSecret(t, args, out, errs)
		}
	}
	for _, args := range [][]string{
		{"serve", "extra"},
		{"serve", "--listen", "nocolon"},
		{"serve", "--listen", "127.0.0.1:65534"},
		{"serve", "--listen", "127.0.0.1:-1"},
		{"serve", "--caller", ""},
		{"serve", "--grace", "-1s"},
		{"serve", "--token-sha256", "abc"},
		{"serve", "--dsn", "nosuch://x"},
		{"serve", "--faults", "2"},
		{"serve", "--faults", "-0.1"},
	} {
		var out, errb bytes.Buffer
		if code := run(context.Background(), args, &out, &errb); code != 2 || out.Len() != 0 {
			t.Errorf("%v: exit %d, stdout %q, want 2 and nothing (stderr %q)", args, code, out.String(), errb.String())
		}
	}
}

// checkOneIdentity: gRPC (grpc-go) and connect serve one method to one
// caller, so a key sent on one replays on the other, both ways.
func checkOneIdentity(t *testing.T, s *served) {
	t.Helper()
	for _, order := range [][2]transport{{grpcTransfer, connectTransfer}, {connectTransfer, grpcTransfer}} {
		key, ref := keyed.NewKey(), "serve-both-"+keyed.NewKey()
		first, err := order[0](t, s, key, ref, false)
		if err != nil || first.replayed {
			t.Fatalf("first call: %+v, %v", first, err)
		}
		again, err := order[1](t, s, key, ref, false)
		if err != nil || again != (answer{id: first.id, replayed: true}) {
			t.Fatalf("the same key on the other transport: %+v, %v; want transfer %s, replayed", again, err, first.id)
		}
	}
}

// checkGracefulStop: a Transfer in flight when serve is interrupted (its
// insert waiting, as PostgreSQL shows, for a lock the test holds on the
// transfers' table) finishes with its answer once the lock is let go,
// although serve stopped accepting connections at the interrupt; then
// serve exits 0.
func checkGracefulStop(t *testing.T, s *served, db *sql.DB, tg target, transfers string) {
	t.Helper()
	ctx := context.Background()
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback() }()
	if _, err := tx.ExecContext(ctx, "LOCK TABLE "+tg.dialect.QuoteIdent(transfers)+" IN EXCLUSIVE MODE"); err != nil {
		t.Fatal(err)
	}
	holder := testdb.SessionID(t, tg.dialect, tx)
	var got answer
	done := make(chan struct{})
	ref := "serve-in-flight-" + keyed.NewKey()
	go func() { got, err = grpcTransfer(t, s, keyed.NewKey(), ref, false); close(done) }()
	testdb.WaitBlocked(t, db, tg.dialect, holder, 1, done)
	s.cancel() // the interrupt
	deadline := time.Now().Add(20 * time.Second)
	for {
		c, derr := net.DialTimeout("tcp", s.endpoints["grpc"], time.Second)
		if derr != nil {
			break // the listener is closed: serve is stopping
		}
		c.Close()
		if time.Now().After(deadline) {
			t.Fatal("serve still accepts connections 20s after its interrupt")
		}
		select {
		case <-done:
			t.Fatalf("the call in flight returned before the lock was let go: %+v, %v", got, err)
		case <-time.After(10 * time.Millisecond):
		}
	}
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
	<-done
	if err != nil || got.id == "" || got.replayed {
		t.Fatalf("the call in flight at the interrupt: %+v, %v; want its new transfer", got, err)
	}
	if n := countRef(t, db, transfers, ref); n != 1 {
		t.Fatalf("%d rows for the call in flight, want 1", n)
	}
	s.stop(t)
}
