// Package suggest finds the name a misspelled one was probably meant to
// be, for "did you mean" hints in findings.
package suggest

import "strings"

// maxLen bounds the names compared: longer ones get no suggestion.
const maxLen = 128

// Closest returns the candidate within an edit distance of 2 of s, letter
// case ignored, the nearest first; "" when there is none, or when s or the
// candidate is longer than 128 bytes.
func Closest(s string, candidates []string) string {
	best, bestD := "", 3
	if len(s) > maxLen {
		return ""
	}
	for _, c := range candidates {
		if len(c) > maxLen {
			continue
		}
		if d := editDistance(strings.ToLower(s), strings.ToLower(c)); d < bestD {
			best, bestD = c, d
		}
	}
	return best
}

func editDistance(a, b string) int {
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}
