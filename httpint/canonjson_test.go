package httpint_test

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/opledger/opledger/httpint"
)

// TestCanonicalJSONRows: which bodies are one request, which are two, and
// which are refused. Every refused body is one that encoding/json would
// have merged with another (U+FFFD for invalid UTF-8 and lone
// surrogates, the last of two names).
func TestCanonicalJSONRows(t *testing.T) {
	t.Parallel()
	same := [][2]string{
		{`{"a":1,"b":2}`, "{ \"b\" : 2 ,\n\t\"a\" : 1 }\r\n"},
		{`"A"`, `"\u0041"`},
		{`"é"`, `"\u00e9"`},
		{`"/"`, `"\/"`},
		{`"𐀀"`, `"\ud800\udc00"`},
		{`"\ufffd"`, "\"\xef\xbf\xbd\""},
		{`{"\u0061":1}`, `{"a":1}`},
		{`[1, 2]`, `[1,2]`},
		{``, " \t\r\n"},
	}
	for _, p := range same {
		a, errA := httpint.CanonicalJSON([]byte(p[0]))
		b, errB := httpint.CanonicalJSON([]byte(p[1]))
		if errA != nil || errB != nil || !bytes.Equal(a, b) {
			t.Errorf("%q and %q: %q (%v) and %q (%v), want one canonical form", p[0], p[1], a, errA, b, errB)
		}
	}
	distinct := [][2]string{
		{`1`, `1.0`},
		{`0`, `-0`},
		{`1e2`, `100`},
		{`"a"`, `"A"`},
		{`[1,2]`, `[2,1]`},
		{`{"a":null}`, `{}`},
		{`"\ufffd"`, `"\ufffe"`},
	}
	for _, p := range distinct {
		a, errA := httpint.CanonicalJSON([]byte(p[0]))
		b, errB := httpint.CanonicalJSON([]byte(p[1]))
		if errA != nil || errB != nil || bytes.Equal(a, b) {
			t.Errorf("%q and %q: %q (%v) and %q (%v), want two canonical forms", p[0], p[1], a, errA, b, errB)
		}
	}
	for _, bad := range []string{
		`"\ud800"`, `"\udc00"`, `"\ud800\u0041"`, `"\udc00\ud800"`, `"a\ud800b"`, `{"\ud800":1}`, `"\ud800\ud800"`,
		"\"\xff\"", "\"\xc3\"", "\"\xed\xa0\x80\"", "{\"a\xff\":1}", "\xef\xbb\xbf{}",
		`{"a":1,"a":2}`, `{"a":1,"\u0061":1}`, `[{"x":[],"x":[]}]`,
		"\v1", "\u00a0", "\f", "{", "1 2", `{"a":}`, `01`, `1.`, `.5`, `+1`, `"\x"`, "\"\x01\"", `tru`, `[1,]`, `{"a":1,}`, `NaN`,
	} {
		if out, err := httpint.CanonicalJSON([]byte(bad)); err == nil {
			t.Errorf("CanonicalJSON(%q) = %q, want it refused", bad, out)
		} else if len(bad) > 3 && strings.Contains(err.Error(), bad) {
			t.Errorf("CanonicalJSON(%q): the error holds the body: %v", bad, err)
		}
	}
	deep := strings.Repeat("[", 10000) + strings.Repeat("]", 10000)
	if _, err := httpint.CanonicalJSON([]byte(deep)); err != nil {
		t.Errorf("10000 nested arrays: %v", err)
	}
	if _, err := httpint.CanonicalJSON([]byte("[" + deep + "]")); err == nil {
		t.Error("10001 nested arrays accepted")
	}
}

// FuzzCanonicalJSON: CanonicalJSON accepts exactly the JSON documents a
// lossless reference parser (below) reads without a lone surrogate, an
// invalid byte or a repeated name; what it returns reads back to the same
// document and is its own canonical form. So two bodies canonicalise to
// the same bytes exactly when they are the same document: checked
// directly on the fuzzer's pairs too.
func FuzzCanonicalJSON(f *testing.F) {
	for _, p := range [][2]string{
		{`"\ud800"`, `"\udc00"`},
		{"\"\xff\"", "\"\xfe\""},
		{"\"\xff\"", `"\ufffd"`},
		{`{"a":1,"a":2}`, `{"a":2}`},
		{`{"b":[true,null],"a":1}`, "{ \"a\": 1, \"b\": [true, null] }"},
		{`1`, `1.0`},
		{`"\ud800\udc00"`, `"𐀀"`},
		{"", "\u00a0"},
		{`[{"x":"\u00e9"}]`, `[{"x":"é"}]`},
		{`-0.5e+10`, `{"k":"\"\\\/\b\f\n\r\t"}`},
	} {
		f.Add([]byte(p[0]), []byte(p[1]))
	}
	f.Fuzz(func(t *testing.T, a, b []byte) {
		ca, okA := checkCanonical(t, a)
		cb, okB := checkCanonical(t, b)
		if !okA || !okB {
			return
		}
		ra, _ := refParse(a)
		rb, _ := refParse(b)
		if bytes.Equal(ca, cb) != (ra == rb) {
			t.Fatalf("%q and %q canonicalise to %q and %q; same document: %v", a, b, ca, cb, ra == rb)
		}
	})
}

// checkCanonical checks CanonicalJSON(in) against the reference and
// returns its output, and whether in was accepted.
func checkCanonical(t *testing.T, in []byte) ([]byte, bool) {
	t.Helper()
	out, err := httpint.CanonicalJSON(in)
	doc, verdict := refParse(in)
	switch {
	case verdict == refEmpty:
		if err != nil || len(out) != 0 {
			t.Fatalf("CanonicalJSON(%q) of whitespace = %q, %v; want it empty", in, out, err)
		}
		return out, true
	case verdict != refClean:
		if err == nil {
			t.Fatalf("CanonicalJSON(%q) = %q; want it refused (%s)", in, out, verdict)
		}
		return nil, false
	case err != nil:
		t.Fatalf("CanonicalJSON(%q) refused a clean document: %v", in, err)
	}
	back, v := refParse(out)
	if v != refClean || back != doc {
		t.Fatalf("CanonicalJSON(%q) = %q, which reads as another document (%s)", in, out, v)
	}
	if again, err := httpint.CanonicalJSON(out); err != nil || !bytes.Equal(again, out) {
		t.Fatalf("CanonicalJSON(%q) = %q, but that canonicalises to %q, %v", in, out, again, err)
	}
	return out, true
}

// The reference parser's verdicts.
type refVerdict string

const (
	refClean   refVerdict = "clean"
	refEmpty   refVerdict = "empty"
	refSyntax  refVerdict = "not JSON"
	refLossy   refVerdict = "a lone surrogate or an invalid byte"
	refRepeats refVerdict = "a repeated name"
)

// refParse reads in as RFC 8259 JSON without losing anything: a string
// keeps every lone surrogate and invalid byte (as a marker no valid
// string holds), an object every member, a number its spelling. It
// returns the document as a string that two inputs share exactly when
// they are the same document (members sorted by name, all of them kept),
// and its verdict.
func refParse(in []byte) (string, refVerdict) {
	p := &refParser{b: in}
	p.ws()
	if p.i == len(in) {
		return "", refEmpty
	}
	doc, ok := p.value(0)
	p.ws()
	switch {
	case !ok || p.i != len(in):
		return "", refSyntax
	case p.lossy:
		return doc, refLossy
	case p.repeats:
		return doc, refRepeats
	}
	return doc, refClean
}

type refParser struct {
	b              []byte
	i              int
	lossy, repeats bool
}

func (p *refParser) ws() {
	for p.i < len(p.b) && strings.IndexByte(" \t\n\r", p.b[p.i]) >= 0 {
		p.i++
	}
}

// enc length-prefixes s after a tag, so that concatenations are unique.
func enc(tag byte, s string) string {
	var n [4]byte
	binary.BigEndian.PutUint32(n[:], uint32(len(s)))
	return string(tag) + string(n[:]) + s
}

func (p *refParser) value(depth int) (string, bool) {
	if p.i >= len(p.b) || depth > 10000 {
		return "", false
	}
	switch c := p.b[p.i]; {
	case c == '{':
		names := map[string]bool{}
		members, ok := p.seq('}', func() (string, bool) {
			if p.i >= len(p.b) || p.b[p.i] != '"' {
				return "", false
			}
			name, ok := p.str()
			if !ok {
				return "", false
			}
			if names[name] {
				p.repeats = true
			}
			names[name] = true
			p.ws()
			if p.i >= len(p.b) || p.b[p.i] != ':' {
				return "", false
			}
			p.i++
			p.ws()
			v, ok := p.value(depth + 1)
			return enc('m', enc('s', name)+v), ok
		})
		sort.Strings(members)
		return enc('o', strings.Join(members, "")), ok
	case c == '[':
		items, ok := p.seq(']', func() (string, bool) { return p.value(depth + 1) })
		return enc('a', strings.Join(items, "")), ok
	case c == '"':
		s, ok := p.str()
		return enc('s', s), ok
	case c == '-' || (c >= '0' && c <= '9'):
		start := p.i
		if c == '-' {
			p.i++
		}
		if p.i < len(p.b) && p.b[p.i] == '0' {
			p.i++
		} else if !p.digits() {
			return "", false
		}
		if p.i < len(p.b) && p.b[p.i] == '.' {
			p.i++
			if !p.digits() {
				return "", false
			}
		}
		if p.i < len(p.b) && (p.b[p.i] == 'e' || p.b[p.i] == 'E') {
			p.i++
			if p.i < len(p.b) && (p.b[p.i] == '+' || p.b[p.i] == '-') {
				p.i++
			}
			if !p.digits() {
				return "", false
			}
		}
		return enc('n', string(p.b[start:p.i])), true
	}
	for _, lit := range []string{"true", "false", "null"} {
		if bytes.HasPrefix(p.b[p.i:], []byte(lit)) {
			p.i += len(lit)
			return enc('l', lit), true
		}
	}
	return "", false
}

// seq reads the items of an array or an object (p.i at its bracket),
// separated by commas and closed by end.
func (p *refParser) seq(end byte, item func() (string, bool)) ([]string, bool) {
	p.i++
	p.ws()
	if p.i < len(p.b) && p.b[p.i] == end {
		p.i++
		return nil, true
	}
	var out []string
	for {
		p.ws()
		v, ok := item()
		if !ok {
			return nil, false
		}
		out = append(out, v)
		p.ws()
		if p.i >= len(p.b) {
			return nil, false
		}
		p.i++
		switch p.b[p.i-1] {
		case ',':
			continue
		case end:
			return out, true
		}
		return nil, false
	}
}

func (p *refParser) digits() bool {
	start := p.i
	for p.i < len(p.b) && p.b[p.i] >= '0' && p.b[p.i] <= '9' {
		p.i++
	}
	return p.i > start
}

// str reads a string into UTF-8, with "\xffS" and four hex digits for
// each code unit of a lone surrogate and "\xffB" and two for each
// invalid byte: no valid UTF-8 holds 0xff.
func (p *refParser) str() (string, bool) {
	p.i++
	var out strings.Builder
	var units []rune // pending UTF-16 code units of \u escapes
	flush := func() {
		for k := 0; k < len(units); k++ {
			u := units[k]
			switch {
			case u >= 0xd800 && u < 0xdc00 && k+1 < len(units) && units[k+1] >= 0xdc00 && units[k+1] < 0xe000:
				out.WriteRune(0x10000 + (u-0xd800)<<10 + (units[k+1] - 0xdc00))
				k++
			case u >= 0xd800 && u < 0xe000:
				fmt.Fprintf(&out, "\xffS%04x", u)
				p.lossy = true
			default:
				out.WriteRune(u)
			}
		}
		units = units[:0]
	}
	for p.i < len(p.b) {
		c := p.b[p.i]
		switch {
		case c == '"':
			p.i++
			flush()
			return out.String(), true
		case c < 0x20:
			return "", false
		case c == '\\':
			if p.i+1 >= len(p.b) {
				return "", false
			}
			e := p.b[p.i+1]
			p.i += 2
			if e == 'u' {
				if p.i+4 > len(p.b) {
					return "", false
				}
				u, err := strconv.ParseUint(string(p.b[p.i:p.i+4]), 16, 16)
				if err != nil || strings.ContainsAny(string(p.b[p.i:p.i+4]), "+-_xX") {
					return "", false
				}
				p.i += 4
				units = append(units, rune(u))
				continue
			}
			flush()
			r, ok := map[byte]rune{'"': '"', '\\': '\\', '/': '/', 'b': '\b', 'f': '\f', 'n': '\n', 'r': '\r', 't': '\t'}[e]
			if !ok {
				return "", false
			}
			out.WriteRune(r)
		default:
			flush()
			r, n := utf8.DecodeRune(p.b[p.i:])
			if r == utf8.RuneError && n == 1 {
				fmt.Fprintf(&out, "\xffB%02x", c)
				p.lossy = true
			} else {
				out.WriteRune(r)
			}
			p.i += n
		}
	}
	return "", false
}
