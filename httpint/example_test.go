package httpint_test

import (
	"context"
	"database/sql"
	"fmt"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"time"

	_ "github.com/mattn/go-sqlite3"

	"github.com/opledger/opledger/dialects/sqlite"
	"github.com/opledger/opledger/httpint"
	"github.com/opledger/opledger/ledger"
	"github.com/opledger/opledger/migrations"
	"github.com/opledger/opledger/txmiddleware"
)

// openExampleDB opens a SQLite file in a temporary directory with the
// ledger's table and an orders table; cleanup removes it.
func openExampleDB() (db *sql.DB, cleanup func()) {
	ctx := context.Background()
	dir, err := os.MkdirTemp("", "httpint-example")
	if err != nil {
		log.Fatal(err)
	}
	db, err = sql.Open("sqlite3", sqlite.DSN(filepath.Join(dir, "shop.db"), 5*time.Second))
	if err != nil {
		log.Fatal(err)
	}
	m, err := migrations.New(db, sqlite.New())
	if err != nil {
		log.Fatal(err)
	}
	if _, err := m.Up(ctx); err != nil {
		log.Fatal(err)
	}
	if _, err := db.ExecContext(ctx, "CREATE TABLE orders (item TEXT NOT NULL)"); err != nil {
		log.Fatal(err)
	}
	return db, func() { db.Close(); os.RemoveAll(dir) }
}

// createOrder is a keyed route's handler: it writes through the
// transaction that holds the ledger claim, which it finds in the
// request's context.
func createOrder(w http.ResponseWriter, r *http.Request) {
	tx, ok := txmiddleware.TxFromContext(r.Context())
	if !ok {
		http.Error(w, "not behind the idempotency middleware", http.StatusInternalServerError)
		return
	}
	item, _ := io.ReadAll(r.Body)
	if _, err := tx.ExecContext(r.Context(), "INSERT INTO orders (item) VALUES (?)", string(item)); err != nil {
		httpint.ReportError(r, err) // a serialization failure runs the handler again
		http.Error(w, "database error", http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/plain")
	w.Header().Set("Location", "/orders/1")
	w.WriteHeader(http.StatusCreated)
	fmt.Fprintf(w, "ordered %s\n", item)
}

// tokens stands for the service's authentication: the bearer tokens it
// issued, and the principal each was issued to.
var tokens = map[string]string{"token-of-the-shop-frontend": "shop-frontend"}

type principalKey struct{}

// authenticate is the service's authentication middleware, in front of
// the idempotency middleware: a request without a token the service
// issued is refused; any other goes on with the token's principal in its
// context.
func authenticate(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		token, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
		principal, known := tokens[token]
		if !ok || !known {
			http.Error(w, "unauthenticated", http.StatusUnauthorized)
			return
		}
		next.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), principalKey{}, principal)))
	})
}

// principalOf returns the principal authenticate found: what
// httpint.CallerFromPrincipal takes.
func principalOf(ctx context.Context) (string, bool) {
	p, ok := ctx.Value(principalKey{}).(string)
	return p, ok
}

// post sends one keyed request as the shop frontend, with the header
// fields in pairs of name and value, and prints what came back.
func post(url, key, body string, header ...string) {
	req, err := http.NewRequest(http.MethodPost, url+"/orders", strings.NewReader(body))
	if err != nil {
		log.Fatal(err)
	}
	field, err := httpint.FormatKey(key) // "\"order-1\"": a structured-field string
	if err != nil {
		log.Fatal(err)
	}
	req.Header.Set(httpint.KeyHeader, field)
	req.Header.Set("Authorization", "Bearer token-of-the-shop-frontend")
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		log.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	fmt.Printf("%d replayed=%q %s", resp.StatusCode, resp.Header.Get(httpint.ReplayedHeader), b)
	if resp.Header.Get("Content-Type") == httpint.ProblemContentType {
		fmt.Println()
	}
}

// The middleware in front of net/http's ServeMux: POST /orders is keyed,
// GET /orders is not. The caller is the principal the service's
// authentication middleware, in front of this one, found; never a name
// the client sends. A retry with the same key replays the stored
// response; the same key with another body is refused with 422.
func Example() {
	db, cleanup := openExampleDB()
	defer cleanup()
	store, err := ledger.New(sqlite.New())
	if err != nil {
		log.Fatal(err)
	}
	idem, err := httpint.New(db, store, httpint.CallerFromPrincipal(principalOf), []string{"POST /orders"})
	if err != nil {
		log.Fatal(err) // a configuration that cannot work fails here, not on the first request
	}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /orders", createOrder)
	mux.HandleFunc("GET /orders", func(w http.ResponseWriter, r *http.Request) { fmt.Fprintln(w, "not keyed") })
	srv := httptest.NewServer(authenticate(idem.Handler(mux)))
	defer srv.Close()

	post(srv.URL, "order-1", "book")
	post(srv.URL, "order-1", "book")
	post(srv.URL, "order-1", "lamp")
	// Output:
	// 201 replayed="" ordered book
	// 201 replayed="true" ordered book
	// 422 replayed="" {"type":"https://github.com/opledger/opledger/blob/main/docs/http.md#idempotency-key-reused","title":"Idempotency-Key is already used","status":422,"detail":"the Idempotency-Key was already used for a different request"}
}

// Behind a gateway that authenticates every client: the gateway removes
// whatever X-Caller header the client sent and sets its own, from the
// principal it authenticated, and the service takes the caller from that
// header. This is safe only because no request reaches the service except
// through the gateway (in production: the service listens on a private
// network, or takes only the gateway's mTLS certificate). A service that a
// client can reach directly must never use CallerFromTrustedHeader: any
// client could name any caller, read another tenant's stored responses
// and burn its keys.
func Example_trustedGateway() {
	db, cleanup := openExampleDB()
	defer cleanup()
	store, err := ledger.New(sqlite.New())
	if err != nil {
		log.Fatal(err)
	}
	// The service, reachable only by the gateway.
	idem, err := httpint.New(db, store, httpint.CallerFromTrustedHeader("X-Caller"), []string{"POST /orders"})
	if err != nil {
		log.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /orders", createOrder)
	service := httptest.NewServer(idem.Handler(mux))
	defer service.Close()

	// The gateway: authenticates, strips the client's X-Caller, sets its own.
	target, err := url.Parse(service.URL)
	if err != nil {
		log.Fatal(err)
	}
	gateway := &httputil.ReverseProxy{Rewrite: func(r *httputil.ProxyRequest) {
		r.SetURL(target)
		r.Out.Header.Del("X-Caller") // never pass on what the client sent
		if principal, ok := principalOf(r.In.Context()); ok {
			r.Out.Header.Set("X-Caller", principal)
		}
	}}
	front := httptest.NewServer(authenticate(gateway))
	defer front.Close()

	post(front.URL, "order-1", "book")
	post(front.URL, "order-1", "book")
	post(front.URL, "order-1", "book", "X-Caller", "another-tenant") // still the shop frontend's operation
	// Output:
	// 201 replayed="" ordered book
	// 201 replayed="true" ordered book
	// 201 replayed="true" ordered book
}
