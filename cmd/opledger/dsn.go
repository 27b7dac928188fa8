package main

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io/fs"
	"net/url"
	"os"
	"strconv"
	"strings"
	"time"

	_ "github.com/jackc/pgx/v5/stdlib" // driver "pgx"
	_ "github.com/mattn/go-sqlite3"    // driver "sqlite3"

	"github.com/opledger/opledger/dialects"
	"github.com/opledger/opledger/dialects/postgres"
	"github.com/opledger/opledger/dialects/sqlite"
)

// defaultSQLiteFile is the embedded default database.
const defaultSQLiteFile = "opledger.db"

// dsnFrom returns the --dsn flag's value, else OPLEDGER_DSN, else the
// default SQLite file.
func dsnFrom(flagValue string) string {
	if flagValue != "" {
		return flagValue
	}
	if v := os.Getenv("OPLEDGER_DSN"); v != "" {
		return v
	}
	return defaultSQLiteFile
}

// target is a database chosen by DSN.
type target struct {
	driver  string
	dsn     string // in the driver's own format
	dialect dialects.Dialect
	display string // safe to print: no password
	// sqlitePath is the file of a SQLite target ("" for a server).
	sqlitePath string
	// secrets are the passwords dsn holds, as parsed; scrub removes them
	// from the drivers' messages.
	secrets []string
	// detect, when set, asks the opened database which dialect it needs
	// (a mysql:// URL may reach TiDB); openDB replaces dialect with its
	// answer, and reopens the pool with dsn when that is not empty.
	detect func(ctx context.Context, db *sql.DB) (d dialects.Dialect, dsn string, err error)
}

// acceptedForms names the DSN forms parseDSN takes, for its errors.
const acceptedForms = "want postgres://user:pass@host:port/db, mysql://user:pass@host:port/db, " +
	"tidb://user:pass@host:port/db, user:pass@tcp(host:port)/db, sqlite:PATH or a file path"

// errUnrecognised is parseDSN's error for a DSN it cannot place. Like every
// error of parseDSN it quotes no part of the DSN, which may hold a password.
var errUnrecognised = errors.New("DSN not recognised (not repeated here: it may hold a password); " + acceptedForms)

// errSQLiteAt is parseDSN's error for a sqlite: or file: DSN with an '@'.
var errSQLiteAt = errors.New("a sqlite: or file: DSN with an '@' is refused " +
	"(not repeated here: it may be user:password@host for a user named sqlite or file); " +
	"give such a file as a plain path, ./dir@x/y.db")

// errKeywordValue is parseDSN's error for a libpq keyword/value string.
var errKeywordValue = errors.New("keyword/value connection strings are not supported " +
	"(not repeated here: it may hold a password); want postgres://user:pass@host:port/db")

// parseDSN picks driver and dialect by the DSN's form. It never opens a
// connection, and its errors never contain the DSN or any part of it but
// a scheme name. The forms, tried in this order:
//
//   - A Windows drive path, a letter followed by `:\` or `:/` (C:\data\x.db,
//     c:/x.db): SQLite. A letter followed by anything else is a scheme.
//   - postgres:// and postgresql:// URLs: PostgreSQL through pgx. The URL
//     must parse with net/url, and may hold one '@' only, the one that ends
//     the user and password, and no '#': an '@' in a password must be
//     written %40 (and '/', '?', '#' as %2F, %3F, %23), because net/url
//     and pgx split an unencoded one differently.
//   - Schemes added through extraSchemes (mysql://, mariadb://, tidb://).
//   - sqlite:PATH, sqlite3:PATH (also sqlite:///abs/path) and file:PATH:
//     SQLite; a query (?...) after the path is dropped (after the checks
//     below).
//   - A libpq keyword/value string (host=… user=…) is an error.
//   - The forms added through schemelessForms: go-sql-driver's
//     user:pass@tcp(host:port)/db (see mysql.go).
//   - Anything else with a scheme (a name, then ':') is an error.
//   - A plain path: SQLite.
//
// A DSN that may hold a password is never taken for a SQLite path, which
// would create a file named after the password and print it. An '@' may
// end a user:password, so:
//
//   - sqlite:, sqlite3: and file: DSNs with an '@' anywhere are refused
//     (sqlite:pass/word@host is a user named sqlite);
//   - so are drive paths (u:/pass@host is a one-letter user and a
//     password that starts with '/');
//   - a plain path is refused when a ':' comes before an '@' in it
//     (user:password@host), or its first element (before the first '/' or
//     '\') holds an '@' (user@host, password@host). An '@' after a '/'
//     with no ':' before it (./dir@2/x.db, /srv/a@b/x.db) cannot be read
//     as user:password@host, and stays SQLite: that is how to name a file
//     with an '@' (./user@host.db).
//
// Any SQLite path is also refused when it assigns a password-like key
// (pass…=, pwd=) or reads as a libpq keyword/value string (host=… user=…).
func parseDSN(dsn string) (target, error) {
	dsn = strings.TrimSpace(dsn)
	if dsn == "" {
		return target{}, errors.New("empty DSN")
	}
	if isDrivePath(dsn) {
		return sqlitePathTarget(dsn, dsn)
	}
	scheme, rest, hasColon := strings.Cut(dsn, ":")
	isScheme := hasColon && isSchemeName(scheme)
	isURL := isScheme && strings.HasPrefix(rest, "//")
	lower := strings.ToLower(scheme)
	if isScheme {
		switch lower {
		case "sqlite", "sqlite3", "file":
			whole := strings.TrimPrefix(rest, "//")
			path, _, _ := strings.Cut(whole, "?")
			if path == "" {
				return target{}, fmt.Errorf("%s DSN names no file (want sqlite:PATH)", lower)
			}
			if strings.Contains(whole, "@") {
				return target{}, errSQLiteAt
			}
			return sqlitePathTarget(path, whole)
		case "postgres", "postgresql":
			if isURL {
				return postgresTarget(dsn, lower)
			}
		default:
			if opener, ok := extraSchemes[lower]; ok && isURL {
				return opener(dsn)
			}
		}
	}
	if isKeywordValue(dsn) {
		// Before the driver form: host=@/ user=u password=p parses as one.
		return target{}, errKeywordValue
	}
	for _, form := range schemelessForms {
		if t, ok, err := form(dsn); ok {
			return t, err
		}
	}
	if isScheme {
		if _, ok := extraSchemes[lower]; ok || lower == "postgres" || lower == "postgresql" {
			return target{}, fmt.Errorf("a %s DSN is a URL: want %s://user:pass@host:port/db", lower, lower)
		}
		if isURL || !strings.Contains(dsn, "@") {
			// The scheme precedes the first ':', so it holds no password.
			return target{}, fmt.Errorf("unknown DSN scheme %q (%s)", scheme, acceptedForms)
		}
		return target{}, errUnrecognised
	}
	return sqlitePathTarget(dsn, dsn)
}

// extraSchemes lets other files add DSN schemes (mysql). parseDSN calls an
// opener only for a DSN that starts with the scheme and "://".
var extraSchemes = map[string]func(dsn string) (target, error){}

// schemelessForms lets other files add DSN forms recognised by shape
// rather than by scheme (go-sql-driver's user:pass@tcp(host)/db). Each
// returns ok false for a DSN it does not take; its error, like
// parseDSN's, must not contain the password.
var schemelessForms []func(dsn string) (t target, ok bool, err error)

// isDrivePath reports whether s starts with a Windows drive letter and a
// separator: C:\ or c:/.
func isDrivePath(s string) bool {
	return len(s) >= 3 && s[1] == ':' && (s[2] == '\\' || s[2] == '/') &&
		('a' <= s[0] && s[0] <= 'z' || 'A' <= s[0] && s[0] <= 'Z')
}

// isSchemeName reports whether s can be a URL scheme (RFC 3986: a letter,
// then letters, digits, '+' or '-'). A '.' is allowed there too, but
// "x.db:1" has always been a file name here, so a name with a '.' is not
// taken for a scheme.
func isSchemeName(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z':
		case i > 0 && ('0' <= c && c <= '9' || c == '+' || c == '-'):
		default:
			return false
		}
	}
	return true
}

// sqlitePathTarget returns the SQLite target of path if whole, the DSN
// it comes from without its scheme (path and the query parseDSN drops),
// cannot hold a password (see parseDSN).
func sqlitePathTarget(path, whole string) (target, error) {
	p := whole
	if isDrivePath(p) {
		// u:/pass@host: a one-letter user and a password that starts
		// with a separator.
		if strings.Contains(p, "@") {
			return target{}, errUnrecognised
		}
		p = p[2:]
	}
	if at := strings.LastIndexByte(p, '@'); at >= 0 {
		if strings.Contains(p[:at], ":") {
			return target{}, errUnrecognised
		}
		first := p
		if i := strings.IndexAny(p, `/\`); i >= 0 {
			first = p[:i]
		}
		if strings.Contains(first, "@") {
			return target{}, errUnrecognised
		}
	}
	if isKeywordValue(p) {
		return target{}, errKeywordValue
	}
	if assignsPassword(p) {
		return target{}, errUnrecognised
	}
	return sqliteTarget(path), nil
}

// assignsPassword reports whether s holds a password-like key followed by
// '=' (password=, sslpassword=, _auth_pass=, pwd =), ignoring case.
func assignsPassword(s string) bool {
	l := strings.ToLower(s)
	for _, key := range []string{"pass", "pwd"} {
		for i := 0; ; {
			j := strings.Index(l[i:], key)
			if j < 0 {
				break
			}
			k := i + j + len(key)
			for k < len(l) && (l[k] == '_' || 'a' <= l[k] && l[k] <= 'z' || '0' <= l[k] && l[k] <= '9') {
				k++
			}
			for k < len(l) && (l[k] == ' ' || l[k] == '\t') {
				k++
			}
			if k < len(l) && l[k] == '=' {
				return true
			}
			i += j + 1
		}
	}
	return false
}

// isPasswordKey reports whether the parameter name k names a password
// (password, sslpassword, pwd), ignoring case.
func isPasswordKey(k string) bool {
	k = strings.ToLower(k)
	return strings.Contains(k, "pass") || strings.Contains(k, "pwd")
}

// isKeywordValue reports whether s starts like a libpq (or ODBC)
// keyword/value connection string: host=… user=….
func isKeywordValue(s string) bool {
	key, _, ok := strings.Cut(s, "=")
	if !ok {
		return false
	}
	switch strings.ToLower(strings.TrimSpace(key)) {
	case "host", "hostaddr", "port", "dbname", "user", "password", "sslmode", "service",
		"server", "database", "uid", "pwd", "data source":
		return true
	}
	return false
}

func sqliteTarget(path string) target {
	return target{driver: "sqlite3", dsn: sqlite.DSN(path, 5*time.Second), dialect: sqlite.New(), display: "sqlite:" + path, sqlitePath: path}
}

// openExisting is openDB for the commands that read or operate a ledger
// that must already be there (stats, inspect, sweep, evict, relay,
// migrate status and down): a SQLite file that does not exist is refused
// instead of created empty (a typo in a path would leave a stray file),
// with an error naming opledger migrate up. The file is opened with
// mode=rw, so that one removed meanwhile is not created either.
func openExisting(ctx context.Context, dsn string) (*sql.DB, target, error) {
	t, err := parseDSN(dsn)
	if err != nil || t.sqlitePath == "" || isMemoryPath(t.sqlitePath) {
		return openDB(ctx, dsn)
	}
	if _, err := os.Stat(t.sqlitePath); errors.Is(err, fs.ErrNotExist) {
		note := ""
		if strings.TrimSpace(dsn) == defaultSQLiteFile && os.Getenv("OPLEDGER_DSN") == "" {
			note = " (the default: neither --dsn nor OPLEDGER_DSN is set)"
		}
		return nil, t, fmt.Errorf("no SQLite database at %s%s, and none created: create it with opledger migrate up, or check the path", t.sqlitePath, note)
	}
	t.dsn += "&mode=rw"
	pctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	db, err := t.open(pctx)
	return db, t, err
}

// isMemoryPath reports whether a SQLite path names an in-memory database.
func isMemoryPath(p string) bool { return strings.HasPrefix(p, ":memory:") }

// postgresTarget reads a postgres:// or postgresql:// URL (scheme is its
// scheme in lower case).
func postgresTarget(dsn, scheme string) (target, error) {
	u, err := url.Parse(dsn)
	if err != nil {
		return target{}, fmt.Errorf("bad %s URL: %s (percent-encode special characters in the user name and password)", scheme, urlErr(err))
	}
	// net/url takes the last '@' of the authority (which ends at the first
	// '/', '?' or '#'); pgx, like libpq, the first '@' before the first
	// '/'. With one '@', in the authority, both read the same password.
	afterScheme := dsn[len(scheme)+len("://"):]
	end := strings.IndexAny(afterScheme, "/?#")
	if end < 0 {
		end = len(afterScheme)
	}
	if strings.Contains(dsn, "#") {
		// net/url takes a fragment for what pgx reads as path and query.
		return target{}, fmt.Errorf("bad %s URL: a '#' (percent-encode it as %%23)", scheme)
	}
	if strings.Count(afterScheme[:end], "@") > 1 || strings.Contains(afterScheme[end:], "@") {
		return target{}, fmt.Errorf("bad %s URL: an '@' in the user name, the password or after the host "+
			"(percent-encode '@' as %%40, and '/', '?', '#' as %%2F, %%3F, %%23)", scheme)
	}
	t := target{
		driver: "pgx",
		// pgx recognises a URL by its lower-case scheme only.
		dsn:     scheme + dsn[len(scheme):],
		dialect: postgres.New(),
		display: redact(u),
	}
	if u.User != nil {
		if pw, ok := u.User.Password(); ok {
			t.secrets = append(t.secrets, pw)
		}
		if _, raw, ok := strings.Cut(afterScheme[:strings.IndexByte(afterScheme[:end], '@')], ":"); ok {
			t.secrets = append(t.secrets, raw)
		}
	}
	// pgx also takes password= and sslpassword= in the query. Besides the
	// value, the rest of the query from it is a secret: an unencoded '&'
	// in the password splits it there.
	for _, p := range rawQueryParams(u.RawQuery) {
		if p.assigned && isPasswordKey(p.key) {
			t.secrets = append(t.secrets, p.forms()...)
		}
	}
	return t, nil
}

// queryParam is one key=value of a raw query, as typed.
type queryParam struct {
	key, value string
	assigned   bool   // the part has an '=' (else value is the whole part)
	rest       string // the query from value on: an unencoded '&' in a value splits it there
}

// rawQueryParams splits a raw query at every '&'.
func rawQueryParams(q string) []queryParam {
	var out []queryParam
	for start := 0; start < len(q); {
		end := strings.IndexByte(q[start:], '&')
		if end < 0 {
			end = len(q)
		} else {
			end += start
		}
		p := queryParam{value: q[start:end]}
		if k, v, ok := strings.Cut(q[start:end], "="); ok {
			p = queryParam{key: k, value: v, assigned: true}
		}
		p.rest = q[end-len(p.value):]
		out = append(out, p)
		start = end + 1
	}
	return out
}

// forms returns p's value as typed and decoded, and the rest of the
// query from it: the forms a password there may take.
func (p queryParam) forms() []string {
	out := []string{p.value, p.rest}
	if d, err := url.QueryUnescape(p.value); err == nil {
		out = append(out, d)
	}
	return out
}

// openDB opens and pings the database named by dsn and, when the target
// must ask the server which dialect it needs (t.detect), asks it. Its
// errors never contain the password: the drivers' messages pass through
// target.scrub.
func openDB(ctx context.Context, dsn string) (*sql.DB, target, error) {
	t, err := parseDSN(dsn)
	if err != nil {
		return nil, t, err
	}
	pctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	db, err := t.open(pctx)
	if err != nil || t.detect == nil {
		return db, t, err
	}
	d, reopen, err := t.detect(pctx, db)
	if err != nil {
		db.Close()
		return nil, t, fmt.Errorf("cannot tell which server %s is: %s", t.display, t.scrub(err.Error()))
	}
	t.dialect, t.detect = d, nil
	if reopen == "" {
		return db, t, nil
	}
	// The dialect needs settings on every connection (TiDB: pessimistic
	// transactions): open the pool again with them.
	db.Close()
	t.dsn = reopen
	db, err = t.open(pctx)
	return db, t, err
}

// open opens and pings t's database.
func (t target) open(ctx context.Context) (*sql.DB, error) {
	db, err := sql.Open(t.driver, t.dsn)
	if err != nil {
		return nil, fmt.Errorf("open %s: %s", t.display, t.scrub(err.Error()))
	}
	if err := db.PingContext(ctx); err != nil {
		db.Close()
		return nil, fmt.Errorf("cannot reach %s: %s", t.display, t.scrub(err.Error()))
	}
	return db, nil
}

// scrubMask replaces a password or token in a message.
const scrubMask = "xxxxx"

// minScrubLen is the shortest password scrub replaces in a message;
// replacing a shorter one would garble it.
const minScrubLen = 4

// withheld replaces a driver's message that scrub cannot clean.
const withheld = "(the driver's message is withheld: it contains the password)"

// scrub returns msg, a driver's message, as one line with every
// occurrence of the target's passwords, in every form a driver may print
// one (as given, percent-encoded, quoted, with its spaces collapsed),
// replaced by xxxxx. When msg holds a password shorter than minScrubLen,
// or still holds one after the replacing, scrub returns withheld instead:
// pgx, for one, echoes parts of its connection string when it cannot
// parse it, and a best-effort redaction is not enough.
func (t target) scrub(msg string) string {
	return scrubSecrets(msg, t.secrets, withheld)
}

// scrubSecrets is target.scrub for any list of secrets, with withheld
// the message that replaces one it cannot clean.
func scrubSecrets(msg string, secrets []string, withheld string) string {
	var forms []string
	for _, s := range secrets {
		if s == "" {
			continue
		}
		forms = append(forms, s, url.PathEscape(s), url.QueryEscape(s),
			strings.TrimPrefix(url.UserPassword("", s).String(), ":"),
			strings.Trim(strconv.Quote(s), `"`), strings.Join(strings.Fields(s), " "))
	}
	// Every occurrence of every form is found in the message as given and
	// the union of them masked: replacing one secret after another would
	// let an earlier replacement cut through a longer secret that holds
	// it (a token 0010 inside a password 0000@0010) and leave the rest
	// of that one shown.
	covered := make([]bool, len(msg))
	for _, f := range forms {
		if f == "" || !strings.Contains(msg, f) {
			continue
		}
		if len(f) < minScrubLen {
			return withheld
		}
		for from := 0; ; {
			i := strings.Index(msg[from:], f)
			if i < 0 {
				break
			}
			for j := from + i; j < from+i+len(f); j++ {
				covered[j] = true
			}
			from += i + 1
		}
	}
	var b strings.Builder
	for i := 0; i < len(msg); i++ {
		if !covered[i] {
			b.WriteByte(msg[i])
			continue
		}
		if i == 0 || !covered[i-1] {
			b.WriteString(scrubMask)
		}
	}
	msg = b.String()
	line := strings.Join(strings.Fields(msg), " ")
	for _, f := range forms {
		if f != "" && (strings.Contains(msg, f) || strings.Contains(line, f)) {
			return withheld
		}
	}
	return line
}

// redact returns u without its password, query and fragment (the query
// may hold password=), for display.
func redact(u *url.URL) string {
	c := *u
	c.Scheme = strings.ToLower(c.Scheme)
	if c.User != nil {
		if _, has := c.User.Password(); has {
			c.User = url.UserPassword(c.User.Username(), scrubMask)
		}
	}
	c.RawQuery, c.ForceQuery, c.Fragment, c.RawFragment = "", false, "", ""
	return c.String()
}

// urlErr drops the URL (which may hold a password) from a parse error,
// and any quoted piece of it the message holds (net/url quotes a bad port
// or escape, which may be part of a password).
func urlErr(err error) string {
	msg := "malformed URL"
	var ue *url.Error
	if errors.As(err, &ue) {
		msg = ue.Err.Error()
	}
	if i, j := strings.IndexByte(msg, '"'), strings.LastIndexByte(msg, '"'); i >= 0 {
		if j == i {
			j = len(msg) - 1
		}
		msg = msg[:i] + msg[j+1:]
	}
	msg = strings.TrimPrefix(oneLine(errors.New(msg)), "net/url: ")
	if msg == "" {
		return "malformed URL"
	}
	return msg
}

// oneLine flattens an error to a single line.
func oneLine(err error) string {
	return strings.Join(strings.Fields(err.Error()), " ")
}
