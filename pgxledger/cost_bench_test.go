//go:build unix

package pgxledger_test

import (
	"context"
	"syscall"
	"testing"
	"time"

	"github.com/opledger/opledger/internal/testkit/testdb"
)

// BenchmarkPathCost runs every variant of BenchmarkPaths serially, one
// call at a time on a pool of one connection per API, and reports what a
// call costs the client: its allocations and the CPU time of this process
// (cpu-µs/call, user and system; user-µs/call, user only), which leaves
// the server out. Latency (ns/op) is the round trips and the server's
// commit; the kit's own cost against the hand-written SQL is in the
// allocations and, within the CPU figures' noise of a few µs, in the CPU.
//
//	OPLEDGER_TEST_POSTGRES_DSN=… go test -run '^$' -bench BenchmarkPathCost -benchtime 3000x ./pgxledger/
func BenchmarkPathCost(b *testing.B) {
	testdb.Reserve(b, "postgres", 4)
	db := stdlibTarget().Open(b, 1)
	pool := testdb.OpenPgx(b, testdb.PgxConfig(b, "", 1, nil))
	ctx := context.Background()
	var n int64 // unique across the variants, as in BenchmarkPaths
	for _, v := range pathVariants(b) {
		op := v.op(newBenchEnv(b, ctx, db, pool))
		b.Run(v.name, func(b *testing.B) {
			b.ReportAllocs()
			var r0, r1 syscall.Rusage
			if err := syscall.Getrusage(syscall.RUSAGE_SELF, &r0); err != nil {
				b.Fatal(err)
			}
			for b.Loop() {
				n++
				if err := op(n); err != nil {
					b.Fatal(err)
				}
			}
			if err := syscall.Getrusage(syscall.RUSAGE_SELF, &r1); err != nil {
				b.Fatal(err)
			}
			user := time.Duration(r1.Utime.Nano() - r0.Utime.Nano())
			sys := time.Duration(r1.Stime.Nano() - r0.Stime.Nano())
			b.ReportMetric(float64((user+sys).Microseconds())/float64(b.N), "cpu-µs/call")
			b.ReportMetric(float64(user.Microseconds())/float64(b.N), "user-µs/call")
		})
	}
}
