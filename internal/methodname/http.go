package methodname

import (
	"errors"
	"strings"
)

// The second form of an operation name: an HTTP route, as the httpint
// middleware stores it in an operation's identity:
//
//	http-op = verb " " route
//	verb    = upper { upper | digit | "-" | "_" }
//	route   = "/" { vchar }
//
// where upper is an ASCII capital letter, digit an ASCII digit and vchar a
// visible ASCII character (0x21 to 0x7E: no space, no control character).
// The verb is at most MaxVerbLen bytes, the whole name at most MaxLen. An
// example is "POST /orders/{id}/refunds". The two forms cannot be confused:
// a gRPC name starts with "/", an HTTP route with a capital letter.

// MaxVerbLen is the longest HTTP method accepted in an HTTP route, in
// bytes.
const MaxVerbLen = 32

// The errors SplitHTTP and CheckHTTP return, besides ErrTooLong.
var (
	// ErrHTTPForm reports a name that is not of the form "VERB /route":
	// no single space between a method and a route that starts with "/".
	ErrHTTPForm = errors.New(`want the HTTP form "METHOD /route/{pattern}"`)
	// ErrVerb reports an HTTP method that is not upper-case letters,
	// digits, "-" and "_", starting with a letter, at most MaxVerbLen bytes.
	ErrVerb = errors.New("HTTP method is not an upper-case token")
	// ErrRoute reports a route with a character outside visible ASCII.
	ErrRoute = errors.New("route pattern has a character outside visible ASCII")
)

// SplitHTTP splits an HTTP route, "POST /orders/{id}", into its method
// ("POST") and route pattern ("/orders/{id}"). A name that does not follow
// the grammar above is an error: ErrTooLong, ErrHTTPForm, ErrVerb or
// ErrRoute, checked in that order; the parts are then empty.
func SplitHTTP(op string) (verb, route string, err error) {
	if len(op) > MaxLen {
		return "", "", ErrTooLong
	}
	verb, route, ok := strings.Cut(op, " ")
	if !ok || verb == "" || !strings.HasPrefix(route, "/") {
		return "", "", ErrHTTPForm
	}
	if !IsVerb(verb) {
		return "", "", ErrVerb
	}
	for i := 0; i < len(route); i++ {
		if route[i] < 0x21 || route[i] > 0x7e {
			return "", "", ErrRoute
		}
	}
	return verb, route, nil
}

// CheckHTTP reports whether op is an HTTP route; it returns the error
// SplitHTTP would.
func CheckHTTP(op string) error {
	_, _, err := SplitHTTP(op)
	return err
}

// IsVerb reports whether s is an HTTP method as an HTTP route spells it:
// an ASCII capital letter, then capital letters, digits, "-" or "_", at
// most MaxVerbLen bytes.
func IsVerb(s string) bool {
	if s == "" || len(s) > MaxVerbLen {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case 'A' <= c && c <= 'Z':
		case i > 0 && ('0' <= c && c <= '9' || c == '-' || c == '_'):
		default:
			return false
		}
	}
	return true
}

// CheckOperation reports whether name is either form of an operation
// name: a full gRPC method name (it starts with "/") or an HTTP route.
// It returns the error of the form name looks like.
func CheckOperation(name string) error {
	if strings.HasPrefix(name, "/") {
		return Check(name)
	}
	return CheckHTTP(name)
}
