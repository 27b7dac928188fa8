package console

import (
	"strings"
	"testing"
	"unicode"
	"unicode/utf8"
)

// FuzzVisible: whatever a database holds, visible returns valid UTF-8
// without a control, line-separator or bidi-control character, and at
// most maxShown characters of it (plus the note that counts the rest).
func FuzzVisible(f *testing.F) {
	for _, s := range []string{"", "tenant-a", "<script>window.pwned=1</script>", "a\x1b[31mb\x00c\u2028d\u202ee", "\xff\xfe", strings.Repeat("é", 500)} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		v := visible(s)
		if !utf8.ValidString(v) {
			t.Fatalf("visible(%q) = %q: invalid UTF-8", s, v)
		}
		for _, r := range v {
			if unicode.IsControl(r) || r == '\u2028' || r == '\u2029' || unicode.Is(unicode.Bidi_Control, r) {
				t.Fatalf("visible(%q) = %q holds %U", s, v, r)
			}
		}
		shown, _, cut := strings.Cut(v, "… (")
		if cut && utf8.RuneCountInString(shown) > 4*maxShown || !cut && utf8.RuneCountInString(s) > maxShown {
			t.Fatalf("visible(%q) = %q: not cut at %d characters", s, v, maxShown)
		}
		if utf8.ValidString(s) && utf8.RuneCountInString(s) <= maxShown && !strings.ContainsFunc(s, func(r rune) bool {
			return unicode.IsControl(r) || r == '\u2028' || r == '\u2029' || unicode.Is(unicode.Bidi_Control, r)
		}) && v != s {
			t.Fatalf("visible(%q) = %q: changed a plain value", s, v)
		}
	})
}

func TestLoopbackHost(t *testing.T) {
	for host, want := range map[string]bool{"127.0.0.1:7420": true, "localhost:7420": true, "LOCALHOST": true, "[::1]:7420": true, "127.1.2.3": true,
		"evil.example:7420": false, "10.0.0.5:7420": false, "": false, "localhost.evil.example": false, "[::ffff:10.0.0.1]:1": false} {
		if got := loopbackHost(host); got != want {
			t.Errorf("loopbackHost(%q) = %v, want %v", host, got, want)
		}
	}
}
