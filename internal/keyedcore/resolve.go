package keyedcore

import (
	"strings"

	"github.com/opledger/opledger/keyed"
)

// ParseResolve reads the values of a unary request's resolve header
// (idempotency-resolve on gRPC and connect, Idempotency-Resolve on HTTP;
// values: every value the request carried). No value: the request is not
// a resolve. Every value "1" or "true" (ASCII case-insensitive, spaces
// and tabs around it ignored): a resolve. Any other value, "0" and the
// empty value included, is a malformed request: refusal's outcome is
// keyed.RequestUnreadable, and the transport answers it without running
// or resolving anything. The detail never holds the value.
//
// Streams never read the header: a resolve is a unary request, and a
// stream carrying the header (a tool that sends its headers to every
// call, server reflection included) is served as if it were absent.
func ParseResolve(values []string) (resolve bool, refusal Answer) {
	if len(values) == 0 {
		return false, Answer{}
	}
	for _, v := range values {
		v = strings.Trim(v, " \t")
		if v != "1" && !strings.EqualFold(v, "true") {
			return false, Answer{Outcome: keyed.RequestUnreadable, Detail: "the resolve header's value must be 1 or true; send the header only on a resolve"}
		}
	}
	return true, Answer{}
}
