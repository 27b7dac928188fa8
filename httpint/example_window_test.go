package httpint_test

import (
	"log"
	"net/http"
	"net/http/httptest"
	"time"

	"github.com/opledger/opledger/dialects/sqlite"
	"github.com/opledger/opledger/httpint"
	"github.com/opledger/opledger/keyed"
	"github.com/opledger/opledger/ledger"
	"github.com/opledger/opledger/policy"
)

// A keyed route with a window of its own, as a grpcint or connectint
// method takes from its catalog: a key of POST /orders is honoured for an
// hour from its birth (the ledger remembers keys for 24 h), less the
// ledger's clock skew of a minute, and only keys that carry their birth
// are taken: a UUIDv7 (keyed.NewKey), or another key with the time its
// request was first sent. Every answer that reached the ledger says the
// route's lifetime in Idempotency-Key-Lifetime: 3540 seconds here.
func Example_routeWindow() {
	db, cleanup := openExampleDB()
	defer cleanup()
	store, err := ledger.New(sqlite.New())
	if err != nil {
		log.Fatal(err)
	}
	idem, err := httpint.New(db, store, httpint.CallerFromPrincipal(principalOf), []string{"POST /orders"},
		httpint.WithRouteWindow("POST /orders", time.Hour, policy.RefuseUnknownBirth))
	if err != nil {
		log.Fatal(err) // a retention longer than the ledger's, for one, fails here
	}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /orders", createOrder)
	srv := httptest.NewServer(authenticate(idem.Handler(mux)))
	defer srv.Close()

	post(srv.URL, keyed.NewKey(), "book")
	post(srv.URL, "order-1", "lamp") // no birth: refused before anything runs
	firstSent := time.Now().Add(-2 * time.Hour).UTC().Format(http.TimeFormat)
	post(srv.URL, "order-2", "pen", "Idempotency-Key-First-Sent", firstSent) // a retry two hours late
	// Output:
	// 201 replayed="" ordered book
	// 400 replayed="" {"type":"https://github.com/opledger/opledger/blob/main/docs/http.md#idempotency-key-invalid","title":"Idempotency-Key is invalid","status":400,"detail":"POST /orders needs a UUIDv7 Idempotency-Key or an Idempotency-Key-First-Sent header: its keys must carry their birth"}
	// 422 replayed="" {"type":"https://github.com/opledger/opledger/blob/main/docs/http.md#idempotency-key-expired","title":"Idempotency-Key has expired","status":422,"detail":"the Idempotency-Key was born before the window of POST /orders (59m0s); whether a call with it ran is not known here; do not run the call again with it"}
}
