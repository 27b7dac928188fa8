package main

import (
	"context"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"

	gomysql "github.com/go-sql-driver/mysql"

	"github.com/opledger/opledger/cmd/opledger/internal/chaos"
	"github.com/opledger/opledger/internal/testkit/natstest"
	"github.com/opledger/opledger/internal/testkit/testdb"
)

// cliSecret is the password or token of every DSN and URL of these
// tests: no output may hold it.
const cliSecret = "Cl1-s3cret-Zq"

// checkNoSecret fails t when stdout or stderr holds cliSecret, in any
// form a message may print it (as given, percent-encoded).
func checkNoSecret(t *testing.T, args []string, stdout, stderr string) {
	t.Helper()
	for _, form := range []string{cliSecret, url.QueryEscape(cliSecret), "s3cret"} {
		if strings.Contains(stdout, form) || strings.Contains(stderr, form) {
			t.Errorf("%q: the output holds the secret (%q):\nstdout: %s\nstderr: %s", args, form, stdout, stderr)
			return
		}
	}
}

// withDSN returns args with dsn given as --dsn, or sets OPLEDGER_DSN to
// it (viaEnv), clearing it otherwise: the two ways a command takes a DSN.
func withDSN(t *testing.T, args []string, dsn string, viaEnv bool) []string {
	t.Helper()
	args = slices.Clone(args)
	if viaEnv {
		t.Setenv("OPLEDGER_DSN", dsn)
		return args
	}
	t.Setenv("OPLEDGER_DSN", "")
	return append(args, "--dsn", dsn)
}

// credentialForms are arguments that hold cliSecret, in every form a user
// types a DSN or a URL with credentials.
func credentialForms() []string {
	s := cliSecret
	return []string{
		"postgres://app:" + s + "@db/app",
		"postgresql://app:" + s + "@127.0.0.1:1/app?sslmode=disable",
		"postgres://app@db/app?password=" + s,
		"mysql://root:" + s + "@127.0.0.1:1/test",
		"tidb://root:" + s + "@127.0.0.1:1/test",
		"app:" + s + "@tcp(127.0.0.1:1)/app",
		"app:" + s + "@/app",
		"host=db user=app password=" + s + " dbname=app",
		"host=db password='" + s + " x'",
		"nats://" + s + "@127.0.0.1:1",
		"nats://127.0.0.1:1,nats://u:" + s + "@127.0.0.1:2",
		"nats://127.0.0.1:1," + s + "@127.0.0.1:2",
		"nats://127.0.0.1:1?token=" + s,
		"sqlite:x.db?_auth_pass=" + s,
		"u:" + url.PathEscape(s) + "%2F@h",
	}
}

// TestNoArgumentEchoed: a DSN or URL given where a command does not take
// one (a positional argument, a second DSN, an unknown command or
// subcommand, a flag's bad value, a flag name) is refused with exit code
// 2 and a message that masks its credentials; nothing is created.
func TestNoArgumentEchoed(t *testing.T) {
	dir := t.TempDir()
	t.Chdir(dir)
	t.Setenv("OPLEDGER_DSN", "")
	var names []string
	for n := range commands() {
		names = append(names, n)
	}
	sort.Strings(names)
	// Flags that take a typed value, or whose value is checked before any
	// database is opened, per command.
	valueFlags := [][]string{
		{"sweep", "--batch"}, {"sweep", "--max-duration"}, {"stats", "--json="}, {"stats", "--table"},
		{"inspect", "--limit"}, {"inspect", "--older-than"}, {"inspect", "--pending", "--method"},
		{"evict", "--wait"}, {"evict", "--caller", "c", "--key", "k", "--method"},
		{"relay", "--batch"}, {"relay", "--drain="}, {"relay", "--to"},
		{"demo", "--calls"}, {"demo", "--loss"}, {"demo", "--owner"}, {"demo", "--transport"}, {"demo", "--chain", "--to"},
		{"conformance", "--keys"}, {"conformance", "--cases"},
		{"chaos", "--calls"}, {"chaos", "--duration"}, {"chaos", "--owner"}, {"chaos", "--databases"},
		{chaos.ReplicaCommand, "--max-conns"},
		{"policy", "check", "--keyed"}, {"policy", "check", "--owner"}, {"policy", "check", "--nope"},
		{"migrate", "up", "--table"}, {"migrate", "export", "--dir", "out", "--dialect"},
	}
	for _, f := range credentialForms() {
		var cases [][]string
		cases = append(cases, []string{f}, []string{"help", f})
		for _, n := range names {
			cases = append(cases, []string{n, f}, []string{n, "--no-such-flag=" + f}, []string{n, "-" + f})
			if n != "policy" {
				cases = append(cases, []string{n, "--dsn", "x.db", f})
			}
		}
		for _, sub := range []string{"up", "down", "status", "export"} {
			cases = append(cases, []string{"migrate", sub, f}, []string{"migrate", sub, "--dsn", "x.db", f})
		}
		cases = append(cases, []string{"policy", "check", f})
		for _, vf := range valueFlags {
			cases = append(cases, append(slices.Clone(vf), f))
			if last := vf[len(vf)-1]; !strings.HasSuffix(last, "=") {
				cases = append(cases, append(slices.Clone(vf[:len(vf)-1]), last+"="+f))
			}
		}
		for _, args := range cases {
			code, out, errs := runCmd(t, args...)
			if code != 2 {
				t.Errorf("%q: exit %d, want 2\nstdout: %s\nstderr: %s", args, code, out, errs)
			}
			if errs == "" {
				t.Errorf("%q: nothing on stderr", args)
			}
			checkNoSecret(t, args, out, errs)
		}
	}
	if left, _ := os.ReadDir(dir); len(left) > 0 {
		var n []string
		for _, e := range left {
			n = append(n, e.Name())
		}
		t.Errorf("the refused commands left files behind: %q", n)
	}
}

// dsnCommand is a command that takes a DSN: the words before its flags,
// and the flags it runs with.
type dsnCommand struct {
	words, flags []string
	env          bool // reads OPLEDGER_DSN
}

func dsnCommands() []dsnCommand {
	id := []string{"--caller", "c", "--method", "/a.B/C", "--key", "k"}
	return []dsnCommand{
		{[]string{"migrate", "up"}, nil, true},
		{[]string{"migrate", "status"}, nil, true},
		{[]string{"migrate", "down"}, nil, true},
		{[]string{"sweep"}, nil, true},
		{[]string{"stats"}, nil, true},
		{[]string{"stats"}, []string{"--json"}, true},
		{[]string{"inspect"}, id, true},
		{[]string{"inspect"}, []string{"--pending"}, true},
		{[]string{"evict"}, id, true},
		{[]string{"relay"}, []string{"--to", "nats://" + cliSecret + "@127.0.0.1:1", "--drain"}, true},
		{[]string{"relay"}, []string{"--dead"}, true},
		{[]string{"relay"}, []string{"--retry-dead", "1"}, true},
		{[]string{"relay"}, []string{"--discard-dead", "1"}, true},
		{[]string{"demo"}, []string{"--calls", "10", "--outage-calls", "0"}, true},
		{[]string{"demo"}, []string{"--chain", "--to", "nats://u:" + cliSecret + "@127.0.0.1:1", "--calls", "10", "--outage-calls", "0"}, true},
		{[]string{"conformance"}, nil, true},
		{[]string{"conformance"}, []string{"--json"}, true},
		{[]string{"chaos"}, []string{"--json", "--calls", "10"}, false},
		{[]string{"chaos"}, []string{"--calls", "10"}, false},
		{[]string{chaos.ReplicaCommand}, nil, false},
	}
}

// failingDSNs are DSNs with cliSecret that cannot be used: a host that
// refuses the connection, a server that refuses the login, a bad
// parameter, a form that is refused. The servers are the test's own
// databases when their variables are set.
func failingDSNs(t *testing.T) []string {
	s := cliSecret
	dsns := []string{
		// Wrong host.
		"postgres://app:" + s + "@127.0.0.1:1/x?sslmode=disable&connect_timeout=5",
		"postgresql://u@127.0.0.1:1/x?password=" + s + "&connect_timeout=5",
		"mysql://app:" + s + "@127.0.0.1:1/x?timeout=5s",
		"mariadb://u:" + s + "@127.0.0.1:1/x?timeout=5s",
		"tidb://app:" + s + "@127.0.0.1:1/x?timeout=5s",
		"app:" + s + "@tcp(127.0.0.1:1)/x?timeout=5s",
		// Bad parameter.
		"postgres://app:" + s + "@127.0.0.1:1/x?sslmode=bogus",
		"postgres://app:" + s + "@127.0.0.1:1/x?connect_timeout=soon",
		"postgres://app@127.0.0.1:1/x?password=" + s + "&sslmode=bogus",
		"mysql://app:" + s + "@127.0.0.1:1/x?parseTime=perhaps",
		"app:" + s + "@tcp(127.0.0.1:1)/x?timeout=soon",
		"postgres://app:" + s + "@127.0.0.1:port/x",
		// Refused forms: a password that would need percent-encoding, a
		// scheme that is none of ours, user:password@host without one, a
		// libpq keyword/value string.
		"postgres://u:" + s + "@[::1",
		"postgres://u:12/" + s + "@127.0.0.1:1/x",
		"postgres://u:" + s + "%zz@127.0.0.1:1/x",
		"mysql://u:12/" + s + "@127.0.0.1:1",
		"u:" + s + "@tcp(127.0.0.1:1/x",
		"://u:" + s + "@127.0.0.1:1/x",
		"redis://u:" + s + "@127.0.0.1:1",
		"sqlite://u:" + s + "@127.0.0.1:1/x",
		"postgres:u:" + s + "@127.0.0.1:1/x",
		"file:u:" + s + "@127.0.0.1:1",
		"sqlite:app:" + s + "@db/x",
		"app:" + s + "@db.internal",
		"app:" + s + "@db.internal:3306/orders",
		"u:" + s + "@127.0.0.1:1/x",
		"host=127.0.0.1 port=1 user=app password=" + s,
	}
	if pg := os.Getenv(testdb.EnvPostgres); pg != "" {
		u, err := url.Parse(pg)
		if err != nil {
			t.Fatal(err)
		}
		testdb.Reserve(t, "postgres", 2)
		// A role the server refuses; a password the server refuses
		// would need password authentication, which the test server
		// need not have.
		dsns = append(dsns, "postgres://opl_no_such_role:"+s+"@"+u.Host+"/test?sslmode=disable&connect_timeout=5")
	} else {
		testdb.Skip(t, testdb.EnvPostgres)
	}
	if my := os.Getenv(testdb.EnvMySQL); my != "" {
		host := ""
		if cfg, err := gomysql.ParseDSN(my); err == nil {
			host = cfg.Addr
		} else if u, err := url.Parse(my); err == nil {
			host = u.Host
		}
		testdb.Reserve(t, "mysql", 2)
		// The test server's root has no password: one given is refused,
		// as is a user that does not exist.
		dsns = append(dsns,
			"root:"+s+"@tcp("+host+")/test",
			"mysql://root:"+s+"@"+host+"/test",
			"opl_no_such_user:"+s+"@tcp("+host+")/test")
	} else {
		testdb.Skip(t, testdb.EnvMySQL)
	}
	return dsns
}

// TestDSNCredentialsNotPrinted: every command that takes a DSN, given one
// with a password through --dsn and through OPLEDGER_DSN, that cannot be
// used (wrong host, refused login, bad parameter, refused form), exits 2
// with a one-line error and creates no file in the working directory, and
// neither stdout nor stderr (nor --json) holds the password. Not
// parallel: t.Chdir changes the process's directory.
func TestDSNCredentialsNotPrinted(t *testing.T) {
	dir := t.TempDir()
	t.Chdir(dir)
	dsns := failingDSNs(t)
	runs := 0
	defer func() { t.Logf("%d runs: %d commands, %d DSNs", runs, len(dsnCommands()), len(dsns)) }()
	for _, c := range dsnCommands() {
		for _, dsn := range dsns {
			for _, viaEnv := range []bool{false, true} {
				if viaEnv && !c.env {
					continue
				}
				args := append(withDSN(t, c.words, dsn, viaEnv), c.flags...)
				code, out, errs := runCmdTimeout(t, args...)
				runs++
				var label []string // args as the failures show them: masked
				if viaEnv {
					label = append(label, "OPLEDGER_DSN="+maskCredentials(dsn))
				}
				for _, a := range args {
					label = append(label, maskCredentials(a))
				}
				if code != 2 {
					t.Errorf("%q: exit %d, want 2\nstdout: %s\nstderr: %s", label, code, out, errs)
				}
				lines := strings.Split(strings.TrimSpace(errs), "\n")
				if last := lines[len(lines)-1]; !strings.HasPrefix(last, "opledger "+c.words[0]) {
					t.Errorf("%q: stderr does not end with the command's error: %q", label, errs)
				}
				if c.words[0] != "chaos" && len(lines) != 1 {
					t.Errorf("%q: want a one-line error, got %q", label, errs)
				}
				checkNoSecret(t, label, out, errs)
				if ents, err := os.ReadDir(dir); err != nil || len(ents) != 0 {
					t.Fatalf("%q: created %v in the working directory (%v)", label, ents, err)
				}
			}
		}
	}
}

// TestSQLiteNotCreated: the commands that read or operate a ledger refuse
// a SQLite file that does not exist, given with --dsn, OPLEDGER_DSN or by
// default, with one line naming opledger migrate up, and create nothing;
// migrate up creates it, and then they run.
func TestSQLiteNotCreated(t *testing.T) {
	dir := t.TempDir()
	t.Chdir(dir)
	id := []string{"--caller", "c", "--method", "/a.B/C", "--key", "k"}
	cmds := [][]string{
		{"stats"}, {"stats", "--json"}, append([]string{"inspect"}, id...), {"inspect", "--pending"},
		{"sweep"}, append([]string{"evict"}, id...), {"migrate", "status"}, {"migrate", "down"},
		{"relay", "--to", "nats://127.0.0.1:1", "--drain"},
	}
	for _, how := range []string{"flag", "env", "default"} {
		for _, c := range cmds {
			path := filepath.Join(dir, "typo.db")
			args := slices.Clone(c)
			switch how {
			case "flag":
				t.Setenv("OPLEDGER_DSN", "")
				args = append(args, "--dsn", path)
			case "env":
				t.Setenv("OPLEDGER_DSN", "sqlite:"+path)
			default:
				t.Setenv("OPLEDGER_DSN", "")
				path = defaultSQLiteFile
			}
			code, out, errs := runCmd(t, args...)
			if code != 2 || out != "" || strings.Count(errs, "\n") != 1 || !strings.Contains(errs, "opledger migrate up") || !strings.Contains(errs, "at "+path) {
				t.Errorf("%s %q: exit %d\nstdout: %s\nstderr: %s\nwant exit 2 and one line naming %s and opledger migrate up", how, args, code, out, errs, path)
			}
			if how == "default" && !strings.Contains(errs, "neither --dsn nor OPLEDGER_DSN") {
				t.Errorf("%q: the error does not say the path is the default: %s", args, errs)
			}
			if _, err := os.Stat(path); !os.IsNotExist(err) {
				t.Fatalf("%s %q created %s (%v)", how, args, path, err)
			}
		}
	}
	// An in-memory database is no file: nothing to refuse.
	if code, _, errs := runCmd(t, "stats", "--dsn", ":memory:"); strings.Contains(errs, "migrate up") {
		t.Errorf("stats --dsn :memory:: exit %d, %s", code, errs)
	}
	// The file opened with mode=rw is not created either, should it go
	// away between the check and the open.
	tg := sqliteTarget(filepath.Join(dir, "gone.db"))
	tg.dsn += "&mode=rw"
	if db, err := tg.open(context.Background()); err == nil {
		db.Close()
		t.Error("mode=rw opened a file that does not exist")
	}
	if _, err := os.Stat(filepath.Join(dir, "gone.db")); !os.IsNotExist(err) {
		t.Errorf("mode=rw created the file: %v", err)
	}
	t.Setenv("OPLEDGER_DSN", "")
	if code, _, errs := runCmd(t, "migrate", "up"); code != 0 {
		t.Fatalf("migrate up: %d %s", code, errs)
	}
	for _, c := range cmds[:len(cmds)-1] {
		if code, out, errs := runCmd(t, c...); code == 2 {
			t.Errorf("%q after migrate up: exit 2\nstdout: %s\nstderr: %s", c, out, errs)
		}
	}
}

// TestHelp: --help and -h on every command and subcommand, and opledger
// help CMD, print the usage on stdout and exit 0; no command and a bad
// flag are usage errors: exit 2, on stderr.
func TestHelp(t *testing.T) {
	t.Chdir(t.TempDir())
	var cmds [][]string
	for n := range commands() {
		cmds = append(cmds, []string{n})
	}
	cmds = append(cmds, []string{"migrate", "up"}, []string{"migrate", "down"}, []string{"migrate", "status"},
		[]string{"migrate", "export"}, []string{"policy", "check"})
	for _, c := range cmds {
		for _, h := range []string{"--help", "-h", "-help"} {
			args := append(slices.Clone(c), h)
			code, out, errs := runCmd(t, args...)
			if code != 0 || !strings.Contains(out, "usage: opledger "+c[0]) || errs != "" {
				t.Errorf("%q: exit %d\nstdout: %s\nstderr: %s\nwant exit 0 and the usage on stdout only", args, code, out, errs)
			}
		}
		if len(c) == 1 {
			code, out, errs := runCmd(t, "help", c[0])
			if code != 0 || !strings.Contains(out, "usage: opledger "+c[0]) || errs != "" {
				t.Errorf("help %s: exit %d\nstdout: %s\nstderr: %s", c[0], code, out, errs)
			}
		}
	}
	for _, args := range [][]string{{"help"}, {"--help"}, {"-h"}} {
		if code, out, errs := runCmd(t, args...); code != 0 || !strings.Contains(out, "commands:") || errs != "" {
			t.Errorf("%q: exit %d, stdout %q, stderr %q", args, code, out, errs)
		}
	}
	if code, out, errs := runCmd(t); code != 2 || out != "" || !strings.Contains(errs, "commands:") {
		t.Errorf("no command: exit %d, stdout %q, stderr %q; want 2 and the usage on stderr", code, out, errs)
	}
	for _, c := range cmds {
		args := append(slices.Clone(c), "--no-such-flag")
		code, out, errs := runCmd(t, args...)
		if code != 2 || out != "" || strings.Count(errs, "\n") != 1 || !strings.Contains(errs, "no-such-flag") {
			t.Errorf("%q: exit %d\nstdout: %s\nstderr: %s\nwant exit 2 and one line on stderr", args, code, out, errs)
		}
	}
}

// TestDemoReadsEnv: demo takes its database from OPLEDGER_DSN, as every
// other command does; --dsn wins over it.
func TestDemoReadsEnv(t *testing.T) {
	dir := t.TempDir()
	t.Chdir(dir)
	path := filepath.Join(dir, "from-env.db")
	t.Setenv("OPLEDGER_DSN", path)
	code, out, errs := runCmd(t, "demo", "--calls", "20", "--outage-calls", "0")
	if code != 0 || !strings.Contains(out, "sqlite:"+path) {
		t.Fatalf("demo with OPLEDGER_DSN: exit %d\nstdout: %s\nstderr: %s", code, out, errs)
	}
	if _, err := os.Stat(path); err != nil {
		t.Errorf("demo did not use OPLEDGER_DSN's file: %v", err)
	}
	flagPath := filepath.Join(dir, "from-flag.db")
	code, out, errs = runCmd(t, "demo", "--dsn", flagPath, "--calls", "20", "--outage-calls", "0")
	if code != 0 || !strings.Contains(out, "sqlite:"+flagPath) {
		t.Fatalf("demo --dsn with OPLEDGER_DSN set: exit %d\nstdout: %s\nstderr: %s", code, out, errs)
	}
}

// TestRelayCredentialsNotPrinted: relay --to and demo --chain --to with a
// token, a user and password, and a list of servers whose second one
// holds the credentials: the start-up banner shows every server with its
// credentials masked; a refused token or password and a bad URL fail
// with exit 2 and one masked line (demo --chain: a wrong host too); relay
// waits for a wrong host, its lines masked as well, until interrupted.
// Through --dsn and OPLEDGER_DSN alike.
func TestRelayCredentialsNotPrinted(t *testing.T) {
	dir := t.TempDir()
	t.Chdir(dir)
	tokenSrv := natstest.StartAuth(t, natstest.Auth{Token: cliSecret})
	userSrv := natstest.StartAuth(t, natstest.Auth{User: "relay", Password: cliSecret})
	path := filepath.Join(dir, "relay.db")
	relayOutbox(t, path, 3, "secrets.events")
	tokenHost := strings.TrimPrefix(tokenSrv.URL(), "nats://")
	userHost := strings.TrimPrefix(userSrv.URL(), "nats://")
	ok := []struct{ to, shown string }{
		{tokenSrv.AuthURL(), "nats://xxxxx@" + tokenHost},
		{userSrv.AuthURL(), "nats://relay:xxxxx@" + userHost},
		// The first server refuses the connection; nats.go goes on to the
		// second, whose token the banner masks too.
		{"nats://127.0.0.1:1," + tokenSrv.AuthURL(), "nats://127.0.0.1:1,nats://xxxxx@" + tokenHost},
		{"nats://relay:" + cliSecret + "@127.0.0.1:1, " + userSrv.AuthURL(), "nats://relay:xxxxx@127.0.0.1:1,nats://relay:xxxxx@" + userHost},
	}
	for _, c := range ok {
		for _, viaEnv := range []bool{false, true} {
			args := withDSN(t, []string{"relay", "--to", c.to, "--stream", "SECRETS", "--subjects", "secrets.>", "--drain", "-v"}, path, viaEnv)
			code, out, errs := runCmd(t, args...)
			if code != 0 || !strings.Contains(out, "→ "+c.shown+"\n") {
				t.Errorf("relay --to %s: exit %d\nstdout: %s\nstderr: %s\nwant the banner to show %s", maskCredentials(c.to), code, out, errs, c.shown)
			}
			checkNoSecret(t, args, out, errs)
		}
	}
	t.Setenv("OPLEDGER_DSN", "")
	unreachable := map[string]bool{
		"nats://" + cliSecret + "@127.0.0.1:1":                      true, // a wrong host
		"nats://127.0.0.1:1,nats://u:" + cliSecret + "@127.0.0.1:2": true, // every host wrong
	}
	bad := []string{
		"nats://wrong-" + cliSecret + "@" + tokenHost,               // a refused token
		"nats://relay:wrong-" + cliSecret + "@" + userHost,          // a refused password
		"nats://" + cliSecret + "@" + userHost,                      // a token where a user is wanted
		"nats://" + cliSecret + "@127.0.0.1:1",                      // a wrong host
		"nats://127.0.0.1:1,nats://u:" + cliSecret + "@127.0.0.1:2", // every host wrong
		"nats://u:" + cliSecret + "@" + userHost + ":x",             // a bad port
		"nats://u:12," + cliSecret + "@" + userHost,                 // a ',' in a password
		"nats://u:12/" + cliSecret + "@" + userHost,                 // a '/' in a password
		"nats://" + userHost + ",u:" + cliSecret + "@" + userHost,   // credentials without a scheme
		"http://u:" + cliSecret + "@" + userHost,                    // not NATS
		"nats://" + userHost + "?token=" + cliSecret + "&x=1",       // a query (nats.go ignores it: the login is refused)
	}
	for i, to := range bad {
		args := []string{"relay", "--dsn", path, "--to", to, "--stream", "BAD" + strconv.Itoa(i), "--subjects", "bad.>", "--drain"}
		if unreachable[to] {
			// relay waits for a broker it cannot reach, logging each
			// attempt, until interrupted (then 2: --drain did not drain).
			r := startRelay(t, args...)
			r.waitForAttempts(t, 2)
			code, out, errs := r.exit(t), r.out.String(), r.errs.String()
			if code != 2 || !strings.HasSuffix(errs, "\nopledger relay: context canceled\n") {
				t.Errorf("relay --to %s interrupted while waiting: exit %d\nstdout: %s\nstderr: %s\nwant 2", maskCredentials(to), code, out, errs)
			}
			checkNoSecret(t, args, out, errs)
		} else {
			code, out, errs := runCmd(t, args...)
			if code != 2 || strings.Count(errs, "\n") != 1 {
				t.Errorf("relay --to %s: exit %d\nstdout: %s\nstderr: %s\nwant 2 and one line", maskCredentials(to), code, out, errs)
			}
			checkNoSecret(t, args, out, errs)
		}
		dargs := []string{"demo", "--chain", "--to", to, "--calls", "10", "--outage-calls", "0"}
		code, out, errs := runCmd(t, dargs...)
		if code != 2 || strings.Count(errs, "\n") != 1 {
			t.Errorf("demo --chain --to %s: exit %d\nstdout: %s\nstderr: %s\nwant 2 and one line", maskCredentials(to), code, out, errs)
		}
		checkNoSecret(t, dargs, out, errs)
	}
	// demo --chain --to a server with a token: the banner masks it.
	dargs := []string{"demo", "--chain", "--to", "nats://127.0.0.1:1," + tokenSrv.AuthURL(), "--calls", "20", "--outage-calls", "0"}
	code, out, errs := runCmd(t, dargs...)
	if code != 0 || !strings.Contains(out, "relayed to nats://127.0.0.1:1,nats://xxxxx@"+tokenHost+" (JetStream stream "+demoStream+")") {
		t.Errorf("demo --chain --to: exit %d\nstdout: %s\nstderr: %s", code, out, errs)
	}
	checkNoSecret(t, dargs, out, errs)
}

// TestCredentialsNotPrintedOnSuccess: the commands that read a ledger,
// run on the test's PostgreSQL with a password in the DSN (through --dsn
// and OPLEDGER_DSN) and relay to a NATS server that wants a token, print
// the database and the server with both masked, on stdout, stderr and in
// --json.
func TestCredentialsNotPrintedOnSuccess(t *testing.T) {
	t.Chdir(t.TempDir())
	pg := os.Getenv(testdb.EnvPostgres)
	if pg == "" {
		testdb.Skip(t, testdb.EnvPostgres)
	}
	u, err := url.Parse(pg)
	if err != nil {
		t.Fatal(err)
	}
	if _, has := u.User.Password(); has {
		t.Skipf("%s holds a password of its own: the test puts its own in", testdb.EnvPostgres)
	}
	u.User = url.UserPassword(u.User.Username(), cliSecret)
	dsn := u.String()
	var tg testdb.Target
	for _, c := range testdb.Targets() {
		if c.Name == "postgres/pgx" {
			tg = c
		}
	}
	db := tg.Open(t, 2)
	table := testdb.NewTable(t, db, tg.Dialect)
	if code, _, errs := runCmdTimeout(t, "stats", "--dsn", dsn, "--table", table); code != 0 {
		if strings.Contains(errs, "password authentication failed") {
			t.Skipf("the server checks passwords: %s", errs)
		}
		t.Fatalf("stats with a password in the DSN: exit %d: %s", code, errs)
	}
	srv := natstest.StartAuth(t, natstest.Auth{Token: cliSecret})
	shownDB := "postgres://" + u.User.Username() + ":xxxxx@" + u.Host
	id := []string{"--caller", "c", "--method", "/a.B/C", "--key", "k", "--table", table}
	for _, c := range []struct {
		args  []string
		code  int
		shown string // what stdout must hold
	}{
		{[]string{"stats", "--table", table}, 0, shownDB},
		{[]string{"stats", "--json", "--table", table}, 0, `"table": "` + table + `"`},
		{[]string{"migrate", "status", "--table", table}, 0, "00002_create_outbox.sql"},
		{[]string{"migrate", "up", "--table", table}, 0, shownDB},
		{[]string{"sweep", "--table", table}, 0, shownDB},
		{[]string{"inspect", "--pending", "--table", table}, 0, "no entries match"},
		{append([]string{"inspect"}, id...), 1, "no live entry"},
		{append([]string{"evict"}, id...), 1, "nothing to evict"},
		{[]string{"relay", "--table", table, "--to", srv.AuthURL(), "--drain", "-v"}, 0,
			shownDB + "/test table " + table + "_outbox → nats://xxxxx@" + strings.TrimPrefix(srv.URL(), "nats://")},
	} {
		for _, viaEnv := range []bool{false, true} {
			code, out, errs := runCmdTimeout(t, withDSN(t, c.args, dsn, viaEnv)...)
			if code != c.code || !strings.Contains(out, c.shown) {
				t.Errorf("%q (OPLEDGER_DSN: %v): exit %d, want %d\nstdout: %s\nstderr: %s\nwant stdout to hold %q", c.args, viaEnv, code, c.code, out, errs, c.shown)
			}
			checkNoSecret(t, c.args, out, errs)
		}
	}
}
