package testdb

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// RoundVariant is one variant of a rounds benchmark: Op runs the n-th
// operation (n is unique across all variants and rounds). Variants of one
// Group (not "") run one after another in every round, so that the ratios
// between them, the ones a benchmark is about, are taken between runs
// seconds apart: on a noisy machine a ratio's noise grows with the time
// between its two runs (docs/benchmarks.md, "The method").
type RoundVariant struct {
	Name  string
	Op    func(n int64) error
	Group string
}

// Rounds measures the throughput of each variant alone, workers
// goroutines running its operation for per, one variant after another,
// rounds times. Each round runs the variants in an order of its own (a
// pseudo-random permutation that keeps each Group together, the same in
// every run: RoundOrder), so that a drift of the machine or of the
// database (a growing table) is spread over all of them, no variant
// always follows the same one (and meets the writes it left to flush),
// and no variant meets a periodic event of the database (a checkpoint
// every few minutes) at the same point of every round. It returns the
// operations per second of every variant in every round: tput[i][r] is
// variant i in round r. With go test -v it logs every round's figures.
//
// This is how the pgbench figures of docs/benchmarks.md are taken (the
// variants' scripts run alone, rounds interleaved): each variant's
// throughput is its own, and ratios are taken within a round, between
// runs seconds apart, which on a noisy machine is what makes them
// comparable.
func Rounds(b *testing.B, rounds, workers int, per time.Duration, variants []RoundVariant) [][]float64 {
	b.Helper()
	tput := make([][]float64, len(variants))
	var seq atomic.Int64
	for r := range rounds {
		groups := make([]string, len(variants))
		for i, v := range variants {
			groups[i] = v.Group
		}
		order := RoundOrder(r, groups)
		var log strings.Builder
		for _, i := range order {
			v := variants[i]
			var ops atomic.Int64
			var failed atomic.Bool
			var wg sync.WaitGroup
			start := time.Now()
			deadline := start.Add(per)
			for range workers {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for !failed.Load() && time.Now().Before(deadline) {
						if err := v.Op(seq.Add(1)); err != nil {
							if !failed.Swap(true) {
								b.Errorf("%s: %v", v.Name, err)
							}
							return
						}
						ops.Add(1)
					}
				}()
			}
			wg.Wait()
			if failed.Load() {
				return tput
			}
			tput[i] = append(tput[i], float64(ops.Load())/time.Since(start).Seconds())
			fmt.Fprintf(&log, "\n  %s %-20s %8.0f ops/s", start.UTC().Format("15:04:05.0"), v.Name, tput[i][r])
		}
		if testing.Verbose() {
			b.Logf("round %d:%s", r+1, log.String())
		}
	}
	return tput
}

// RoundOrder is the order in which Rounds runs variants of groups (one
// group per variant, "" for a group of its own) in round r (0 based): the
// groups in a pseudo-random order, and within each group its variants in
// one, all drawn from a generator seeded with r, so that every run of a
// benchmark uses the same orders. The variants of a group are contiguous.
func RoundOrder(r int, groups []string) []int {
	rng := rand.New(rand.NewPCG(uint64(r), 0x6f706c6564676572))
	var blocks [][]int // the variants of each group, in first-seen order
	at := map[string]int{}
	for i, g := range groups {
		if j, ok := at[g]; ok && g != "" {
			blocks[j] = append(blocks[j], i)
			continue
		}
		at[g] = len(blocks)
		blocks = append(blocks, []int{i})
	}
	rng.Shuffle(len(blocks), func(i, j int) { blocks[i], blocks[j] = blocks[j], blocks[i] })
	order := make([]int, 0, len(groups))
	for _, bl := range blocks {
		rng.Shuffle(len(bl), func(i, j int) { bl[i], bl[j] = bl[j], bl[i] })
		order = append(order, bl...)
	}
	return order
}

// ReportRounds reports, for every variant, its median operations per
// second ("ops/s-<name>") and the median over the rounds of its
// throughput relative to variant base in the same round ("x-<name>");
// and, for every pair {a, b} of names, the median of a's throughput over
// b's in the same round ("<a>/<b>").
func ReportRounds(b *testing.B, variants []RoundVariant, tput [][]float64, base int, pairs ...[2]string) {
	b.Helper()
	index := func(name string) int {
		for i, v := range variants {
			if v.Name == name {
				return i
			}
		}
		b.Fatalf("no variant %q", name)
		return -1
	}
	ratio := func(a, c int) float64 {
		var q []float64
		for r := range min(len(tput[a]), len(tput[c])) {
			if tput[c][r] > 0 {
				q = append(q, tput[a][r]/tput[c][r])
			}
		}
		return Median(q)
	}
	for i, v := range variants {
		b.ReportMetric(Median(tput[i]), "ops/s-"+v.Name)
		if i != base {
			b.ReportMetric(ratio(i, base), "x-"+v.Name)
		}
	}
	for _, p := range pairs {
		b.ReportMetric(ratio(index(p[0]), index(p[1])), p[0]+"/"+p[1])
	}
}

// Median is the median of xs (the mean of the two middle values for an
// even count; 0 for none). xs is not modified.
func Median(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	n := len(s)
	if n%2 == 0 {
		return (s[n/2-1] + s[n/2]) / 2
	}
	return s[n/2]
}
