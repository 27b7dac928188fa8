package main

import (
	"io"
	"os"
	"sort"
	"strconv"
	"strings"
)

// maskCredentials returns s, an argument a message repeats, with every
// credential it may hold, in any of the forms a user types one, replaced
// by xxxxx; s itself when it holds none. It does not parse s: it masks
// by shape, more than a parser would, so that no reading of s (net/url's,
// pgx's, go-sql-driver's, nats.go's comma-separated server list) finds a
// credential left in the result:
//
//   - the user information: everything from the first "://" (from the
//     start without one, or with an '@' before it) up to the last '@'.
//     A plain user name before a ':' stays (postgres://app:xxxxx@db/app);
//     so does a user name alone in a database URL or a go-sql-driver DSN
//     (postgres://app@db/app, app@tcp(db)/app, in a string with no other
//     URL), which holds no password. A user name alone in any other URL
//     is a token (nats://TOKEN@host) and is masked, as is any user
//     information that is not a plain name (a second URL of a list, a
//     password with a ':', '@' or ',');
//   - the query, from the first '?', but its first key (?k=xxxxx): a
//     password=, a token=, an nkey seed under any name;
//   - a URL's fragment, from the first '#' (#xxxxx);
//   - everything after a key that names a secret (password=, sslpassword=,
//     pwd=, token=, secret=, nkey=, seed=, jwt=, auth…=, cred…=) to the
//     end of s: a libpq keyword/value string, or such a key anywhere.
func maskCredentials(s string) string {
	hide := credentialBytes(s)
	if hide == nil {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if !hide[i] {
			b.WriteByte(s[i])
			continue
		}
		b.WriteString(scrubMask)
		for i+1 < len(s) && hide[i+1] {
			i++
		}
	}
	return b.String()
}

// credentialSpans returns the runs of s that maskCredentials masks.
func credentialSpans(s string) []string {
	hide := credentialBytes(s)
	var out []string
	for i := 0; i < len(hide); i++ {
		if !hide[i] {
			continue
		}
		j := i
		for j < len(hide) && hide[j] {
			j++
		}
		out = append(out, s[i:j])
		i = j
	}
	return out
}

// credentialBytes marks the bytes of s that maskCredentials masks (nil:
// none).
func credentialBytes(s string) []bool {
	hide := make([]bool, len(s))
	hidden := false
	mark := func(from, to int) {
		for i := from; i < to; i++ {
			hide[i], hidden = true, true
		}
	}
	sep := strings.Index(s, "://")
	at := strings.LastIndexByte(s, '@')
	start := 0 // where the user information may begin
	if sep >= 0 && sep+3 <= at && !strings.Contains(s[:sep], "@") {
		start = sep + 3
	}
	if at >= 0 {
		info := s[start:at]
		keep := 0
		if c := strings.IndexByte(info, ':'); c >= 0 {
			if plainName(info[:c]) {
				keep = c + 1
			}
		} else if plainName(info) && (start > 0 && databaseScheme(s[:sep]) || sep < 0 && driverAddress(s[at+1:])) {
			keep = len(info)
		}
		mark(start+keep, at)
	}
	// The first '?' and '#' anywhere: one in the user information or
	// before it masks more than a parser would, never less.
	if q := strings.IndexByte(s, '?'); q >= 0 {
		// The first key stays; the rest is masked, keys included (an
		// unencoded '&' in a value makes a key of its rest).
		first := s[q+1:]
		if amp := strings.IndexByte(first, '&'); amp >= 0 {
			first = first[:amp]
		}
		if eq := strings.IndexByte(first, '='); eq >= 0 {
			mark(q+1+eq+1, len(s))
		} else {
			mark(q+1, len(s))
		}
	}
	if sep >= 0 {
		if h := strings.IndexByte(s, '#'); h >= 0 {
			mark(h+1, len(s))
		}
	}
	for i := 0; i < len(s); i++ {
		if s[i] == '=' && secretKey(keyBefore(s, i)) {
			mark(i+1, len(s))
			break
		}
	}
	if !hidden {
		return nil
	}
	return hide
}

// plainName reports whether s is a user name that holds nothing else:
// not empty, letters, digits and . _ - ~ + only.
func plainName(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || strings.IndexByte("._-~+", c) >= 0) {
			return false
		}
	}
	return true
}

// databaseScheme reports whether scheme is one of the database URL
// schemes, whose user name alone is no secret.
func databaseScheme(scheme string) bool {
	switch strings.ToLower(scheme) {
	case "postgres", "postgresql", "mysql", "mariadb", "tidb":
		return true
	}
	return false
}

// driverAddress reports whether s, what follows the '@' of a DSN without
// a scheme, is a go-sql-driver address: tcp(…), unix(…) or /db.
func driverAddress(s string) bool {
	for _, p := range []string{"tcp(", "tcp4(", "tcp6(", "unix(", "/"} {
		if strings.HasPrefix(s, p) {
			return true
		}
	}
	return false
}

// keyBefore returns the key that ends before s[eq], an '=': letters,
// digits and _ . -, after skipping blanks.
func keyBefore(s string, eq int) string {
	end := eq
	for end > 0 && (s[end-1] == ' ' || s[end-1] == '\t') {
		end--
	}
	from := end
	for from > 0 {
		c := s[from-1]
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '_' || c == '.' || c == '-') {
			break
		}
		from--
	}
	return s[from:end]
}

// secretKey reports whether a parameter named k carries a secret.
func secretKey(k string) bool {
	k = strings.ToLower(k)
	for _, w := range []string{"pass", "pwd", "token", "secret", "seed", "key", "jwt", "auth", "cred", "sig"} {
		if strings.Contains(k, w) {
			return true
		}
	}
	return false
}

// holdsCredential reports whether s reads as a DSN or URL that carries a
// credential: a URL with user information, a query or a fragment;
// user:password@…; a go-sql-driver DSN with a user; a key that names a
// secret (password=…). A bare name@host (an e-mail address, a caller)
// does not: output that names it is left alone (maskCredentials still
// masks it where a message repeats an argument).
func holdsCredential(s string) bool {
	if maskCredentials(s) == s {
		return false
	}
	if sep := strings.Index(s, "://"); sep >= 0 {
		return true
	}
	at := strings.LastIndexByte(s, '@')
	if at >= 0 && (strings.Contains(s[:at], ":") || driverAddress(s[at+1:])) {
		return true
	}
	for i := 0; i < len(s); i++ {
		if s[i] == '=' && secretKey(keyBefore(s, i)) {
			return true
		}
	}
	return false
}

// argMasker replaces, in what a command prints, every argument (or
// OPLEDGER_DSN) that holds a credential by its masked form: a net under
// the messages that repeat an argument on purpose (which mask it
// themselves), for those that do so by accident, such as the flag
// package's "invalid value … for flag" or a library's error quoting a
// flag's value.
type argMasker struct {
	old, new []string // longest first
}

// newArgMasker returns the masker of args and OPLEDGER_DSN. It considers
// each argument whole and, for a flag (-name=value), its name and value
// apart, as the flag package repeats them.
func newArgMasker(args []string) *argMasker {
	cands := append([]string{os.Getenv("OPLEDGER_DSN")}, args...)
	for _, a := range args {
		if n, ok := strings.CutPrefix(a, "-"); ok {
			n = strings.TrimPrefix(n, "-")
			cands = append(cands, n)
			if name, value, ok := strings.Cut(n, "="); ok {
				cands = append(cands, name, value)
			}
		}
	}
	pairs := map[string]string{}
	for _, c := range cands {
		if strings.TrimSpace(c) == "" || !holdsCredential(c) {
			continue
		}
		m := maskCredentials(c)
		// As given; with its blanks collapsed (or trimmed), as oneLine
		// prints an error; and each as %q prints it (the flag
		// package's "invalid value %q").
		for _, o := range []string{c, strings.Join(strings.Fields(c), " ")} {
			pairs[o] = m
			if q := strconv.Quote(o); q[1:len(q)-1] != o {
				pairs[q[1:len(q)-1]] = strings.Trim(strconv.Quote(m), `"`)
			}
		}
	}
	am := &argMasker{}
	for o := range pairs {
		am.old = append(am.old, o)
	}
	sort.Slice(am.old, func(i, j int) bool {
		if len(am.old[i]) != len(am.old[j]) {
			return len(am.old[i]) > len(am.old[j])
		}
		return am.old[i] < am.old[j]
	})
	for _, o := range am.old {
		am.new = append(am.new, pairs[o])
	}
	return am
}

// mask returns s with every credential-holding argument masked.
func (m *argMasker) mask(s string) string {
	for i, o := range m.old {
		if strings.Contains(s, o) {
			s = strings.ReplaceAll(s, o, m.new[i])
		}
	}
	return s
}

// maskingWriter masks every write with an argMasker. It masks each write
// alone: the commands print a message with one write.
type maskingWriter struct {
	w io.Writer
	m *argMasker
}

func (mw maskingWriter) Write(p []byte) (int, error) {
	if len(mw.m.old) == 0 {
		return mw.w.Write(p)
	}
	s := mw.m.mask(string(p))
	if _, err := io.WriteString(mw.w, s); err != nil {
		return 0, err
	}
	return len(p), nil
}

// Unwrap returns the writer underneath (isTerminal looks through it).
func (mw maskingWriter) Unwrap() io.Writer { return mw.w }
