package main

import (
	"bytes"
	"errors"
	"strings"
	"testing"
)

// TestMaskCredentials: every form of credential a user types is masked,
// what holds none is left alone.
func TestMaskCredentials(t *testing.T) {
	pw := testPassword
	cases := []struct{ in, want string }{
		// Nothing to mask.
		{"opledger.db", "opledger.db"},
		// An '@' may end a user and password: masked, even where parseDSN
		// takes a SQLite path.
		{"./dir@2/x.db", "xxxxx@2/x.db"},
		{"nats://127.0.0.1:4222", "nats://127.0.0.1:4222"},
		{"spiffe://corp/ns/x", "spiffe://corp/ns/x"},
		{"/pay.v1.Payments/Transfer", "/pay.v1.Payments/Transfer"},
		{"", ""},
		// URLs with a user and password: the user stays.
		{"postgres://app:" + pw + "@db/app", "postgres://app:xxxxx@db/app"},
		{"mysql://root:" + pw + "@127.0.0.1:3306/test", "mysql://root:xxxxx@127.0.0.1:3306/test"},
		{"postgres://app:p@ss:w/rd@db/app", "postgres://app:xxxxx@db/app"},
		// A user alone: a name in a database URL, a token elsewhere.
		{"postgres://app@db/app", "postgres://app@db/app"},
		{"nats://" + pw + "@127.0.0.1:4222", "nats://xxxxx@127.0.0.1:4222"},
		{"tls://" + pw + "@h", "tls://xxxxx@h"},
		// Server lists: every URL's credentials.
		{"nats://a:" + pw + "@h1,nats://b:" + pw + "2@h2", "nats://a:xxxxx@h2"},
		{"nats://h1,nats://" + pw + "@h2", "nats://xxxxx@h2"},
		{"nats://h1," + pw + "@h2", "nats://xxxxx@h2"},
		{pw + "@h1,nats://h2", "xxxxx@h1,nats://h2"},
		{"nats://u:12,34" + pw + "@h", "nats://u:xxxxx@h"},
		// Query values and fragments.
		{"postgres://u@h/db?password=" + pw + "&sslmode=disable", "postgres://u@h/db?password=xxxxx"},
		{"nats://h?token=" + pw, "nats://h?token=xxxxx"},
		{"nats://h?seed=SUAM" + pw + "&x", "nats://h?seed=xxxxx"},
		{"nats://h?" + pw, "nats://h?xxxxx"},
		{"nats://h/x#" + pw, "nats://h/x#xxxxx"},
		{"sqlite:x.db?_auth_pass=" + pw, "sqlite:x.db?_auth_pass=xxxxx"},
		// go-sql-driver's format.
		{"app:" + pw + "@tcp(db:3306)/app", "app:xxxxx@tcp(db:3306)/app"},
		{"app@tcp(db:3306)/app", "app@tcp(db:3306)/app"},
		{"app:" + pw + "@tcp(db:3306)/app?tls=" + pw, "app:xxxxx@tcp(db:3306)/app?tls=xxxxx"},
		// libpq keyword/value strings, and a secret key anywhere.
		{"host=db user=app password=" + pw + " dbname=app", "host=db user=app password=xxxxx"},
		{"host=db password = '" + pw + " x' dbname=app", "host=db password =xxxxx"},
		{"host=db sslpassword=" + pw, "host=db sslpassword=xxxxx"},
		{"Server=db;Uid=app;Pwd=" + pw + ";", "Server=db;Uid=app;Pwd=xxxxx"},
		{"--key=" + pw, "--key=xxxxx"},
	}
	for _, c := range cases {
		if got := maskCredentials(c.in); got != c.want {
			t.Errorf("maskCredentials(%q) = %q, want %q", c.in, got, c.want)
		}
		if strings.Contains(maskCredentials(c.in), pw) {
			t.Errorf("maskCredentials(%q) keeps the password", c.in)
		}
	}
}

// TestArgMasker: output that repeats a credential-holding argument, in
// any of the ways the flag package and the commands repeat one, is
// masked; output that names a caller like name@host is not.
func TestArgMasker(t *testing.T) {
	pw := testPassword
	dsn := "postgres://app:" + pw + "@db/app"
	t.Setenv("OPLEDGER_DSN", "mysql://root:"+pw+"env@h/test")
	m := newArgMasker([]string{"stats", "--calls=" + dsn, "-nats://tok" + pw + "@h", "--caller", "alice@corp", `a"b:` + pw + `@h`})
	for in, want := range map[string]string{
		`invalid value "` + dsn + `" for flag -calls: parse error`: `invalid value "postgres://app:xxxxx@db/app" for flag -calls: parse error`,
		"flag provided but not defined: -nats://tok" + pw + "@h":   "flag provided but not defined: -nats://xxxxx@h",
		"bad flag syntax: --calls=" + dsn:                          "bad flag syntax: --calls=postgres://app:xxxxx@db/app",
		`unexpected argument "a\"b:` + pw + `@h"`:                  `unexpected argument "xxxxx@h"`,
		"cannot reach mysql://root:" + pw + "env@h/test":           "cannot reach mysql://root:xxxxx@h/test",
		"no live entry for alice@corp /a.B/C":                      "no live entry for alice@corp /a.B/C",
	} {
		if got := m.mask(in); got != want {
			t.Errorf("mask(%q) = %q, want %q", in, got, want)
		}
	}
	var b bytes.Buffer
	w := maskingWriter{&b, m}
	if n, err := w.Write([]byte("x " + dsn + "\n")); err != nil || n != len("x "+dsn+"\n") || b.String() != "x postgres://app:xxxxx@db/app\n" {
		t.Errorf("Write: %d %v %q", n, err, b.String())
	}
	if isTerminal(w) {
		t.Error("a masking writer over a buffer is a terminal")
	}
}

// TestParseNATSServers: every server of a list is checked and shown with
// its password, token and query values masked; what nats.go would split
// elsewhere than meant is refused without being repeated.
func TestParseNATSServers(t *testing.T) {
	pw := testPassword
	for in, want := range map[string]string{
		"nats://127.0.0.1:4222":                               "nats://127.0.0.1:4222",
		"127.0.0.1:4222":                                      "nats://127.0.0.1:4222",
		"nats://" + pw + "@h:4222":                            "nats://xxxxx@h:4222",
		"NATS://u:" + pw + "@h":                               "nats://u:xxxxx@h",
		"nats://u:p%2C" + pw + "@h1, nats://" + pw + "@h2,h3": "nats://u:xxxxx@h1,nats://xxxxx@h2,nats://h3",
		"tls://u:" + pw + "@h?token=" + pw + "&x#" + pw:       "tls://u:xxxxx@h",
		"nats://u:p@q" + pw + "@h":                            "nats://u:xxxxx@h",
	} {
		ns, err := parseNATSServers(in)
		if err != nil || ns.display != want {
			t.Errorf("parseNATSServers(%q) = %q, %v; want %q", in, ns.display, err, want)
		}
		if msg := ns.scrub("nats: dial " + in + ": refused"); strings.Contains(msg, pw) {
			t.Errorf("%q: scrub keeps the password: %q", in, msg)
		}
	}
	for _, in := range []string{
		"", " , ", "http://h", "nats://", "nats:///x",
		"nats://h1,u:" + pw + "@h2",        // credentials without a scheme
		"nats://u:12," + pw + "@h",         // a ',' in a password
		"nats://u:12/" + pw + "@h",         // a '/' in a password
		"nats://u:12#" + pw + "@h",         // a '#' in a password
		"nats://u:" + pw + "@h:port",       // a bad port
		"nats://u:" + pw + "%zz@h",         // a bad escape
		"nats://u:" + pw + "@h,http://x:1", // a second server of another scheme
	} {
		ns, err := parseNATSServers(in)
		if err == nil {
			t.Errorf("parseNATSServers(%q) accepted: %q", in, ns.display)
			continue
		}
		if strings.Contains(err.Error(), pw) {
			t.Errorf("parseNATSServers(%q): the error repeats the password: %v", in, err)
		}
	}
	// A short token is withheld rather than masked in a message.
	ns, err := parseNATSServers("nats://ab@h")
	if err != nil {
		t.Fatal(err)
	}
	if got := ns.scrub("nats: authorization violation for ab"); got != natsWithheld {
		t.Errorf("short token: %q", got)
	}
}

// TestScrubbingLogger: relay -v's log lines hold no credential of the
// database or the servers, in a string or an error attribute.
func TestScrubbingLogger(t *testing.T) {
	pw := testPassword
	tg, err := parseDSN("postgres://app:" + pw + "db@h/app")
	if err != nil {
		t.Fatal(err)
	}
	ns, err := parseNATSServers("nats://" + pw + "tok@h1,nats://u:" + pw + "nats@h2")
	if err != nil {
		t.Fatal(err)
	}
	var b bytes.Buffer
	l := scrubbingLogger(&b, tg, ns)
	l.Warn("outbox relay: batch failed "+pw+"tok", "error", "dial nats://"+pw+"tok@h1: "+pw+"db", "err", errors.New("auth "+pw+"nats"))
	if strings.Contains(b.String(), pw) || !strings.Contains(b.String(), "xxxxx") {
		t.Errorf("log line: %s", b.String())
	}
}
