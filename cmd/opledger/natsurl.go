package main

import (
	"errors"
	"fmt"
	"net"
	"net/url"
	"strings"
)

// natsServers is a --to value read as nats.go reads the URL given to
// nats.Connect: a comma-separated list of servers, each a URL
// (nats://host:port, tls://…) or host:port. A server's user information
// is a user and password (nats://user:password@host) or, alone, a token
// (nats://TOKEN@host).
type natsServers struct {
	// display names every server, safe to print: a password and a token
	// replaced by xxxxx, no path, query or fragment.
	display string
	// secrets are every credential of every server, in the forms it was
	// given and decoded, for scrub.
	secrets []string
}

// natsWithheld replaces a NATS client's message that scrub cannot clean.
const natsWithheld = "(the NATS client's message is withheld: it contains a credential of --to)"

// errNATSScheme is parseNATSServers' error for a server that is not a
// nats:// or tls:// URL.
var errNATSScheme = errors.New("--to must be a nats:// URL (or tls://; a comma-separated list of them)")

// parseNATSServers reads s as nats.go does (a comma-separated list, each
// server trimmed, host:port taken for nats://host:port) and checks every
// server: a URL net/url parses, with scheme nats or tls and a host. So
// that what display shows of a server is exactly what nats.go does not
// read as a credential, it refuses what nats.go would split elsewhere
// than the user meant: credentials without a scheme (where an unencoded
// ',' in a password lands: nats://u:12,34@h is the servers nats://u:12
// and 34@h) and an '@' after the host (an unencoded '/', '?' or '#' in a
// password). Its errors name a server by its position, never by its text.
func parseNATSServers(s string) (natsServers, error) {
	var ns natsServers
	var shown []string
	n := 0
	for _, part := range strings.Split(s, ",") {
		part = strings.TrimSpace(part)
		if part == "" {
			continue
		}
		n++
		if !strings.Contains(part, "://") {
			if strings.Contains(part, "@") {
				return natsServers{}, fmt.Errorf("--to: server %d has credentials but no scheme (not repeated here); "+
					"write nats://user:password@host:port, and percent-encode a ',' in a password as %%2C", n)
			}
			part = "nats://" + part
		}
		scheme, afterScheme, _ := strings.Cut(part, "://")
		if end := strings.IndexAny(afterScheme, "/?#"); end >= 0 && strings.Contains(afterScheme[end:], "@") {
			return natsServers{}, fmt.Errorf("--to: server %d has an '@' after its host (not repeated here); "+
				"percent-encode '@', '/', '?', '#' and ',' in a user name, password or token as %%40, %%2F, %%3F, %%23, %%2C", n)
		}
		u, err := url.Parse(part)
		if err != nil {
			return natsServers{}, fmt.Errorf("--to: server %d is not a URL: %s (percent-encode special characters in a password or token)", n, urlErr(err))
		}
		if s := strings.ToLower(scheme); s != "nats" && s != "tls" {
			return natsServers{}, errNATSScheme
		}
		if u.Host == "" {
			return natsServers{}, fmt.Errorf("--to: server %d names no host", n)
		}
		if !validHostPort(u.Host) {
			// What a ',' in a query or fragment leaves for the next
			// server, or a DSN given as --to.
			return natsServers{}, fmt.Errorf("--to: server %d does not name a host and port (not repeated here); want nats://host:port", n)
		}
		if u.User != nil {
			// net/url ends the user information at the authority's last
			// '@', as nats.go reads it.
			authority := afterScheme
			if end := strings.IndexAny(afterScheme, "/?#"); end >= 0 {
				authority = afterScheme[:end]
			}
			info := authority[:strings.LastIndexByte(authority, '@')]
			if pw, ok := u.User.Password(); ok {
				_, raw, _ := strings.Cut(info, ":")
				ns.secrets = append(ns.secrets, pw, raw)
			} else {
				ns.secrets = append(ns.secrets, u.User.Username(), info)
			}
		}
		// nats.go reads no query or fragment, and prints neither: a
		// short value there (?v=1) is not worth withholding every
		// message that holds its characters.
		var tail []string // the query (with the fragment an unencoded '#' starts) and the fragment, as typed
		if q := strings.IndexByte(afterScheme, '?'); q >= 0 {
			for _, p := range rawQueryParams(afterScheme[q+1:]) {
				tail = append(tail, p.forms()...)
			}
		}
		if h := strings.IndexByte(afterScheme, '#'); h >= 0 {
			tail = append(tail, afterScheme[h+1:])
		}
		for _, v := range append(tail, u.Fragment) {
			if len(v) >= minScrubLen {
				ns.secrets = append(ns.secrets, v)
			}
		}
		shown = append(shown, natsDisplay(u))
	}
	if n == 0 {
		return natsServers{}, errors.New("--to names no server (want nats://host:port)")
	}
	ns.display = strings.Join(shown, ",")
	for _, v := range credentialSpans(s) {
		if len(v) >= minScrubLen && strings.Contains(ns.display, v) {
			// Not expected: what maskCredentials masks of the list is
			// gone from display. Should a reading of it differ, the
			// servers are not shown.
			ns.display = "the servers of --to (not shown: they may hold a credential)"
		}
	}
	// And what maskCredentials masks of the whole list: a message that
	// quotes it loses what any reading of it takes for a credential.
	for _, v := range credentialSpans(s) {
		if len(v) >= minScrubLen {
			ns.secrets = append(ns.secrets, v)
		}
	}
	return ns, nil
}

// natsDisplay returns u with its password or token replaced by xxxxx,
// and no path, query or fragment (nats.go reads none of them; a DSN
// given as --to by mistake would show its password there).
func natsDisplay(u *url.URL) string {
	c := *u
	if c.User != nil {
		if _, ok := c.User.Password(); !ok {
			c.User = url.User(scrubMask) // a token
		}
	}
	c.Path, c.RawPath = "", ""
	return redact(&c)
}

// scrub returns msg, a NATS client's message, as one line with every
// credential of the servers replaced by xxxxx (natsWithheld when it
// cannot be cleaned: see scrubSecrets).
func (ns natsServers) scrub(msg string) string {
	return scrubSecrets(msg, ns.secrets, natsWithheld)
}

// validHostPort reports whether hp is a host name, an IPv4 address or a
// bracketed IPv6 address, with an optional numeric port.
func validHostPort(hp string) bool {
	host, port := hp, ""
	if strings.HasPrefix(hp, "[") {
		end := strings.IndexByte(hp, ']')
		if end < 0 || net.ParseIP(hp[1:end]) == nil {
			return false
		}
		host, port = "", hp[end+1:]
		if port != "" && port[0] != ':' {
			return false
		}
		port = strings.TrimPrefix(port, ":")
	} else if i := strings.LastIndexByte(hp, ':'); i >= 0 {
		host, port = hp[:i], hp[i+1:]
	}
	for i := 0; i < len(port); i++ {
		if port[i] < '0' || port[i] > '9' {
			return false
		}
	}
	for i := 0; i < len(host); i++ {
		c := host[i]
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '.' || c == '-' || c == '_') {
			return false
		}
	}
	return hp != "" && (host != "" || strings.HasPrefix(hp, "["))
}
