package chaos

import (
	"strings"
	"testing"
)

// TestGivenDBAddress: the replicas reach a database given by DSN through
// the run's proxy when it is on loopback, and directly otherwise.
func TestGivenDBAddress(t *testing.T) {
	t.Parallel()
	for dsn, want := range map[string]string{
		"postgres://u@127.0.0.1:5432/db?sslmode=disable": "127.0.0.1:5432",
		"mysql://root@localhost:3306/test":               "localhost:3306",
		"root@tcp(127.0.0.1:3306)/test":                  "127.0.0.1:3306",
		"postgres://u@db.internal:5432/db":               "", // not loopback: no proxy
		"sqlite:/tmp/x.db":                               "",
	} {
		g := newGivenDB(dsn, "a given database")
		if got := strings.Join(g.addrs(), ","); got != want {
			t.Errorf("%s: addrs %q, want %q", dsn, got, want)
		}
		if want != "" && g.replicaDSN([]string{"127.0.0.1:9"}) == dsn {
			t.Errorf("%s: the replicas' DSN does not go through the proxy", dsn)
		}
	}
}
