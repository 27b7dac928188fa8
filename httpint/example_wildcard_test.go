package httpint_test

import (
	"log"
	"net/http"
	"net/http/httptest"

	"github.com/opledger/opledger/dialects/sqlite"
	"github.com/opledger/opledger/httpint"
	"github.com/opledger/opledger/ledger"
)

// A keyed route with a wildcard, in ServeMux's pattern syntax. The
// middleware matches the keyed routes itself, with ServeMux's rules, so
// it wraps the whole router and runs before the router has routed the
// request: any router that takes a func(http.Handler) http.Handler
// middleware works the same way (chi's r.Use, whose {name} wildcards are
// ServeMux's).
func Example_wildcard() {
	db, cleanup := openExampleDB()
	defer cleanup()
	store, err := ledger.New(sqlite.New())
	if err != nil {
		log.Fatal(err)
	}
	idem, err := httpint.New(db, store, httpint.CallerFromPrincipal(principalOf), []string{"POST /shops/{shop}/orders"})
	if err != nil {
		log.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /shops/{shop}/orders", createOrder)
	srv := httptest.NewServer(authenticate(idem.Handler(mux)))
	defer srv.Close()

	post(srv.URL+"/shops/7", "order-1", "book")
	post(srv.URL+"/shops/7", "order-1", "book")
	// Output:
	// 201 replayed="" ordered book
	// 201 replayed="true" ordered book
}
