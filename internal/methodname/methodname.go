// Package methodname is the one definition of the operation names the
// kit uses: the full gRPC method name grammar used by the ledger (which
// stores the method as part of an operation's identity) and by the retry
// policy catalog, and the HTTP route form the ledger also accepts (see
// SplitHTTP). A full gRPC method name is:
//
//	full    = "/" service "/" method
//	service = ident { "." ident }
//	method  = ident
//	ident   = ( letter | "_" ) { letter | digit | "_" }
//
// where letter is an ASCII letter and digit an ASCII digit. A full name is
// at most MaxLen bytes. This is the form gRPC passes to interceptors, such
// as "/shop.v1.Orders/Create". The package depends only on the standard
// library.
package methodname

import (
	"errors"
	"strings"
)

// MaxLen is the longest full method name accepted, in bytes.
const MaxLen = 512

// The errors Split and Check return. Their text is a reason meant to be
// embedded in the caller's own error ("invalid method: " + reason); test
// them with errors.Is.
var (
	// ErrTooLong reports a full name longer than MaxLen bytes.
	ErrTooLong = errors.New("longer than 512 bytes")
	// ErrForm reports a name that is not of the form /Service/Method: no
	// leading slash, no second slash, or an empty service or method.
	ErrForm = errors.New("want the full form /package.Service/Method")
	// ErrService reports a service part that is not dot-separated
	// identifiers.
	ErrService = errors.New("service name is not a dotted identifier")
	// ErrMethod reports a method part that is not an identifier.
	ErrMethod = errors.New("method name is not an identifier")
)

// Split splits a full method name, "/package.Service/Method", into its
// service ("package.Service") and method ("Method") parts. A name that does
// not follow the grammar of the package comment is an error: ErrTooLong,
// ErrForm, ErrService or ErrMethod, checked in that order; the parts are
// then empty.
func Split(full string) (service, method string, err error) {
	if len(full) > MaxLen {
		return "", "", ErrTooLong
	}
	rest, ok := strings.CutPrefix(full, "/")
	if !ok {
		return "", "", ErrForm
	}
	service, method, ok = strings.Cut(rest, "/")
	if !ok || service == "" || method == "" {
		return "", "", ErrForm
	}
	if !IsServiceName(service) {
		return "", "", ErrService
	}
	if !IsIdent(method) {
		return "", "", ErrMethod
	}
	return service, method, nil
}

// Check reports whether full is a full method name; it returns the error
// Split would.
func Check(full string) error {
	_, _, err := Split(full)
	return err
}

// IsIdent reports whether s is an identifier: an ASCII letter or
// underscore, then ASCII letters, digits or underscores.
func IsIdent(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c == '_', 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z':
		case '0' <= c && c <= '9' && i > 0:
		default:
			return false
		}
	}
	return true
}

// IsServiceName reports whether s is a service name: one or more
// identifiers separated by single dots ("pkg.v1.Service" or "Service").
func IsServiceName(s string) bool {
	for {
		part, rest, more := strings.Cut(s, ".")
		if !IsIdent(part) {
			return false
		}
		if !more {
			return true
		}
		s = rest
	}
}
