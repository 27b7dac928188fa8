package httpint_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/opledger/opledger/httpint"
)

func TestParseKey(t *testing.T) {
	good := map[string]string{
		`"8e03978e-40d5-43e8-bc93-6894a57f9324"`: "8e03978e-40d5-43e8-bc93-6894a57f9324",
		`  "k"  `:                                "k",
		"\t\"k\"":                                "k",
		`"a\"b\\c"`:                              `a"b\c`,
		`"with space"`:                           "with space",
		`"k";a`:                                  "k",
		`"k";a=1;b="x";c=?0;d=tok/en:1;e=:aGk=:`: "k",
		`"k"; a=-1.5;*b=@1700000000;c=%"%c3%a9"`: "k",
		`"` + strings.Repeat("~", 255) + `"`:     strings.Repeat("~", 255),
	}
	for in, want := range good {
		got, err := httpint.ParseKey(in)
		if err != nil || got != want {
			t.Errorf("ParseKey(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
	bad := []string{
		"", `"`, `"k`, "k", `'k'`, `""`, `"k" x`, `"k","l"`, `"a\b"`, `"a` + "\x01" + `"`, `"é"`,
		`"` + strings.Repeat("k", 256) + `"`, `"k";`, `"k";A=1`, `"k";a=`, `"k";a=1.2345`, `"k";a=1234567890123456`,
		`"k";a=?2`, `"k";a=:abc`, `"k";a=%"%C3"`, `"k";a=%"%ff"`, `"k";a=@1.5`, `"k";a=-`, `"k" ;a`,
	}
	for _, in := range bad {
		if got, err := httpint.ParseKey(in); !errors.Is(err, httpint.ErrInvalidKey) {
			t.Errorf("ParseKey(%q) = %q, %v; want ErrInvalidKey", in, got, err)
		}
	}
}

func TestFormatKey(t *testing.T) {
	for _, k := range []string{"k", `a"b\c`, " x ", strings.Repeat("~", 255)} {
		v, err := httpint.FormatKey(k)
		if err != nil {
			t.Fatalf("FormatKey(%q): %v", k, err)
		}
		if back, err := httpint.ParseKey(v); err != nil || back != k {
			t.Errorf("ParseKey(FormatKey(%q)) = %q, %v", k, back, err)
		}
	}
	for _, k := range []string{"", "é", "a\nb", strings.Repeat("k", 256)} {
		if _, err := httpint.FormatKey(k); !errors.Is(err, httpint.ErrInvalidKey) {
			t.Errorf("FormatKey(%q): %v, want ErrInvalidKey", k, err)
		}
	}
}

// FuzzParseKey: ParseKey never panics; it accepts a key that FormatKey
// turns back into a value ParseKey reads as the same key; every error
// wraps ErrInvalidKey and never holds the field's content.
func FuzzParseKey(f *testing.F) {
	for _, s := range []string{
		`"8e03978e-40d5-43e8-bc93-6894a57f9324"`, `""`, `"k";a=1;b=?1`, `"a\"b"`, "k", `"k`, `"k";a=%"%c3%a9"`,
		`"k";a=:aGk=:`, `"k";a=-1.25`, "\"\xff\"", `"k" "l"`, `"k";a=@-1`,
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, field string) {
		key, err := httpint.ParseKey(field)
		if err != nil {
			if !errors.Is(err, httpint.ErrInvalidKey) {
				t.Fatalf("ParseKey(%q): %v does not wrap ErrInvalidKey", field, err)
			}
			if len(field) >= 8 && strings.Contains(err.Error(), field) {
				t.Fatalf("the error holds the field: %v", err)
			}
			return
		}
		if key == "" || len(key) > 255 {
			t.Fatalf("ParseKey(%q) = %q: length %d", field, key, len(key))
		}
		for i := 0; i < len(key); i++ {
			if key[i] < 0x20 || key[i] > 0x7e {
				t.Fatalf("ParseKey(%q) = %q: not printable ASCII", field, key)
			}
		}
		v, err := httpint.FormatKey(key)
		if err != nil {
			t.Fatalf("FormatKey(%q): %v", key, err)
		}
		if back, err := httpint.ParseKey(v); err != nil || back != key {
			t.Fatalf("round trip of %q: %q, %v", key, back, err)
		}
	})
}
