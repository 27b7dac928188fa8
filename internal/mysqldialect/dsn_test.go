package mysqldialect_test

import (
	"errors"
	"net/url"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/opledger/opledger/internal/mysqldialect"
)

// TestConfigErrorsHideThePassword: a DSN that does not parse, however
// broken, gives an error that matches ErrBadDSN and does not hold its
// password, and Display does not show it.
func TestConfigErrorsHideThePassword(t *testing.T) {
	const pw = "s3cr3tpw"
	for _, dsn := range []string{
		"mysql://u:" + pw + "@h/d?clientFoundRows=maybe",
		"mysql://u:" + pw + "@h:port/d",
		"mysql://u:" + pw + "%zz@h/d",
		"mysql://u:12/" + pw + "@h/db",
		"mysql://u:12/" + pw + "@h",
		"mysql://u:1234?" + pw + "@h",
		"mysql://u:" + pw + "@h/a%2Fb",
		"mysql://u:" + pw + "@h/d?tls=" + pw,
		"u:" + pw + "@tcp(h/d",
		"u:" + pw + "@h",
		"u:pa/" + pw + "@host",
		"u:pa/" + pw + "%zz@tcp(h)",
		"u:" + pw + "@tcp(h)/d?tls=" + pw,
		"u:" + pw + "@tcp(h)/d?parseTime=" + pw,
		"u:" + pw + "@tcp(h)/d?x=@&parseTime=" + pw,
		"u:" + pw + "@foo/d",
		"/x:" + pw + "@host",
		"mysql://u@h/d?password=" + pw,
		"u@tcp(h)/d?Password=" + pw,
		"u:" + pw + "@tcp(h)/db?x=@",
	} {
		_, err := mysqldialect.Config(dsn)
		if !errors.Is(err, mysqldialect.ErrBadDSN) {
			t.Errorf("Config(%q): %v, want ErrBadDSN", dsn, err)
			continue
		}
		if strings.Contains(err.Error(), pw) {
			t.Errorf("Config(%q): error %q holds the password", dsn, err)
		}
		if d := mysqldialect.Display(dsn); strings.Contains(d, pw) {
			t.Errorf("Display(%q) = %q", dsn, d)
		}
	}
	// A useful driver message survives, without the password.
	_, err := mysqldialect.Config("u:" + pw + "@tcp(h)/d?tls=" + pw)
	if err == nil || !strings.Contains(err.Error(), "unknown config name: xxxxx") {
		t.Errorf("tls: %v", err)
	}
	_, err = mysqldialect.Config("u:" + pw + "@h")
	if err == nil || !strings.Contains(err.Error(), "missing the slash") {
		t.Errorf("no slash: %v", err)
	}
	// A password shorter than four bytes is not replaced, but the message
	// withheld.
	_, err = mysqldialect.Config("u:pe@tcp(h)/d?tls=pe")
	if err == nil || strings.Contains(err.Error(), "pe") && !strings.Contains(err.Error(), "withheld") {
		t.Errorf("short password: %v", err)
	}
}

// configForms build a DSN from fuzzed parts around a known password.
var configForms = []func(scheme, user, pw, host, db string) string{
	func(s, u, p, h, d string) string { return s + "://" + u + ":" + p + "@" + h + "/" + d },
	func(s, u, p, h, d string) string { return "mysql://" + u + ":" + p + "@" + h + "/" + d + "?" + s },
	func(s, u, p, h, d string) string { return u + ":" + p + "@tcp(" + h + ")/" + d },
	func(s, u, p, h, d string) string { return u + ":" + p + "@" + s + "(" + h + ")/" + d + "?" + s },
	func(s, u, p, h, d string) string { return u + ":" + p + "@" + h },
	func(s, u, p, h, d string) string { return u + ":" + p + "@" + h + "/" + d },
	func(s, u, p, h, d string) string { return u + ":" + p + "@unix(" + h + ")/" + d },
	func(s, u, p, h, d string) string { return u + ":" + p + "@/" + d },
	func(s, u, p, h, d string) string { return s + "://" + u + ":" + p + "@" + h },
}

const placeholderPassword = "Zq9placeholder9Zq"

// configOutput is what a caller may print about dsn: Config's error, or
// Display.
func configOutput(dsn string) string {
	if _, err := mysqldialect.Config(dsn); err != nil {
		if !errors.Is(err, mysqldialect.ErrBadDSN) {
			return "error not matching ErrBadDSN: " + err.Error()
		}
		return err.Error()
	}
	return mysqldialect.Display(dsn)
}

// FuzzConfigPassword checks that for a DSN of any of configForms, with a
// fuzzed password of at least four characters, neither Config's error nor
// Display holds the password (as given, or percent-decoded for URLs), and
// that nothing panics. (FuzzConfig, in mysql_test.go, checks that what
// parses formats back.) A password the other parts print by themselves is
// not a leak: it is told apart by the same DSN with a placeholder
// password.
//
//	go test -run '^$' -fuzz '^FuzzConfigPassword$' -fuzztime 30s ./internal/mysqldialect/
func FuzzConfigPassword(f *testing.F) {
	const pw = "s3cr3tpw"
	for _, s := range []struct {
		form                       uint8
		scheme, user, pw, host, db string
	}{
		{0, "mysql", "u", pw, "127.0.0.1:1", "x"},
		{0, "mariadb", "u", "12/" + pw, "h", "x"},
		{0, "mysql", "u", pw + "%zz", "h", "x"},
		{0, "mysql", "u", pw, "h:port", "x"},
		{0, "mysql", "u", pw, "h", "a%2Fb"},
		{1, "tls=" + pw, "u", pw, "h", "x"},
		{1, "socket=/s", "u", pw, "h", "x"},
		{2, "", "u", pw, "127.0.0.1:1", "x"},
		{2, "", "u", "p@ss/w:rd", "h", "x?parseTime=perhaps"},
		{3, "tcp", "u", pw, "h", "x"},
		{3, "foo", "u", pw, "h", "x"},
		{4, "", "u", pw, "db.internal", ""},
		{4, "", "u", "pa/" + pw, "tcp(h)", ""},
		{4, "", "/", pw, "", ""}, // found by the fuzzer: "/:pw@" is database ":pw@"
		{5, "", "u", pw, "db.internal:3306", "x"},
		{6, "", "u", pw, "/run/mysqld/mysqld.sock", "x"},
		{7, "", "u", pw, "", "x"},
		{8, "mysql", "u", pw, "h", ""},
		{0, "tidb", "u", pw, "127.0.0.1:4000", "test"},
		{0, "TiDB", "u", "12/" + pw, "h", "x?tidb_txn_mode=optimistic"},
		{8, "tidb", "u", pw, "h", ""},
	} {
		f.Add(s.form, s.scheme, s.user, s.pw, s.host, s.db)
	}
	var vocab strings.Builder
	for _, dsn := range []string{
		"", "mysql://[::1", "mysql://u:p@h:x", "mysql://u@h/a%2Fb", "mysql://u@h/#", "mysql://h/@", "mysql:x",
		"mysql://a%3Ab@h/d", "mysql://h/d?socket=/s", "u:p@tcp(h/d", "u:p@tcp(h)/d?parseTime=x", "u:p@tcp(h)/d?tls=x",
		"u@tcp(h)/%zz", "u:p@tcp(h)", "u:p@foo/d", "u:p@tcp(h)/d?x=@", "tidb://u@h/d", "tidb://[::1",
	} {
		vocab.WriteString(configOutput(dsn) + "\n")
	}
	f.Fuzz(func(t *testing.T, form uint8, scheme, user, pw, host, db string) {
		if utf8.RuneCountInString(pw) < 4 {
			return
		}
		build := configForms[int(form)%len(configForms)]
		dsn := build(scheme, user, pw, host, db)
		out := configOutput(dsn)
		if strings.HasPrefix(out, "error not matching ErrBadDSN") {
			t.Fatalf("DSN %q: %s", dsn, out)
		}
		benign := configOutput(build(scheme, user, placeholderPassword, host, db))
		forms := []string{pw}
		for _, dec := range []func(string) (string, error){url.PathUnescape, url.QueryUnescape} {
			if d, err := dec(pw); err == nil && d != pw && utf8.RuneCountInString(d) >= 4 {
				forms = append(forms, d)
			}
		}
		for _, p := range forms {
			if !strings.Contains(out, p) || strings.Contains(benign, p) || strings.Contains(vocab.String(), p) ||
				strings.Contains(placeholderPassword, p) {
				continue
			}
			t.Fatalf("DSN %q: the output holds the password %q:\n%s", dsn, p, out)
		}
	})
}
