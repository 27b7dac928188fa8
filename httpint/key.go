package httpint

import (
	"errors"
	"fmt"
	"strings"
	"unicode/utf8"

	"github.com/opledger/opledger/internal/ledgerkit"
)

// ErrInvalidKey is returned (wrapped) by ParseKey and FormatKey for a
// field value or key that is not usable. Its messages never contain the
// key.
var ErrInvalidKey = errors.New("httpint: invalid idempotency key")

func keyErr(reason string) error { return fmt.Errorf("%w: %s", ErrInvalidKey, reason) }

// ParseKey parses one Idempotency-Key field value as the IETF draft
// defines it: a Structured Field Item (RFC 9651) whose bare item is a
// String, such as "\"8e03978e-40d5-43e8-bc93-6894a57f9324\"". Parameters
// after the string are parsed (they must be well formed) and ignored;
// space around the item is allowed. The key is the string's content: 1 to
// ledgerkit.MaxKeyLen bytes of printable ASCII, as every string's content
// is. Any other value is an error wrapping ErrInvalidKey.
func ParseKey(field string) (string, error) {
	p := sfParser{s: strings.Trim(field, " \t")}
	key, err := p.str()
	if err != nil {
		return "", err
	}
	if err := p.params(); err != nil {
		return "", err
	}
	p.spaces()
	if p.i != len(p.s) {
		return "", keyErr("unexpected characters after the item (one key per request)")
	}
	return key, checkKeyLen(key)
}

// parseBareKey is ParseKey's lenient counterpart (WithBareKeys): a value
// that does not start with a double quote is the key as it is, trimmed.
func parseBareKey(field string) (string, error) {
	v := strings.Trim(field, " \t")
	if strings.HasPrefix(v, `"`) {
		return ParseKey(v)
	}
	for i := 0; i < len(v); i++ {
		if v[i] < 0x20 || v[i] > 0x7e {
			return "", keyErr("not printable ASCII")
		}
	}
	return v, checkKeyLen(v)
}

func checkKeyLen(key string) error {
	if key == "" || len(key) > ledgerkit.MaxKeyLen {
		return keyErr(fmt.Sprintf("must be 1 to %d bytes", ledgerkit.MaxKeyLen))
	}
	return nil
}

// FormatKey returns the Idempotency-Key field value for key: key as a
// Structured Field String, in double quotes, with '"' and '\' escaped.
// key must be 1 to ledgerkit.MaxKeyLen bytes of printable ASCII.
func FormatKey(key string) (string, error) {
	if err := checkKeyLen(key); err != nil {
		return "", err
	}
	var b strings.Builder
	b.Grow(len(key) + 2)
	b.WriteByte('"')
	for i := 0; i < len(key); i++ {
		c := key[i]
		if c < 0x20 || c > 0x7e {
			return "", keyErr("not printable ASCII")
		}
		if c == '"' || c == '\\' {
			b.WriteByte('\\')
		}
		b.WriteByte(c)
	}
	b.WriteByte('"')
	return b.String(), nil
}

// sfParser parses the parts of RFC 9651 an Item of type String needs.
type sfParser struct {
	s string
	i int
}

func (p *sfParser) peek() (byte, bool) {
	if p.i >= len(p.s) {
		return 0, false
	}
	return p.s[p.i], true
}

func (p *sfParser) spaces() {
	for p.i < len(p.s) && p.s[p.i] == ' ' {
		p.i++
	}
}

// str parses an sf-string.
func (p *sfParser) str() (string, error) {
	if c, ok := p.peek(); !ok || c != '"' {
		return "", keyErr("not a structured-field string (it must be in double quotes)")
	}
	p.i++
	var b strings.Builder
	for p.i < len(p.s) {
		c := p.s[p.i]
		p.i++
		switch {
		case c == '\\':
			if p.i >= len(p.s) || (p.s[p.i] != '"' && p.s[p.i] != '\\') {
				return "", keyErr(`a backslash escapes only '"' and '\'`)
			}
			b.WriteByte(p.s[p.i])
			p.i++
		case c == '"':
			return b.String(), nil
		case c < 0x20 || c > 0x7e:
			return "", keyErr("a string holds only printable ASCII")
		default:
			b.WriteByte(c)
		}
	}
	return "", keyErr("unterminated string")
}

// params parses and discards parameters: *( ";" *SP key [ "=" bare-item ] ).
func (p *sfParser) params() error {
	for {
		if c, ok := p.peek(); !ok || c != ';' {
			return nil
		}
		p.i++
		p.spaces()
		if err := p.paramKey(); err != nil {
			return err
		}
		if c, ok := p.peek(); ok && c == '=' {
			p.i++
			if err := p.bareItem(); err != nil {
				return err
			}
		}
	}
}

func (p *sfParser) paramKey() error {
	c, ok := p.peek()
	if !ok || !(c >= 'a' && c <= 'z' || c == '*') {
		return keyErr("bad parameter key")
	}
	p.i++
	for p.i < len(p.s) {
		c := p.s[p.i]
		if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '_' || c == '-' || c == '.' || c == '*') {
			break
		}
		p.i++
	}
	return nil
}

// bareItem parses any bare item a parameter value may be.
func (p *sfParser) bareItem() error {
	c, ok := p.peek()
	switch {
	case !ok:
		return keyErr("parameter without a value after '='")
	case c == '-' || c >= '0' && c <= '9':
		return p.number(true)
	case c == '"':
		_, err := p.str()
		return err
	case c == '*' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z':
		p.token()
		return nil
	case c == ':':
		return p.bytes()
	case c == '?':
		if p.i+1 < len(p.s) && (p.s[p.i+1] == '0' || p.s[p.i+1] == '1') {
			p.i += 2
			return nil
		}
		return keyErr("bad boolean parameter")
	case c == '@':
		p.i++
		return p.number(false)
	case c == '%':
		return p.displayString()
	}
	return keyErr("bad parameter value")
}

// number parses an sf-integer or, when decimals, an sf-decimal.
func (p *sfParser) number(decimals bool) error {
	if c, ok := p.peek(); ok && c == '-' {
		p.i++
	}
	digits, frac, dot := 0, 0, false
	for p.i < len(p.s) {
		c := p.s[p.i]
		if c == '.' && decimals && !dot && digits > 0 {
			if digits > 12 {
				return keyErr("bad decimal parameter")
			}
			dot = true
			p.i++
			continue
		}
		if c < '0' || c > '9' {
			break
		}
		if dot {
			frac++
		} else {
			digits++
		}
		p.i++
	}
	switch {
	case digits == 0, !dot && digits > 15:
		return keyErr("bad number parameter")
	case dot && (frac == 0 || frac > 3):
		return keyErr("bad decimal parameter")
	}
	return nil
}

func (p *sfParser) token() {
	p.i++
	for p.i < len(p.s) {
		c := p.s[p.i]
		if !isTchar(c) && c != ':' && c != '/' {
			return
		}
		p.i++
	}
}

func isTchar(c byte) bool {
	switch {
	case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9':
		return true
	}
	return strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0
}

func (p *sfParser) bytes() error {
	p.i++
	for p.i < len(p.s) {
		c := p.s[p.i]
		p.i++
		switch {
		case c == ':':
			return nil
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9', c == '+', c == '/', c == '=':
		default:
			return keyErr("bad byte-sequence parameter")
		}
	}
	return keyErr("unterminated byte-sequence parameter")
}

func (p *sfParser) displayString() error {
	if p.i+1 >= len(p.s) || p.s[p.i+1] != '"' {
		return keyErr("bad display-string parameter")
	}
	p.i += 2
	var b []byte
	for p.i < len(p.s) {
		c := p.s[p.i]
		p.i++
		switch {
		case c == '%':
			if p.i+2 > len(p.s) || !isLowerHex(p.s[p.i]) || !isLowerHex(p.s[p.i+1]) {
				return keyErr("bad display-string parameter")
			}
			b = append(b, unhex(p.s[p.i])<<4|unhex(p.s[p.i+1]))
			p.i += 2
		case c == '"':
			if !utf8.Valid(b) {
				return keyErr("display-string parameter is not UTF-8")
			}
			return nil
		case c < 0x20 || c > 0x7e:
			return keyErr("bad display-string parameter")
		default:
			b = append(b, c)
		}
	}
	return keyErr("unterminated display-string parameter")
}

func isLowerHex(c byte) bool { return c >= '0' && c <= '9' || c >= 'a' && c <= 'f' }

func unhex(c byte) byte {
	if c <= '9' {
		return c - '0'
	}
	return c - 'a' + 10
}
