// Package keybirth reads and makes idempotency keys that carry their birth
// time, and reads a first-sent time sent beside a key: what the ledger's
// window rule needs to tell a key it no longer remembers from one it never
// saw.
//
// A key carries its birth when it is a UUID of version 7 (RFC 9562) in its
// 36-character form: its first 48 bits are the Unix time in milliseconds.
// The version and variant bits make the form hard to hit by chance: a
// random (version 4) UUID never reads as one, nor does any key of another
// length. ULIDs are not read: any 26 characters of Crockford's alphabet
// would read as one, so a foreign client's random key would be given a
// random birth and refused.
package keybirth

import (
	"crypto/rand"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"time"
)

// KeyLen is the length of a key New returns.
const KeyLen = 36

// New returns a fresh UUIDv7 key, born at now: 48 bits of Unix
// milliseconds, the version and variant bits, and 74 random bits, in the
// 36-character form (lower-case hex).
func New(now time.Time) string {
	var b [16]byte
	_, _ = rand.Read(b[6:]) // crypto/rand.Read never fails
	ms := uint64(now.UnixMilli())
	var t [8]byte
	binary.BigEndian.PutUint64(t[:], ms)
	copy(b[0:6], t[2:8])
	b[6] = b[6]&0x0f | 0x70
	b[8] = b[8]&0x3f | 0x80
	return format(b)
}

func format(b [16]byte) string {
	var out [KeyLen]byte
	hex.Encode(out[0:8], b[0:4])
	out[8] = '-'
	hex.Encode(out[9:13], b[4:6])
	out[13] = '-'
	hex.Encode(out[14:18], b[6:8])
	out[18] = '-'
	hex.Encode(out[19:23], b[8:10])
	out[23] = '-'
	hex.Encode(out[24:36], b[10:16])
	return string(out[:])
}

// Birth returns the birth of key, and whether key carries one: a UUID of
// version 7 and the RFC 9562 variant in its 36-character form (hex digits
// of either case, hyphens at 8, 13, 18 and 23) whose time is after the
// Unix epoch. Any other key has no readable birth.
func Birth(key string) (time.Time, bool) {
	if len(key) != KeyLen {
		return time.Time{}, false
	}
	for i := 0; i < KeyLen; i++ {
		c := key[i]
		switch i {
		case 8, 13, 18, 23:
			if c != '-' {
				return time.Time{}, false
			}
			continue
		}
		if unhex(c) < 0 {
			return time.Time{}, false
		}
	}
	if key[14] != '7' {
		return time.Time{}, false
	}
	switch key[19] {
	case '8', '9', 'a', 'b', 'A', 'B':
	default:
		return time.Time{}, false
	}
	var ms int64
	for _, i := range [...]int{0, 1, 2, 3, 4, 5, 6, 7, 9, 10, 11, 12} {
		ms = ms<<4 | int64(unhex(key[i]))
	}
	if ms == 0 {
		return time.Time{}, false
	}
	return time.UnixMilli(ms).UTC(), true
}

func unhex(c byte) int {
	switch {
	case '0' <= c && c <= '9':
		return int(c - '0')
	case 'a' <= c && c <= 'f':
		return int(c-'a') + 10
	case 'A' <= c && c <= 'F':
		return int(c-'A') + 10
	}
	return -1
}

// FirstSentHeader is the header (gRPC and connect metadata, HTTP) in which
// a caller sends the time it first sent a request with its key, when the
// key carries no birth of its own: an HTTP-date (RFC 9110's IMF-fixdate,
// "Sun, 06 Dec 2026 12:00:00 GMT"), as Azure's Repeatability-First-Sent.
const FirstSentHeader = "Idempotency-Key-First-Sent"

// imfFixdate is net/http's TimeFormat, RFC 9110's IMF-fixdate, written
// out: the keyed core must not link net/http for a constant.
const imfFixdate = "Mon, 02 Jan 2006 15:04:05 GMT"

// ErrFirstSent is the error of a first-sent value that is not an
// IMF-fixdate after the Unix epoch.
var ErrFirstSent = errors.New("first-sent time must be an HTTP-date (IMF-fixdate), such as \"Sun, 06 Dec 2026 12:00:00 GMT\"")

// ParseFirstSent reads a first-sent header's value: an IMF-fixdate, at
// most 29 bytes, after the Unix epoch. Errors are ErrFirstSent.
func ParseFirstSent(v string) (time.Time, error) {
	if len(v) != len(imfFixdate) {
		return time.Time{}, ErrFirstSent
	}
	t, err := time.Parse(imfFixdate, v)
	if err != nil || t.Unix() <= 0 {
		return time.Time{}, ErrFirstSent
	}
	return t.UTC(), nil
}

// FormatFirstSent formats t as a first-sent header's value (an
// IMF-fixdate, to the second).
func FormatFirstSent(t time.Time) string { return t.UTC().Format(imfFixdate) }

// Derived returns the UUIDv7 key born at birth whose other 74 bits are
// taken from d: the same for the same inputs, and as readable as New's.
func Derived(birth time.Time, d [32]byte) string {
	var b [16]byte
	copy(b[:], d[:16])
	var t [8]byte
	binary.BigEndian.PutUint64(t[:], uint64(birth.UnixMilli()))
	copy(b[0:6], t[2:8])
	b[6] = b[6]&0x0f | 0x70
	b[8] = b[8]&0x3f | 0x80
	return format(b)
}
