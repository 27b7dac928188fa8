package keyedcore_test

import (
	"strings"
	"testing"

	"github.com/opledger/opledger/internal/keyedcore"
	"github.com/opledger/opledger/keyed"
)

// TestParseResolve: only 1 and true (any case) make a resolve; any other
// value is a malformed request, refused as request-unreadable, and its
// detail never holds the value.
func TestParseResolve(t *testing.T) {
	for _, tc := range []struct {
		values  []string
		resolve bool
		refused bool
	}{
		{nil, false, false},
		{[]string{}, false, false},
		{[]string{"1"}, true, false},
		{[]string{"true"}, true, false},
		{[]string{"TRUE"}, true, false},
		{[]string{"True"}, true, false},
		{[]string{" 1\t"}, true, false},
		{[]string{"1", "true"}, true, false},
		{[]string{"0"}, false, true},
		{[]string{""}, false, true},
		{[]string{"false"}, false, true},
		{[]string{"yes"}, false, true},
		{[]string{"01"}, false, true},
		{[]string{"1 1"}, false, true},
		{[]string{"1", "0"}, false, true},
		{[]string{"secret-value"}, false, true},
	} {
		resolve, refusal := keyedcore.ParseResolve(tc.values)
		if resolve != tc.resolve || (refusal.Outcome != 0) != tc.refused {
			t.Errorf("ParseResolve(%q) = %v, %v; want resolve %v, refused %v", tc.values, resolve, refusal.Outcome, tc.resolve, tc.refused)
		}
		if tc.refused && refusal.Outcome != keyed.RequestUnreadable {
			t.Errorf("ParseResolve(%q) refused as %v, want %v", tc.values, refusal.Outcome, keyed.RequestUnreadable)
		}
		for _, v := range tc.values {
			if len(v) > 2 && strings.Contains(refusal.Detail, v) {
				t.Errorf("ParseResolve(%q): the detail %q holds the value", tc.values, refusal.Detail)
			}
		}
	}
}
