package pgxledger_test

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/opledger/opledger/httpint"
	"github.com/opledger/opledger/ledger"
	"github.com/opledger/opledger/pgxledger"
)

// TestTransactionsForHTTP: httpint on pgx transactions: the handler writes
// through pgxledger.TxFromContext, a herd of one key commits once and the
// rest replay, a resolve finds the answer, and a key never used is not
// found.
func TestTransactionsForHTTP(t *testing.T) {
	e := newEnv(t, 8)
	caller := httpint.CallerFromPrincipal(func(context.Context) (string, bool) { return "alice", true })
	mw, err := httpint.NewFor(pgxledger.Transactions(e.pool, e.s), caller, []string{"POST /items"})
	if err != nil {
		t.Fatal(err)
	}
	h := mw.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		tx, ok := pgxledger.TxFromContext(r.Context())
		if !ok {
			http.Error(w, "no pgx transaction", 500)
			return
		}
		if err := e.writeBiz(r.Context(), tx, "item", 1); err != nil {
			httpint.ReportError(r, err)
			http.Error(w, "db", 500)
			return
		}
		w.WriteHeader(201)
		_, _ = w.Write([]byte("created"))
	}))
	srv := httptest.NewServer(h)
	defer srv.Close()
	do := func(key string, resolve bool) (*http.Response, string) {
		req, _ := http.NewRequest("POST", srv.URL+"/items", strings.NewReader("body"))
		req.Header.Set(httpint.KeyHeader, `"`+key+`"`)
		if resolve {
			req.Header.Set(httpint.ResolveHeader, "1")
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp, string(b)
	}
	var wg sync.WaitGroup
	statuses := make(chan string, 16)
	for range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			resp, body := do("k", false)
			statuses <- resp.Status + " " + body + " " + resp.Header.Get(httpint.ReplayedHeader)
		}()
	}
	wg.Wait()
	close(statuses)
	replayed := 0
	for s := range statuses {
		if !strings.HasPrefix(s, "201 Created created") {
			t.Errorf("answer %q", s)
		}
		if strings.HasSuffix(s, "true") {
			replayed++
		}
	}
	if replayed != 15 || e.bizRows(t, "item") != 1 {
		t.Fatalf("%d replays, %d rows; want 15 and 1", replayed, e.bizRows(t, "item"))
	}
	if resp, body := do("k", true); resp.StatusCode != 201 || body != "created" || resp.Header.Get(httpint.ReplayedHeader) != "true" {
		t.Errorf("resolve: %s %q", resp.Status, body)
	}
	if resp, _ := do("never", true); resp.StatusCode != 404 {
		t.Errorf("resolve of a key never used: %s", resp.Status)
	} else if got := resp.Header.Get("Idempotency-Key-Lifetime"); got != "86340" {
		// The server learns the Store's window (24 h minus the default
		// skew of a minute) through the Transactions.
		t.Errorf("Idempotency-Key-Lifetime %q, want 86340", got)
	}
	if st := mw.Stats(); st.Executed != 1 || st.Replayed != 15 || st.Resolves != 2 {
		t.Errorf("stats %+v", st)
	}
	small, err := pgxledger.New(ledger.WithTable(e.table), ledger.WithMaxResultSize(1024))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := httpint.NewFor(pgxledger.Transactions(e.pool, small), caller, []string{"POST /items"}); !errors.Is(err, httpint.ErrInvalidConfig) {
		t.Errorf("a body limit the ledger cannot store: %v", err)
	}
}
