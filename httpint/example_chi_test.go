package httpint_test

import (
	"log"
	"net/http/httptest"

	"github.com/go-chi/chi/v5"

	"github.com/opledger/opledger/dialects/sqlite"
	"github.com/opledger/opledger/httpint"
	"github.com/opledger/opledger/ledger"
)

// The same middleware in a chi router: chi takes any
// func(http.Handler) http.Handler. The keyed routes are still written in
// ServeMux's pattern syntax, which chi's {name} wildcards share, and are
// matched by the middleware itself, so it works in r.Use before chi has
// routed the request.
func Example_chi() {
	db, cleanup := openExampleDB()
	defer cleanup()
	store, err := ledger.New(sqlite.New())
	if err != nil {
		log.Fatal(err)
	}
	idem, err := httpint.New(db, store, httpint.CallerFromPrincipal(principalOf), []string{"POST /orders"})
	if err != nil {
		log.Fatal(err)
	}
	r := chi.NewRouter()
	r.Use(authenticate, idem.Handler)
	r.Post("/orders", createOrder)
	srv := httptest.NewServer(r)
	defer srv.Close()

	post(srv.URL, "order-1", "book")
	post(srv.URL, "order-1", "book")
	// Output:
	// 201 replayed="" ordered book
	// 201 replayed="true" ordered book
}
