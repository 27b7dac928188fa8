package policy

import (
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"
)

// FuzzParsePushback: any trailer value either is a non-negative 32-bit
// integer of milliseconds, given once, and becomes exactly that delay, or
// means "stop" (ErrPushbackStop); never a panic, never a negative delay.
func FuzzParsePushback(f *testing.F) {
	for _, s := range []string{"0", "200", "-1", "2147483647", "2147483648", "1e3", " 5", "", "abc", "007"} {
		f.Add(s, false)
	}
	f.Add("100", true)
	f.Fuzz(func(t *testing.T, v string, twice bool) {
		values := []string{v}
		if twice {
			values = append(values, v)
		}
		d, ok, err := parsePushback(values)
		if err != nil {
			if !errors.Is(err, ErrPushbackStop) || ok || d != 0 {
				t.Fatalf("parsePushback(%q) = %v, %v, %v: an error must be ErrPushbackStop with no delay", values, d, ok, err)
			}
			if len(err.Error()) > 512 {
				t.Fatalf("error of %d bytes echoes the value unbounded", len(err.Error()))
			}
			return
		}
		ms, perr := strconv.ParseInt(v, 10, 32)
		if twice || perr != nil || ms < 0 || !ok || d != time.Duration(ms)*time.Millisecond || strings.TrimSpace(v) != v {
			t.Fatalf("parsePushback(%q) = %v, %v, nil", values, d, ok)
		}
	})
}
