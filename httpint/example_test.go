package httpint_test

import (
	"context"
	"database/sql"
	"fmt"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
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

// post sends one keyed request and prints what came back.
func post(url, key, body string) {
	req, err := http.NewRequest(http.MethodPost, url+"/orders", strings.NewReader(body))
	if err != nil {
		log.Fatal(err)
	}
	field, err := httpint.FormatKey(key) // "\"order-1\"": a structured-field string
	if err != nil {
		log.Fatal(err)
	}
	req.Header.Set(httpint.KeyHeader, field)
	req.Header.Set("X-Caller", "shop-frontend")
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
// GET /orders is not. A retry with the same key replays the stored
// response; the same key with another body is refused with 422.
func Example() {
	db, cleanup := openExampleDB()
	defer cleanup()
	store, err := ledger.New(sqlite.New())
	if err != nil {
		log.Fatal(err)
	}
	idem, err := httpint.New(db, store, httpint.CallerFromTrustedHeader("X-Caller"), []string{"POST /orders"})
	if err != nil {
		log.Fatal(err) // a configuration that cannot work fails here, not on the first request
	}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /orders", createOrder)
	mux.HandleFunc("GET /orders", func(w http.ResponseWriter, r *http.Request) { fmt.Fprintln(w, "not keyed") })
	srv := httptest.NewServer(idem.Handler(mux))
	defer srv.Close()

	post(srv.URL, "order-1", "book")
	post(srv.URL, "order-1", "book")
	post(srv.URL, "order-1", "lamp")
	// Output:
	// 201 replayed="" ordered book
	// 201 replayed="true" ordered book
	// 422 replayed="" {"type":"https://github.com/opledger/opledger/blob/main/docs/http.md#idempotency-key-reused","title":"Idempotency-Key is already used","status":422,"detail":"the Idempotency-Key was already used for a different request"}
}
