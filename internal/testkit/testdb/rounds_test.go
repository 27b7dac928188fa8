package testdb

import (
	"slices"
	"testing"
)

// TestRoundOrder checks that every round runs every variant once, that
// the orders are the same in every run, and that they differ between
// rounds: no variant always follows the same one.
func TestRoundOrder(t *testing.T) {
	const n, rounds = 21, 12
	pred := map[[2]int]int{} // {variant, the one before it} → rounds
	for r := range rounds {
		o := RoundOrder(r, n)
		if !slices.Equal(o, RoundOrder(r, n)) {
			t.Fatalf("round %d: two orders differ: %v", r, o)
		}
		s := slices.Sorted(slices.Values(o))
		for i, v := range s {
			if v != i {
				t.Fatalf("round %d: %v is not a permutation of 0..%d", r, o, n-1)
			}
		}
		for j := 1; j < n; j++ {
			pred[[2]int{o[j], o[j-1]}]++
		}
	}
	for k, c := range pred {
		if c > rounds/2 {
			t.Errorf("variant %d follows variant %d in %d of %d rounds", k[0], k[1], c, rounds)
		}
	}
	if o := RoundOrder(0, 1); !slices.Equal(o, []int{0}) {
		t.Errorf("one variant: %v", o)
	}
	if o := RoundOrder(3, 0); len(o) != 0 {
		t.Errorf("no variant: %v", o)
	}
}
