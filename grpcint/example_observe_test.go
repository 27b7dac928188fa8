package grpcint_test

import (
	"context"
	"fmt"
	"log"
	"log/slog"
	"os"

	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/opledger/opledger/grpcint"
	"github.com/opledger/opledger/internal/testkit/wallet"
	"github.com/opledger/opledger/internal/testkit/wallet/walletpb"
	"github.com/opledger/opledger/keyed"
	"github.com/opledger/opledger/ledger"
	"github.com/opledger/opledger/policy"
)

// The kit's metrics, spans and logs go where the application's
// OpenTelemetry SDK and logger send them: here a manual reader, a tracer
// provider without exporters, and a logger that keeps only warnings.
// Without these options the kit uses the global providers, which do
// nothing until an SDK is installed, and logs nothing.
func Example_telemetry() {
	ctx := context.Background()
	db, d, svc, cleanup := openWallet(ctx)
	defer cleanup()
	tokens := wallet.NewTokens()
	token, err := tokens.Issue("tenant-a")
	if err != nil {
		log.Fatal(err)
	}
	cat, err := wallet.Catalog()
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
	kit, err := grpcint.NewServer(db, store, cat, grpcint.CallerFromPrincipal(wallet.Principal),
		keyed.WithMeterProvider(meters), keyed.WithTracerProvider(tracers), keyed.WithLogger(logger))
	if err != nil {
		log.Fatal(err)
	}
	client, err := grpcint.NewClient(cat, policy.OwnerApplication,
		keyed.WithMeterProvider(meters), keyed.WithTracerProvider(tracers), keyed.WithLogger(logger))
	if err != nil {
		log.Fatal(err)
	}

	srv := grpc.NewServer(grpc.ChainUnaryInterceptor(tokens.UnaryServerInterceptor(), kit.UnaryServerInterceptor()))
	walletpb.RegisterWalletServer(srv, svc)
	addr, stop := serveExample(srv)
	defer stop()
	opts, err := client.DialOptions()
	if err != nil {
		log.Fatal(err)
	}
	conn, err := grpc.NewClient(addr, append(opts, grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithPerRPCCredentials(wallet.BearerToken(token)))...)
	if err != nil {
		log.Fatal(err)
	}
	defer conn.Close()
	pc := walletpb.NewWalletClient(conn)
	key := keyed.NewKey()
	req := &walletpb.DepositRequest{Account: "alice", Amount: 500, Reference: "rent"}
	for range 2 { // the second call replays the first
		if _, err := pc.Deposit(grpcint.WithKey(ctx, key), req); err != nil {
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
