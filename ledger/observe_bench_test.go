package ledger

import (
	"context"
	"testing"

	"github.com/opledger/opledger/dialects/sqlite"
)

// BenchmarkObserveNoSDK is the telemetry's cost per Claim without an
// SDK (the global providers, no-ops): the span started and ended and the
// instruments' Enabled checks.
//
//	go test -run '^$' -bench BenchmarkObserveNoSDK -benchmem ./ledger/
func BenchmarkObserveNoSDK(b *testing.B) {
	s, err := New(sqlite.New())
	if err != nil {
		b.Fatal(err)
	}
	id, err := NewIdentity("tenant-a", "/pay.v1.Payments/Transfer", "bench-key")
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	c := NewAcquired(id, nil)
	b.ReportAllocs()
	for b.Loop() {
		cctx, op := s.core.obs.begin(ctx, "opledger.claim", id)
		s.core.obs.claimed(cctx, op, id, c, nil)
	}
}
