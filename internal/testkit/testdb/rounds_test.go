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
		o := RoundOrder(r, make([]string, n))
		if !slices.Equal(o, RoundOrder(r, make([]string, n))) {
			t.Fatalf("round %d: two orders differ: %v", r, o)
		}
		checkPermutation(t, r, o, n)
		for j := 1; j < n; j++ {
			pred[[2]int{o[j], o[j-1]}]++
		}
	}
	for k, c := range pred {
		if c > rounds/2 {
			t.Errorf("variant %d follows variant %d in %d of %d rounds", k[0], k[1], c, rounds)
		}
	}
	if o := RoundOrder(0, []string{""}); !slices.Equal(o, []int{0}) {
		t.Errorf("one variant: %v", o)
	}
	if o := RoundOrder(3, nil); len(o) != 0 {
		t.Errorf("no variant: %v", o)
	}
}

// TestRoundOrderGroups checks that the variants of a group run one after
// another in every round, the group at a place and in an order that
// change from round to round, and that variants without a group are
// placed one by one.
func TestRoundOrderGroups(t *testing.T) {
	groups := []string{"", "a", "b", "a", "", "b", "a", "c", ""}
	const rounds = 12
	firsts := map[int]bool{} // the first variant of group a, per round
	places := map[int]bool{} // where group a starts, per round
	for r := range rounds {
		o := RoundOrder(r, groups)
		checkPermutation(t, r, o, len(groups))
		seen := map[string]bool{}
		for j, i := range o {
			g := groups[i]
			if g == "" || (j > 0 && groups[o[j-1]] == g) {
				continue
			}
			if seen[g] {
				t.Fatalf("round %d: %v: group %q is split", r, o, g)
			}
			seen[g] = true
			if g == "a" {
				firsts[i], places[j] = true, true
			}
		}
	}
	if len(firsts) < 2 || len(places) < 2 {
		t.Errorf("group a started with %v at places %v in %d rounds: its order or place never changed", firsts, places, rounds)
	}
}

func checkPermutation(t *testing.T, r int, o []int, n int) {
	t.Helper()
	s := slices.Sorted(slices.Values(o))
	if len(s) != n {
		t.Fatalf("round %d: %v has %d variants, want %d", r, o, len(s), n)
	}
	for i, v := range s {
		if v != i {
			t.Fatalf("round %d: %v is not a permutation of 0..%d", r, o, n-1)
		}
	}
}
