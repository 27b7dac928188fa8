package keybirth

import (
	"net/http"
	"strings"
	"testing"
	"time"
)

func TestNewCarriesItsBirth(t *testing.T) {
	now := time.Date(2026, 12, 6, 12, 0, 0, 123_456_789, time.UTC)
	seen := map[string]bool{}
	for range 1000 {
		k := New(now)
		if len(k) != KeyLen || seen[k] {
			t.Fatalf("key %q: wrong length or repeated", k)
		}
		seen[k] = true
		b, ok := Birth(k)
		if !ok || !b.Equal(now.Truncate(time.Millisecond)) {
			t.Fatalf("Birth(%q) = %v, %v; want %v", k, b, ok, now.Truncate(time.Millisecond))
		}
		if k[14] != '7' || !strings.ContainsRune("89ab", rune(k[19])) {
			t.Fatalf("key %q lacks the version or variant", k)
		}
	}
}

func TestBirth(t *testing.T) {
	for _, tc := range []struct {
		key string
		ok  bool
		ms  int64
	}{
		{"017f22e2-79b0-7cc3-98c4-dc0c0c07398f", true, 0x017f22e279b0}, // RFC 9562's example
		{"017F22E2-79B0-7CC3-98C4-DC0C0C07398F", true, 0x017f22e279b0},
		{"017f22e2-79b0-4cc3-98c4-dc0c0c07398f", false, 0}, // version 4
		{"017f22e2-79b0-7cc3-c8c4-dc0c0c07398f", false, 0}, // wrong variant
		{"017f22e279b07cc398c4dc0c0c07398f", false, 0},     // no hyphens
		{"017f22e2-79b0-7cc3-98c4-dc0c0c07398", false, 0},
		{"017f22e2-79b0-7cc3-98c4_dc0c0c07398f", false, 0},
		{"017f22e2-79b0-7cc3-98c4-dc0c0c07398g", false, 0},
		{"00000000-0000-7000-8000-000000000000", false, 0}, // no time
		{"01JEKX5N2Y3Z4A5B6C7D8E9F0G", false, 0},           // a ULID is not read
		{"", false, 0},
	} {
		b, ok := Birth(tc.key)
		if ok != tc.ok || (ok && b.UnixMilli() != tc.ms) {
			t.Errorf("Birth(%q) = %v, %v; want ms %d, %v", tc.key, b, ok, tc.ms, tc.ok)
		}
	}
}

func TestParseFirstSent(t *testing.T) {
	want := time.Date(2026, 12, 6, 12, 0, 0, 0, time.UTC)
	got, err := ParseFirstSent("Sun, 06 Dec 2026 12:00:00 GMT")
	if err != nil || !got.Equal(want) {
		t.Fatalf("ParseFirstSent = %v, %v", got, err)
	}
	if FormatFirstSent(want) != "Sun, 06 Dec 2026 12:00:00 GMT" {
		t.Fatalf("FormatFirstSent = %q", FormatFirstSent(want))
	}
	for _, v := range []string{"", "2026-12-06T12:00:00Z", "Sun, 06 Dec 2026 12:00:00 UTC", "Thu, 01 Jan 1970 00:00:00 GMT", "Sun, 06 Dec 2026 12:00:00 GMT ", "Sun, 6 Dec 2026 12:00:00 GMT"} {
		if _, err := ParseFirstSent(v); err != ErrFirstSent {
			t.Errorf("ParseFirstSent(%q) = %v; want ErrFirstSent", v, err)
		}
	}
}

func FuzzBirth(f *testing.F) {
	f.Add("017f22e2-79b0-7cc3-98c4-dc0c0c07398f")
	f.Add(New(time.Now()))
	f.Add("not a uuid")
	f.Fuzz(func(t *testing.T, key string) {
		b, ok := Birth(key)
		if !ok {
			return
		}
		if len(key) != KeyLen || b.UnixMilli() <= 0 {
			t.Fatalf("Birth(%q) = %v for a key that is not a UUIDv7", key, b)
		}
		// The birth is the key's first 48 bits: a key made at that time
		// has the same prefix.
		if got := New(b); !strings.EqualFold(got[:13], key[:13]) {
			t.Fatalf("New(Birth(%q)) = %q: another time prefix", key, got)
		}
	})
}

func FuzzParseFirstSent(f *testing.F) {
	f.Add("Sun, 06 Dec 2026 12:00:00 GMT")
	f.Add("Mon, 02 Jan 2006 15:04:05 GMT")
	f.Add("garbage")
	f.Fuzz(func(t *testing.T, v string) {
		ts, err := ParseFirstSent(v)
		if err != nil {
			return
		}
		if ts.Unix() <= 0 {
			t.Fatalf("ParseFirstSent(%q) = %v, before the epoch", v, ts)
		}
		if again, err := ParseFirstSent(FormatFirstSent(ts)); err != nil || !again.Equal(ts) {
			t.Fatalf("round trip of %q: %v, %v", v, again, err)
		}
	})
}

func TestIMFFixdateIsHTTPTimeFormat(t *testing.T) {
	if imfFixdate != http.TimeFormat {
		t.Fatalf("imfFixdate %q, net/http's TimeFormat %q", imfFixdate, http.TimeFormat)
	}
}
