package main

import (
	"bytes"
	"context"
	"path/filepath"
	"strings"
	"testing"
	"unicode/utf8"
)

// urlForms build an argument from fuzzed parts around a known secret (a
// password, a token, a query value): the forms a user types a URL or a
// DSN with credentials in, alone or in a comma-separated server list,
// the secret in the first, the second or every server. Only append to
// it: the inputs under testdata/fuzz/FuzzNoCredentialInMessages pick a
// form by its index.
var urlForms = []func(scheme, user, secret, host, key string) string{
	func(s, u, p, h, k string) string { return s + "://" + u + ":" + p + "@" + h },
	func(s, u, p, h, k string) string { return s + "://" + p + "@" + h },
	func(s, u, p, h, k string) string { return s + "://" + h + "," + s + "://" + u + ":" + p + "@" + h },
	func(s, u, p, h, k string) string { return s + "://" + h + "," + p + "@" + h },
	func(s, u, p, h, k string) string { return s + "://" + h + "?" + k + "=" + p },
	func(s, u, p, h, k string) string {
		return s + "://" + u + ":" + p + "@" + h + "," + s + "://" + p + "@" + h
	},
	func(s, u, p, h, k string) string { return u + ":" + p + "@tcp(" + h + ")/" + k },
	func(s, u, p, h, k string) string {
		return "host=" + h + " user=" + u + " " + k + "password=" + p + " dbname=x"
	},
	func(s, u, p, h, k string) string { return s + "://" + h + "/x#" + p },
	func(s, u, p, h, k string) string { return p + "@" + h + "," + s + "://" + h },
	func(s, u, p, h, k string) string { return s + "://" + u + "@" + h + "/x?" + k + "=" + p + "&y=z" },
	func(s, u, p, h, k string) string { return s + "://" + u + ":" + p + "@" + h + ", " + h },
	func(s, u, p, h, k string) string { return s + "://" + h + "," + s + "://" + p + "@" + h + "?" + k },
}

// placeholderSecret stands in for the fuzzed secret to tell what the
// other parts of an argument alone make a command print.
const placeholderSecret = "Zq9placeholderSecret9Zq"

// messagesAbout is everything the commands print about arg where they
// take no such argument (an unknown command, a positional argument, a
// flag's bad value through the flag package and through a flag.Value's
// error), where it is a relay's --to (its check, then a database that is
// not there), and what the NATS server list shows of it and of a client's
// message quoting it.
func messagesAbout(arg, missingDB string) string {
	var b strings.Builder
	b.WriteString(maskCredentials(arg) + "\n")
	if !strings.HasPrefix(strings.TrimSpace(arg), "-") {
		// One of each way a message repeats an argument (TestNoArgumentEchoed
		// runs them all, on every command).
		for _, args := range [][]string{
			{arg}, {"stats", "--dsn", missingDB, arg}, {"sweep", "--batch=" + arg},
			{"policy", "check", "--keyed", arg}, {"relay", "--dsn", missingDB, "--to", arg},
		} {
			var out, errb bytes.Buffer
			run(context.Background(), args, &out, &errb)
			b.WriteString(out.String() + errb.String())
		}
	}
	if ns, err := parseNATSServers(arg); err != nil {
		b.WriteString(err.Error() + "\n")
	} else {
		b.WriteString(ns.display + "\n" + ns.scrub("nats: cannot connect to "+arg) + "\n")
	}
	return b.String()
}

// FuzzNoCredentialInMessages checks that for an argument of any of
// urlForms with a fuzzed secret of at least four characters, no message
// of the commands (see messagesAbout) holds the secret, as given or
// percent-decoded, and that nothing panics. A secret the other parts
// print by themselves (a host equal to it, a word of a fixed message) is
// not a leak: it is told apart by the same argument with a placeholder
// secret.
//
//	go test -run '^$' -fuzz '^FuzzNoCredentialInMessages$' -fuzztime 30s ./cmd/opledger/
func FuzzNoCredentialInMessages(f *testing.F) {
	type seed struct {
		form                          uint8
		scheme, user, secret, host, k string
	}
	pw := testPassword
	for _, s := range []seed{
		{0, "nats", "u", pw, "127.0.0.1:4222", ""},
		{0, "postgres", "app", pw, "db", ""},
		{0, "nats", "u", "12," + pw, "h", ""},
		{0, "nats", "u", "12/" + pw, "h", ""},
		{0, "nats", "u", "p@" + pw, "h", ""},
		{0, "tls", "u", pw + "%2C", "h", ""},
		{1, "nats", "", pw, "127.0.0.1:4222", ""},
		{1, "NATS", "", pw, "h:x", ""},
		{2, "nats", "u", pw, "h", ""},
		{3, "nats", "", pw, "h", ""},
		{4, "nats", "", pw, "h", "token"},
		{4, "nats", "", pw, "h", "seed"},
		{4, "nats", "", pw, "h", ""},
		{5, "nats", "u", pw, "h", ""},
		{6, "", "app", pw, "db:3306", "app"},
		{7, "", "app", pw, "db", ""},
		{7, "", "app", "'" + pw + " x'", "db", "ssl"},
		{8, "nats", "", pw, "h", ""},
		{9, "nats", "", pw, "h", ""},
		{10, "postgres", "app", pw, "db", "password"},
		{11, "nats", "u", pw, "h", ""},
		{12, "nats", "", pw, "h", "x=1"},
	} {
		f.Add(s.form, s.scheme, s.user, s.secret, s.host, s.k)
	}
	missingDB := filepath.Join(f.TempDir(), "missing.db")
	// The fixed text of the messages, so a secret that is a word of them
	// does not count as a leak.
	var vocab strings.Builder
	for _, arg := range []string{"x", "nats://h", "nats://u:p@h", "nats://h,u:p@h", "nats://u:p@h:x", "http://h",
		"nats://u:p%zz@h", "nats://u:1/p@h", "postgres://u:p@h", "u:p@tcp(h)/d", "host=h password=p"} {
		vocab.WriteString(messagesAbout(arg, missingDB))
	}
	vocab.WriteString(natsWithheld + withheld)
	f.Fuzz(func(t *testing.T, form uint8, scheme, user, secret, host, key string) {
		if utf8.RuneCountInString(secret) < 4 {
			return
		}
		switch int(form) % len(urlForms) {
		case 1, 9: // the secret alone before an '@'
			if databaseScheme(scheme) && int(form)%len(urlForms) == 1 {
				return // postgres://NAME@host: a user name, shown as the DSN's display shows it
			}
			if name, _, ok := strings.Cut(secret, ":"); ok && plainName(name) {
				return // NAME:password@host: the name is shown
			}
		}
		build := urlForms[int(form)%len(urlForms)]
		arg := build(scheme, user, secret, host, key)
		out := messagesAbout(arg, missingDB)
		benign := messagesAbout(build(scheme, user, placeholderSecret, host, key), missingDB)
		for _, p := range passwordForms(secret) {
			if !strings.Contains(out, p) || strings.Contains(benign, p) || strings.Contains(vocab.String(), p) ||
				strings.Contains(placeholderSecret, p) {
				continue
			}
			t.Fatalf("argument %q: a message holds the secret %q:\n%s", arg, p, out)
		}
	})
}
