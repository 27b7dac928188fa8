package natsjs

import (
	"errors"
	"regexp"
	"strings"
	"testing"

	"github.com/nats-io/nats.go"
)

// literalSubject is NATS's rule for the subject of a publish, written
// another way: dot-separated tokens, none empty, none with ASCII white
// space, none a wildcard.
var literalSubject = regexp.MustCompile(`^[^ \t\r\n\f\v.]+(\.[^ \t\r\n\f\v.]+)*$`)

func validByRule(s string) bool {
	if !literalSubject.MatchString(s) {
		return false
	}
	for tok := range strings.SplitSeq(s, ".") {
		if tok == "*" || tok == ">" {
			return false
		}
	}
	return true
}

func FuzzCheckSubject(f *testing.F) {
	for _, s := range []string{"", "a", "a.b", "a..b", ".a", "a.", "a b", "a\tb", "a.*", "a.>", ">", "*", "a*b", "a.>b", "é.ü", "a\x00b", "a\nb"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		err := checkSubject(s)
		if (err == nil) != validByRule(s) {
			t.Fatalf("checkSubject(%q) = %v, the rule says valid %v", s, err, validByRule(s))
		}
		if err != nil && !errors.Is(err, nats.ErrBadSubject) {
			t.Fatalf("checkSubject(%q) = %v, want nats.ErrBadSubject", s, err)
		}
	})
}
