package policy

import (
	"math/rand/v2"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
)

func BenchmarkBudget(b *testing.B) {
	bud, err := NewBudget(BudgetSettings{})
	if err != nil {
		b.Fatal(err)
	}
	b.Run("Deposit", func(b *testing.B) {
		b.ReportAllocs()
		for i := 0; i < b.N; i++ {
			bud.Deposit()
		}
	})
	b.Run("TryWithdraw", func(b *testing.B) {
		b.ReportAllocs()
		for i := 0; i < b.N; i++ {
			bud.TryWithdraw()
		}
	})
	fixed := time.Now()
	fb, err := NewBudget(BudgetSettings{Now: func() time.Time { return fixed }})
	if err != nil {
		b.Fatal(err)
	}
	b.Run("Deposit+TryWithdraw/fixed-clock", func(b *testing.B) {
		b.ReportAllocs()
		for i := 0; i < b.N; i++ {
			fb.Deposit()
			fb.TryWithdraw()
		}
	})
	b.Run("Deposit+TryWithdraw", func(b *testing.B) {
		b.ReportAllocs()
		for i := 0; i < b.N; i++ {
			bud.Deposit()
			bud.TryWithdraw()
		}
	})
	b.Run("Deposit+TryWithdraw/parallel", func(b *testing.B) {
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				bud.Deposit()
				bud.TryWithdraw()
			}
		})
	})
}

func BenchmarkEligible(b *testing.B) {
	p := MethodPolicy{FullMethod: "/shop.v1.Orders/Create", Kind: KindKeyed, DurableLedger: true}
	ev := Evidence{Sent: true, HasKey: true}
	b.ReportAllocs()
	for i := 0; i < b.N; i++ {
		Eligible(p, ev, codes.Code(i%17))
	}
}

func BenchmarkBackoffDelay(b *testing.B) {
	r := rand.New(rand.NewPCG(1, 2))
	bo := Backoff{Random: r.Float64}
	b.ReportAllocs()
	for i := 0; i < b.N; i++ {
		bo.Delay(i%8 + 1)
	}
}
