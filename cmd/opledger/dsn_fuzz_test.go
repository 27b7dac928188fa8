package main

import (
	"net/url"
	"strings"
	"testing"
	"unicode/utf8"
)

// dsnForms build a DSN from fuzzed parts around a known password. The
// forms are those a user may type: URLs with a scheme, go-sql-driver's
// format, user:password@host without a scheme, a password in a query, a
// libpq keyword/value string. Only append to it: the inputs under
// testdata/fuzz/FuzzParseDSN pick a form by its index.
var dsnForms = []func(scheme, user, pw, host, db string) string{
	func(s, u, p, h, d string) string { return s + "://" + u + ":" + p + "@" + h + "/" + d },
	func(s, u, p, h, d string) string { return u + ":" + p + "@tcp(" + h + ")/" + d },
	func(s, u, p, h, d string) string { return u + ":" + p + "@" + h },
	func(s, u, p, h, d string) string { return u + ":" + p + "@" + h + "/" + d },
	func(s, u, p, h, d string) string { return s + ":" + u + ":" + p + "@" + h + "/" + d },
	func(s, u, p, h, d string) string { return s + "://" + u + "@" + h + "/" + d + "?password=" + p },
	func(s, u, p, h, d string) string { return u + ":" + p + "@unix(" + h + ")/" + d },
	func(s, u, p, h, d string) string { return u + ":" + p + "@/" + d },
	func(s, u, p, h, d string) string { return s + "://:" + p + "@" + h + "/" + d },
	func(s, u, p, h, d string) string { return s + "://" + u + ":" + p + "@" + h },
	func(s, u, p, h, d string) string { return u + ":" + p + "@tcp(" + h + ")/" + d + "?" + s },
	func(s, u, p, h, d string) string {
		return "host=" + h + " user=" + u + " password=" + p + " dbname=" + d
	},
	func(s, u, p, h, d string) string { return s + ":" + h + "/" + d + "?_auth_pass=" + p },
	func(s, u, p, h, d string) string { return s + u + ":" + p + "@" + h + d },
}

// placeholderPassword stands in for the fuzzed password to tell what the
// other parts of a DSN alone make parseDSN print.
const placeholderPassword = "Zq9placeholder9Zq"

// parseDSNOutput is everything parseDSN's caller may print about dsn: the
// error, or the display string and, scrubbed, a driver message quoting
// the DSN the driver is given.
func parseDSNOutput(dsn string) string {
	tg, err := parseDSN(dsn)
	if err != nil {
		return err.Error()
	}
	return tg.display + "\n" + tg.scrub("cannot connect: "+tg.dsn)
}

// passwordForms are the password as given and percent-decoded: URL forms
// decode it before use.
func passwordForms(pw string) []string {
	forms := []string{pw}
	for _, dec := range []func(string) (string, error){url.PathUnescape, url.QueryUnescape} {
		if d, err := dec(pw); err == nil && d != pw && utf8.RuneCountInString(d) >= 4 {
			forms = append(forms, d)
		}
	}
	return forms
}

// FuzzParseDSN checks that for a DSN of any of dsnForms, with a fuzzed
// password of at least four characters, neither parseDSN's error nor the
// target's display string (nor a driver message quoting the target's DSN,
// after scrub) holds the password, and that nothing panics. A password the
// other parts print by themselves (a user name equal to it, a word of a
// fixed message) is not a leak: it is told apart by parsing the same DSN
// with a placeholder password.
//
//	go test -run '^$' -fuzz '^FuzzParseDSN$' -fuzztime 30s ./cmd/opledger/
func FuzzParseDSN(f *testing.F) {
	type seed struct {
		form                       uint8
		scheme, user, pw, host, db string
	}
	pw := testPassword
	for _, s := range []seed{
		{0, "postgres", "u", pw, "127.0.0.1:1", "x"},
		{0, "postgresql", "u", pw, "[::1", "x"},
		{0, "postgres", "u", "12/" + pw, "127.0.0.1:1", "x"},
		{0, "postgres", "u", "s@" + pw, "h", "x"},
		{0, "postgres", "u", pw + "%zz", "h", "x"},
		{0, "mysql", "u", pw, "127.0.0.1:1", "x"},
		{0, "mariadb", "u", "12/" + pw, "h", "x"},
		{0, "mysql", "u", pw, "h:port", "x"},
		{0, "tidb", "u", pw, "127.0.0.1:4000", "test"},
		{0, "TiDB", "u", "12/" + pw, "h", "x?tidb_txn_mode=optimistic"},
		{4, "tidb", "u", pw, "h", "x"},
		{9, "tidb", "u", pw, "h", ""},
		{0, "sqlite", "u", pw, "h", "x"},
		{0, "file", "u", pw, "h", "x"},
		{0, "redis", "u", pw, "h", "x"},
		{0, "", "u", pw, "h", "x"},
		{1, "", "u", pw, "127.0.0.1:1", "x"},
		{1, "", "u", "p@ss/w:rd", "127.0.0.1:1", "x"},
		{1, "", "u", pw, "127.0.0.1:1", "x?parseTime=perhaps"},
		{2, "", "u", pw, "db.internal", ""},
		{2, "", "C", pw, "db.internal", ""},
		{2, "", "u", "pa/" + pw, "tcp(h)", ""},
		{3, "", "u", pw, "db.internal:3306", "x"},
		{4, "postgres", "u", pw, "h", "x"},
		{4, "mysql", "u", pw, "h", "x"},
		{5, "postgres", "u", pw, "127.0.0.1:1", "x"},
		{5, "sqlite", "u", pw, "h", "x"},
		{5, "C", "u", pw, "h", "x"},
		{6, "", "u", pw, "/run/mysqld/mysqld.sock", "x"},
		{7, "", "u", pw, "", "x"},
		{8, "postgres", "", pw, "h", "x"},
		{9, "mysql", "u", pw, "h", ""},
		{10, "tls=" + pw, "u", pw, "h", "x"},
		{11, "", "u", pw, "h", "x"},
		{12, "sqlite", "", pw, "h", "x.db"},
		{13, "", "./", pw, "h", "/x.db"},
	} {
		f.Add(s.form, s.scheme, s.user, s.pw, s.host, s.db)
	}
	// The fixed text of the errors, so a password that is a word of
	// them does not count as a leak.
	var vocab strings.Builder
	for _, dsn := range []string{
		"", "sqlite:", "bogus://x", "u:x@y", "postgres:x", "mysql:x", "mariadb:x", "host=x",
		"postgres://u:p@h:x", "postgres://u:%zz@h", "postgres://h h", "postgres://u:p w@h", "postgres://a@b@h",
		"postgres://[::1", "mysql://u:p@h:x", "mysql://u@h/a%2Fb", "mysql://u@h/#", "mysql://h/@",
		"tidb:x", "tidb://u:p@h:x", "tidb://h/@",
		"u:p@tcp(h/d", "u:p@tcp(h)/d?parseTime=x", "u:p@tcp(h)/d?tls=x", "u@tcp(h)/%zz", "u:p@tcp(h)",
	} {
		vocab.WriteString(parseDSNOutput(dsn) + "\n")
	}
	vocab.WriteString(withheld)
	f.Fuzz(func(t *testing.T, form uint8, scheme, user, pw, host, db string) {
		if utf8.RuneCountInString(pw) < 4 {
			return
		}
		build := dsnForms[int(form)%len(dsnForms)]
		dsn := build(scheme, user, pw, host, db)
		out := parseDSNOutput(dsn)
		benign := parseDSNOutput(build(scheme, user, placeholderPassword, host, db))
		for _, p := range passwordForms(pw) {
			if !strings.Contains(out, p) || strings.Contains(benign, p) || strings.Contains(vocab.String(), p) ||
				strings.Contains(placeholderPassword, p) {
				continue
			}
			t.Fatalf("DSN %q: the output holds the password %q:\n%s", dsn, p, out)
		}
	})
}
