package httpint

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"unicode/utf16"
	"unicode/utf8"
)

// CanonicalJSON is a body canonicaliser for JSON bodies (see
// WithBodyCanonicalizer): it returns the body re-encoded with object keys
// sorted and insignificant whitespace removed, so that two encodings of
// the same document fingerprint alike. Numbers keep their spelling (1 and
// 1.0 differ); a string's escapes are decoded ("\u0041" and "A" are one
// string). An empty body, or one of JSON whitespace only, stays empty.
//
// Two bodies canonicalise to the same bytes only when they are the same
// JSON document, so it refuses (with an error, which the middleware
// answers 400 request-unreadable) every body whose meaning a decoder
// would have to guess: a body that is not one JSON value (RFC 8259), that
// is not UTF-8, whose strings hold a lone surrogate escape ("\ud800"
// without its low half after it, or "\udc00" alone), or with an object
// that holds one name twice. Decoded the usual way each of them would
// merge with another body (invalid bytes and lone surrogates become
// U+FFFD, the last of two names wins), and a second, different request
// would be replayed the first one's answer instead of refused 422.
func CanonicalJSON(body []byte) ([]byte, error) {
	if len(trimJSONSpace(body)) == 0 {
		return nil, nil
	}
	if err := checkJSON(body); err != nil {
		return nil, fmt.Errorf("httpint: body is not JSON: %w", err)
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return nil, fmt.Errorf("httpint: body is not JSON: %w", err)
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return nil, errors.New("httpint: body holds more than one JSON value")
	}
	return json.Marshal(v)
}

// trimJSONSpace removes JSON's whitespace (RFC 8259: space, tab, line
// feed, carriage return) from both ends of b, and nothing else.
func trimJSONSpace(b []byte) []byte {
	return bytes.Trim(b, " \t\n\r")
}

// maxJSONDepth is the deepest nesting of arrays and objects accepted, as
// encoding/json's own limit.
const maxJSONDepth = 10000

// errTrailing is checkJSON's error for a second value after the first.
var errTrailing = errors.New("more than one JSON value")

// checkJSON reports whether b is exactly one JSON value (RFC 8259) in
// UTF-8 whose strings hold no lone surrogate escape and whose objects
// hold each name once. Its errors name a byte offset, never the body.
func checkJSON(b []byte) error {
	if !utf8.Valid(b) {
		i := 0
		for i < len(b) {
			r, n := utf8.DecodeRune(b[i:])
			if r == utf8.RuneError && n <= 1 {
				break
			}
			i += n
		}
		return fmt.Errorf("invalid UTF-8 at byte %d", i)
	}
	c := jsonChecker{b: b}
	c.space()
	if err := c.value(0); err != nil {
		return err
	}
	c.space()
	if c.i != len(b) {
		if isValueStart(b[c.i]) {
			return errTrailing
		}
		return c.errorf("unexpected %q", b[c.i])
	}
	return nil
}

func isValueStart(ch byte) bool {
	return ch == '{' || ch == '[' || ch == '"' || ch == '-' || ch == 't' || ch == 'f' || ch == 'n' || (ch >= '0' && ch <= '9')
}

type jsonChecker struct {
	b []byte
	i int
}

func (c *jsonChecker) errorf(format string, args ...any) error {
	return fmt.Errorf(format+" at byte %d", append(args, c.i)...)
}

func (c *jsonChecker) space() {
	for c.i < len(c.b) {
		switch c.b[c.i] {
		case ' ', '\t', '\n', '\r':
			c.i++
		default:
			return
		}
	}
}

func (c *jsonChecker) value(depth int) error {
	if c.i >= len(c.b) {
		return c.errorf("unexpected end")
	}
	switch ch := c.b[c.i]; {
	case ch == '{':
		return c.object(depth + 1)
	case ch == '[':
		return c.array(depth + 1)
	case ch == '"':
		_, err := c.str(false)
		return err
	case ch == 't':
		return c.literal("true")
	case ch == 'f':
		return c.literal("false")
	case ch == 'n':
		return c.literal("null")
	case ch == '-' || (ch >= '0' && ch <= '9'):
		return c.number()
	default:
		return c.errorf("unexpected %q", ch)
	}
}

func (c *jsonChecker) literal(word string) error {
	if !bytes.HasPrefix(c.b[c.i:], []byte(word)) {
		return c.errorf("invalid literal")
	}
	c.i += len(word)
	return nil
}

// number reads -?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?.
func (c *jsonChecker) number() error {
	if c.peek() == '-' {
		c.i++
	}
	switch ch := c.peek(); {
	case ch == '0':
		c.i++
	case ch >= '1' && ch <= '9':
		c.digits()
	default:
		return c.errorf("invalid number")
	}
	if c.peek() == '.' {
		c.i++
		if !c.digits() {
			return c.errorf("invalid number")
		}
	}
	if ch := c.peek(); ch == 'e' || ch == 'E' {
		c.i++
		if ch := c.peek(); ch == '+' || ch == '-' {
			c.i++
		}
		if !c.digits() {
			return c.errorf("invalid number")
		}
	}
	return nil
}

// peek returns the next byte, or 0 at the end.
func (c *jsonChecker) peek() byte {
	if c.i < len(c.b) {
		return c.b[c.i]
	}
	return 0
}

// digits reads one or more decimal digits, reporting whether it read any.
func (c *jsonChecker) digits() bool {
	start := c.i
	for c.i < len(c.b) && c.b[c.i] >= '0' && c.b[c.i] <= '9' {
		c.i++
	}
	return c.i > start
}

// container reads an array or an object (c.i at its opening bracket)
// whose items item reads, separated by commas and closed by end.
func (c *jsonChecker) container(depth int, end byte, item func() error) error {
	if depth > maxJSONDepth {
		return c.errorf("nested too deeply")
	}
	c.i++ // '[' or '{'
	c.space()
	if c.peek() == end {
		c.i++
		return nil
	}
	for {
		c.space()
		if err := item(); err != nil {
			return err
		}
		c.space()
		switch c.peek() {
		case ',':
			c.i++
		case end:
			c.i++
			return nil
		default:
			return c.errorf("expected ',' or %q", end)
		}
	}
}

func (c *jsonChecker) array(depth int) error {
	return c.container(depth, ']', func() error { return c.value(depth) })
}

func (c *jsonChecker) object(depth int) error {
	names := map[string]struct{}{}
	return c.container(depth, '}', func() error {
		if c.peek() != '"' {
			return c.errorf("expected a name")
		}
		at := c.i
		name, err := c.str(true)
		if err != nil {
			return err
		}
		if _, dup := names[name]; dup {
			return fmt.Errorf("an object holds the same name twice (the second at byte %d)", at)
		}
		names[name] = struct{}{}
		c.space()
		if c.peek() != ':' {
			return c.errorf("expected ':'")
		}
		c.i++
		c.space()
		return c.value(depth)
	})
}

// str reads a string (c.b is valid UTF-8), refusing control characters,
// unknown escapes and lone surrogates; with decode it returns the decoded
// string.
func (c *jsonChecker) str(decode bool) (string, error) {
	c.i++ // '"'
	var out []byte
	for {
		if c.i >= len(c.b) {
			return "", c.errorf("unterminated string")
		}
		ch := c.b[c.i]
		switch {
		case ch == '"':
			c.i++
			return string(out), nil
		case ch < 0x20:
			return "", c.errorf("control character in a string")
		case ch != '\\':
			if decode {
				out = append(out, ch)
			}
			c.i++
			continue
		}
		at := c.i
		c.i++ // '\\'
		if k := strings.IndexByte(escaped, c.peek()); k >= 0 {
			out = append(out, unescaped[k])
			c.i++
			continue
		}
		if c.peek() != 'u' {
			c.i = at
			return "", c.errorf("invalid escape")
		}
		r, err := c.unicodeEscape(at)
		if err != nil {
			return "", err
		}
		out = utf8.AppendRune(out, r)
	}
}

// unicodeEscape reads a \u escape (c.i at the 'u', at at its backslash):
// one code unit, or a surrogate pair in two escapes; a lone surrogate is
// an error.
func (c *jsonChecker) unicodeEscape(at int) (rune, error) {
	r, ok := c.hex4()
	if !ok {
		c.i = at
		return 0, c.errorf("invalid \\u escape")
	}
	if !utf16.IsSurrogate(r) {
		return r, nil
	}
	if r < 0xdc00 && bytes.HasPrefix(c.b[c.i:], []byte(`\u`)) {
		save := c.i
		c.i++
		if lo, ok := c.hex4(); ok && lo >= 0xdc00 && lo <= 0xdfff {
			return utf16.DecodeRune(r, lo), nil
		}
		c.i = save
	}
	c.i = at
	return 0, c.errorf("lone surrogate escape")
}

// JSON's one-letter escapes (after the backslash) and what each stands
// for.
const (
	escaped   = "\"\\/bfnrt"
	unescaped = "\"\\/\b\f\n\r\t"
)

// hex4 reads "u" and four hex digits (c.i at the 'u'), returning the
// code unit.
func (c *jsonChecker) hex4() (rune, bool) {
	if c.i+5 > len(c.b) || c.b[c.i] != 'u' {
		return 0, false
	}
	var r rune
	for _, h := range c.b[c.i+1 : c.i+5] {
		switch {
		case h >= '0' && h <= '9':
			r = r<<4 | rune(h-'0')
		case h >= 'a' && h <= 'f':
			r = r<<4 | rune(h-'a'+10)
		case h >= 'A' && h <= 'F':
			r = r<<4 | rune(h-'A'+10)
		default:
			return 0, false
		}
	}
	c.i += 5
	return r, true
}
