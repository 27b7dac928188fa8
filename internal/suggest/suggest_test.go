package suggest

import (
	"strings"
	"testing"
)

func TestClosest(t *testing.T) {
	cands := []string{"retryOn", "attempts", "perTryTimeout"}
	for _, tc := range []struct{ in, want string }{
		{"retryon", "retryOn"}, // case only
		{"atempts", "attempts"},
		{"perTryTimeOut", "perTryTimeout"},
		{"backoff", ""},
		{strings.Repeat("a", 200), ""},
	} {
		if got := Closest(tc.in, cands); got != tc.want {
			t.Errorf("Closest(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}
