package grpcint_test

import (
	"bytes"
	"context"
	"database/sql"
	"io"
	"net"
	"net/url"
	"os"
	"sync"
	"sync/atomic"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/proto"

	"github.com/opledger/opledger/dialects/postgres"
	"github.com/opledger/opledger/examples/payments/paymentspb"
	"github.com/opledger/opledger/grpcint"
	"github.com/opledger/opledger/internal/testdb"
)

// cutProxy forwards TCP to PostgreSQL. Armed, it forwards the next
// client chunk that contains COMMIT and then cuts that connection in both
// directions: the database gets the COMMIT, the client never gets the
// answer. That is a real commit with an unknown outcome.
type cutProxy struct {
	lis    net.Listener
	target string
	armed  atomic.Bool
	cuts   atomic.Int32
	wg     sync.WaitGroup
}

func newCutProxy(t *testing.T, target string) *cutProxy {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &cutProxy{lis: lis, target: target}
	p.wg.Add(1)
	go p.serve()
	t.Cleanup(func() { lis.Close(); p.wg.Wait() })
	return p
}

func (p *cutProxy) serve() {
	defer p.wg.Done()
	for {
		c, err := p.lis.Accept()
		if err != nil {
			return
		}
		s, err := net.Dial("tcp", p.target)
		if err != nil {
			c.Close()
			continue
		}
		p.wg.Add(2)
		go func() { defer p.wg.Done(); _, _ = io.Copy(c, s); c.Close() }()
		go func() {
			defer p.wg.Done()
			defer s.Close()
			defer c.Close()
			buf := make([]byte, 64<<10)
			for {
				n, err := c.Read(buf)
				if n > 0 {
					if _, werr := s.Write(buf[:n]); werr != nil {
						return
					}
					if bytes.Contains(bytes.ToLower(buf[:n]), []byte("commit")) && p.armed.CompareAndSwap(true, false) {
						p.cuts.Add(1)
						return // the COMMIT went out; its answer never comes back
					}
				}
				if err != nil {
					return
				}
			}
		}()
	}
}

// TestCommitOutcomeUnknown: the connection breaks while COMMIT is in
// flight, through lib/pq and pgx. The server answers UNAVAILABLE with
// COMMIT_OUTCOME_UNKNOWN; the application-owned client
// resolves before doing anything else and gets the committed response;
// the effect exists exactly once.
func TestCommitOutcomeUnknown(t *testing.T) { testCommitOutcomeUnknown(t) }

func testCommitOutcomeUnknown(t *testing.T) {
	dsn := os.Getenv(testdb.EnvPostgres)
	if dsn == "" {
		testdb.Skip(t, testdb.EnvPostgres)
	}
	for _, drv := range []string{"postgres", "pgx"} {
		t.Run(drv, func(t *testing.T) { commitOutcomeUnknown(t, dsn, drv) })
	}
}

func commitOutcomeUnknown(t *testing.T, dsn, driver string) {
	u, err := url.Parse(dsn)
	if err != nil {
		t.Fatal(err)
	}
	proxy := newCutProxy(t, u.Host)
	u.Host = proxy.lis.Addr().String()
	db, err := sql.Open(driver, u.String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	d := postgres.New()
	table, biz := newTables(t, db, d)
	e := serve(t, db, d, table, biz)
	ctx := context.Background()

	// A plain connection sees the server's answer.
	raw := e.conn
	proxy.armed.Store(true)
	_, err = paymentspb.NewPaymentsClient(raw).Transfer(as(ctx, "alice", "cut-1"), transfer("cut-1", 7))
	wantStatus(t, err, codes.Unavailable, grpcint.ReasonOutcomeUnknown)
	if proxy.cuts.Load() != 1 {
		t.Fatalf("proxy cut %d connections, want 1", proxy.cuts.Load())
	}
	var stored paymentspb.TransferReply
	if err := grpcint.Resolve(as(ctx, "alice", ""), raw, paymentspb.TransferMethod, "cut-1", &paymentspb.TransferRequest{}, &stored); err != nil {
		t.Fatalf("resolve after the cut: %v (the COMMIT reached the database)", err)
	}

	// The kit's client resolves on its own.
	client, pc := appClient(t, e.addr)
	proxy.armed.Store(true)
	cctx := metadata.AppendToOutgoingContext(ctx, callerHeader, "alice")
	reply, err := pc.Transfer(cctx, transfer("cut-2", 8))
	if err != nil {
		t.Fatalf("transfer through the application-owned client: %v", err)
	}
	if proxy.cuts.Load() != 2 {
		t.Fatalf("proxy cut %d connections, want 2", proxy.cuts.Load())
	}
	if s := client.Stats(); s.Resolved != 1 {
		t.Errorf("client stats %+v, want one resolved call", s)
	}
	var n int
	var id int64
	if err := db.QueryRowContext(ctx, "SELECT COUNT(*), MIN(id) FROM "+d.QuoteIdent(biz)+" WHERE reference = 'cut-2'").Scan(&n, &id); err != nil {
		t.Fatal(err)
	}
	want := &paymentspb.TransferReply{TransferId: id, FromAccount: "a", ToAccount: "b", AmountCents: 8, Reference: "cut-2"}
	if n != 1 || !proto.Equal(reply, want) {
		t.Errorf("%d rows for cut-2; reply %v, want %v", n, reply, want)
	}
}
