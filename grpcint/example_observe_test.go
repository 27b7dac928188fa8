package grpcint_test

import (
	"context"
	"database/sql"
	"fmt"
	"log"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"time"

	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"

	"github.com/opledger/opledger/dialects/sqlite"
	"github.com/opledger/opledger/examples/payments"
	"github.com/opledger/opledger/examples/payments/paymentspb"
	"github.com/opledger/opledger/grpcint"
	"github.com/opledger/opledger/ledger"
	"github.com/opledger/opledger/migrations"
	"github.com/opledger/opledger/policy"
)

// The kit's metrics, spans and logs go where the application's
// OpenTelemetry SDK and logger send them: here a manual reader, a tracer
// provider without exporters, and a logger that keeps only warnings.
// Without these options the kit uses the global providers, which do
// nothing until an SDK is installed, and logs nothing.
func Example_telemetry() {
	ctx := context.Background()
	dir, err := os.MkdirTemp("", "grpcint-telemetry")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)
	db, err := sql.Open("sqlite3", sqlite.DSN(filepath.Join(dir, "pay.db"), 5*time.Second))
	if err != nil {
		log.Fatal(err)
	}
	defer db.Close()
	d := sqlite.New()
	m, err := migrations.New(db, d)
	if err != nil {
		log.Fatal(err)
	}
	if _, err := m.Up(ctx); err != nil {
		log.Fatal(err)
	}
	if err := payments.CreateTable(ctx, db, d, payments.DefaultTable); err != nil {
		log.Fatal(err)
	}
	svc, err := payments.NewService(db, d, payments.DefaultTable)
	if err != nil {
		log.Fatal(err)
	}
	cat, err := payments.Catalog()
	if err != nil {
		log.Fatal(err)
	}

	reader := sdkmetric.NewManualReader()
	meters := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	tracers := sdktrace.NewTracerProvider()
	logger := slog.New(slog.NewJSONHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))

	store, err := ledger.New(d, ledger.WithMeterProvider(meters), ledger.WithTracerProvider(tracers))
	if err != nil {
		log.Fatal(err)
	}
	kit, err := grpcint.NewServer(db, store, cat, grpcint.CallerFromTrustedHeader("x-caller"),
		grpcint.WithServerMeterProvider(meters), grpcint.WithServerTracerProvider(tracers), grpcint.WithServerLogger(logger))
	if err != nil {
		log.Fatal(err)
	}
	client, err := grpcint.NewClient(cat, policy.OwnerApplication,
		grpcint.WithClientMeterProvider(meters), grpcint.WithClientTracerProvider(tracers), grpcint.WithClientLogger(logger))
	if err != nil {
		log.Fatal(err)
	}

	srv := grpc.NewServer(grpc.ChainUnaryInterceptor(kit.UnaryServerInterceptor()))
	paymentspb.RegisterPaymentsServer(srv, svc)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		log.Fatal(err)
	}
	go func() { _ = srv.Serve(lis) }()
	defer srv.Stop()
	opts, err := client.DialOptions()
	if err != nil {
		log.Fatal(err)
	}
	conn, err := grpc.NewClient(lis.Addr().String(), append(opts, grpc.WithTransportCredentials(insecure.NewCredentials()))...)
	if err != nil {
		log.Fatal(err)
	}
	defer conn.Close()
	pc := paymentspb.NewPaymentsClient(conn)
	ctx = metadata.AppendToOutgoingContext(ctx, "x-caller", "tenant-a")
	key := grpcint.NewKey()
	req := &paymentspb.TransferRequest{FromAccount: "alice", ToAccount: "bob", AmountCents: 500, Reference: "rent"}
	for range 2 { // the second call replays the first
		if _, err := pc.Transfer(grpcint.WithKey(ctx, key), req); err != nil {
			log.Fatal(err)
		}
	}

	var rm metricdata.ResourceMetrics
	if err := reader.Collect(ctx, &rm); err != nil {
		log.Fatal(err)
	}
	for _, sm := range rm.ScopeMetrics {
		for _, md := range sm.Metrics {
			if md.Name != "opledger.server.calls" {
				continue
			}
			for _, dp := range md.Data.(metricdata.Sum[int64]).DataPoints {
				outcome, _ := dp.Attributes.Value("opledger.outcome")
				fmt.Println(md.Name, outcome.AsString(), dp.Value)
			}
		}
	}
	// Unordered output:
	// opledger.server.calls executed 1
	// opledger.server.calls replayed 1
}
