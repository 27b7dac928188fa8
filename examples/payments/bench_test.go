package payments_test

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/binary"
	"net"
	"strconv"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"

	"github.com/opledger/opledger/dialects"
	"github.com/opledger/opledger/examples/payments"
	"github.com/opledger/opledger/examples/payments/paymentspb"
	"github.com/opledger/opledger/grpcint"
	"github.com/opledger/opledger/internal/testkit/testdb"
	"github.com/opledger/opledger/keyed"
	"github.com/opledger/opledger/ledger"
	"github.com/opledger/opledger/policy"
)

// bareService does the same business write as payments.Service, in a
// transaction of its own, without the kit: the baseline.
type bareService struct {
	paymentspb.PaymentsServer
	db     *sql.DB
	insert string
}

func (s *bareService) Transfer(ctx context.Context, req *paymentspb.TransferRequest) (*paymentspb.TransferReply, error) {
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return nil, err
	}
	defer tx.Rollback()
	var b [8]byte
	_, _ = rand.Read(b[:])
	id := int64(binary.BigEndian.Uint64(b[:]) >> 1)
	if _, err := tx.ExecContext(ctx, s.insert, id, req.GetFromAccount(), req.GetToAccount(), req.GetAmountCents(), req.GetReference()); err != nil {
		return nil, err
	}
	if err := tx.Commit(); err != nil {
		return nil, err
	}
	return &paymentspb.TransferReply{TransferId: id, FromAccount: req.GetFromAccount(), ToAccount: req.GetToAccount(),
		AmountCents: req.GetAmountCents(), Reference: req.GetReference()}, nil
}

func cpuTime() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

func serve(b *testing.B, srv *grpc.Server, owner policy.RetryOwner) paymentspb.PaymentsClient {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	go func() { _ = srv.Serve(lis) }()
	b.Cleanup(srv.Stop)
	opts := []grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials())}
	if owner != 0 {
		cat, _ := payments.Catalog()
		c, err := grpcint.NewClient(cat, owner)
		if err != nil {
			b.Fatal(err)
		}
		kitOpts, err := c.DialOptions()
		if err != nil {
			b.Fatal(err)
		}
		opts = append(opts, kitOpts...)
	}
	conn, err := grpc.NewClient(lis.Addr().String(), opts...)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { conn.Close() })
	return paymentspb.NewPaymentsClient(conn)
}

// BenchmarkTransfer compares, over loopback TCP, a keyed Transfer through
// the kit (claim, insert, complete, one commit) with the same insert in a
// bare transaction and no kit, and a replay of a keyed Transfer. It
// reports the process's CPU time per call (client, server and, for
// SQLite, the database engine).
func BenchmarkTransfer(b *testing.B) {
	for _, tg := range e2eTargets() {
		b.Run(tg.Name, func(b *testing.B) {
			db := tg.Open(b, 4)
			table := testdb.NewTable(b, db, tg.Dialect)
			biz := table + "_transfers"
			ctx := context.Background()
			if err := payments.CreateTable(ctx, db, tg.Dialect, biz); err != nil {
				b.Fatal(err)
			}
			b.Cleanup(func() { _ = payments.DropTable(context.Background(), db, tg.Dialect, biz) })
			svc, err := payments.NewService(db, tg.Dialect, biz)
			if err != nil {
				b.Fatal(err)
			}
			store, _ := ledger.New(tg.Dialect, ledger.WithTable(table))
			cat, _ := payments.Catalog()
			// The benchmark's client is the only one on its loopback
			// port: the cheapest caller function, a header, measures the
			// kit and not an authentication.
			caller := grpcint.CallerFromTrustedHeader(benchCallerHeader)
			kit, err := grpcint.NewServer(db, store, cat, caller)
			if err != nil {
				b.Fatal(err)
			}
			keyedSrv := grpc.NewServer(grpc.ChainUnaryInterceptor(kit.UnaryServerInterceptor()))
			paymentspb.RegisterPaymentsServer(keyedSrv, svc)
			kc := serve(b, keyedSrv, policy.OwnerApplication)

			// The same without the kit's per-transaction lock-wait bound
			// (the database's own setting bounds the wait instead).
			kit0, err := grpcint.NewServer(db, store, cat, caller, keyed.WithLockWait(0))
			if err != nil {
				b.Fatal(err)
			}
			keyed0Srv := grpc.NewServer(grpc.ChainUnaryInterceptor(kit0.UnaryServerInterceptor()))
			paymentspb.RegisterPaymentsServer(keyed0Srv, svc)
			keyed0 := serve(b, keyed0Srv, policy.OwnerApplication)

			bareSrv := grpc.NewServer()
			paymentspb.RegisterPaymentsServer(bareSrv, &bareService{db: db, insert: insertSQL(tg.Dialect, biz)})
			bare := serve(b, bareSrv, 0)

			callerCtx := metadata.AppendToOutgoingContext(ctx, benchCallerHeader, "bench")
			req := func(i int) *paymentspb.TransferRequest {
				return &paymentspb.TransferRequest{FromAccount: "a", ToAccount: "b", AmountCents: int64(i + 1), Reference: "bench-" + strconv.Itoa(i)}
			}
			run := func(b *testing.B, call func(i int) error) {
				b.ReportAllocs()
				c0 := cpuTime()
				b.ResetTimer()
				for i := 0; i < b.N; i++ {
					if err := call(i); err != nil {
						b.Fatal(err)
					}
				}
				b.StopTimer()
				b.ReportMetric(float64((cpuTime()-c0).Microseconds())/float64(b.N), "cpu-µs/op")
			}
			b.Run("bare", func(b *testing.B) {
				run(b, func(i int) error { _, err := bare.Transfer(ctx, req(i)); return err })
			})
			b.Run("keyed", func(b *testing.B) {
				run(b, func(i int) error { _, err := kc.Transfer(callerCtx, req(i)); return err })
			})
			b.Run("keyed-no-lockwait", func(b *testing.B) {
				run(b, func(i int) error {
					_, err := keyed0.Transfer(callerCtx, req(i+b.N+1_000_000))
					return err
				})
			})
			b.Run("replay", func(b *testing.B) {
				rctx := grpcint.WithKey(callerCtx, keyed.NewKey())
				if _, err := kc.Transfer(rctx, req(1_000_000)); err != nil {
					b.Fatal(err)
				}
				run(b, func(int) error { _, err := kc.Transfer(rctx, req(1_000_000)); return err })
			})
		})
	}
}

// benchCallerHeader carries the benchmark's caller.
const benchCallerHeader = "x-bench-caller"

func insertSQL(d dialects.Dialect, table string) string {
	return "INSERT INTO " + d.QuoteIdent(table) + " (id, from_account, to_account, amount_cents, reference) VALUES (" +
		d.Placeholder(1) + ", " + d.Placeholder(2) + ", " + d.Placeholder(3) + ", " + d.Placeholder(4) + ", " + d.Placeholder(5) + ")"
}
