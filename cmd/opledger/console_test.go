package main

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/opledger/opledger/ledger"
	"github.com/opledger/opledger/outbox"

	"github.com/opledger/opledger/cmd/opledger/internal/console"
)

// consoleHostile are attacker-controlled strings the console must show as
// text: markup, attribute breakouts, script URLs, control characters,
// a line separator and a right-to-left override.
var consoleHostile = []string{
	`<script>window.pwned=1</script>`,
	`"><img src=x onerror="window.pwned=1">`,
	`'><svg onload=window.pwned=1>`,
	"javascript:window.pwned=1 \x1b[31mred\x00nul\u2028sep\u202eevil",
}

// consoleLong is a long hostile value of n bytes.
func consoleLong(n int) string {
	return strings.Repeat(`<script>window.pwned=1</script>`, n/31+1)[:n]
}

// syncBuffer is a bytes.Buffer safe for a server's goroutines.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// hostileSet is what putHostile wrote.
type hostileSet struct {
	entryIDs []string // hex
	deadIDs  []string // hex
}

// putHostile writes ledger entries and dead outbox messages whose every
// text column is hostile, straight into the tables (the ledger would
// refuse some of them; the console must be safe whatever the table
// holds): one entry pending, the others completed with a hostile stored
// response, and one long value per column, 100 KB where the column holds
// it (MySQL's identity columns hold 512 bytes, its TEXT 64 KB).
func putHostile(t *testing.T, e *opEnv, outboxTable string, now time.Time) hostileSet {
	t.Helper()
	ctx := context.Background()
	d := e.tg.dialect
	long, longID, longText := consoleLong(100_000), consoleLong(100_000), consoleLong(100_000)
	mysqlColumns := d.Name() == "mysql" || d.Name() == "tidb" // the MySQL dialect's column sizes
	if mysqlColumns {
		longID, longText = consoleLong(500), consoleLong(60_000)
	}
	values := append(append([]string{}, consoleHostile...), "long")
	var hs hostileSet
	ph := newLedgerSQL(d, e.table).ph(10)
	ins := fmt.Sprintf("INSERT INTO %s (id, caller, method, request_fp, code, response, response_type, created_at, completed_at, expires_at) "+
		"VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s)", append([]any{d.QuoteIdent(e.table)}, ph...)...)
	oph := newLedgerSQL(d, e.table).ph(9)
	oins := fmt.Sprintf("INSERT INTO %s (id, partition_key, topic, name, payload, created_at, attempts, last_error, dead_at) "+
		"VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s)", append([]any{d.QuoteIdent(outboxTable)}, oph...)...)
	created := now.Add(-3 * time.Hour).UnixMicro()
	for i, v := range values {
		caller, text := v, v
		if d.Name() == "postgres" {
			caller, text = strings.ReplaceAll(v, "\x00", "\x07"), strings.ReplaceAll(v, "\x00", "\x07") // text holds no NUL
		}
		if v == "long" {
			caller, text = longID, longText
		}
		id := sha256.Sum256([]byte("hostile-entry-" + v))
		var completed, code any = created + 1, int64(0)
		if i == 0 {
			completed, code = nil, nil // pending: listed on the overview
		}
		if _, err := e.db.ExecContext(ctx, ins, id[:], caller, caller, id[:], code, []byte(long), caller, created, completed,
			now.Add(time.Hour).UnixMicro()); err != nil {
			t.Fatalf("hostile entry %d: %v", i, err)
		}
		hs.entryIDs = append(hs.entryIDs, hex.EncodeToString(id[:]))
		mid := sha256.Sum256([]byte("hostile-message-" + v))
		key := caller
		if mysqlColumns && len(key) > 255 {
			key = key[:255]
		}
		if _, err := e.db.ExecContext(ctx, oins, mid[:], key, key, caller, []byte(long), created, int64(3), text, created+2); err != nil {
			t.Fatalf("hostile message %d: %v", i, err)
		}
		hs.deadIDs = append(hs.deadIDs, hex.EncodeToString(mid[:]))
	}
	return hs
}

// newConsoleServer serves the console over e's tables; token nil is
// read-only. It returns the server and the console's log.
func newConsoleServer(t *testing.T, e *opEnv, token []byte) (*httptest.Server, *syncBuffer) {
	t.Helper()
	ob, err := outbox.New(e.tg.dialect, outbox.WithTable(outbox.TableFor(e.table)))
	if err != nil {
		t.Fatal(err)
	}
	b := &consoleBackend{db: e.db, t: e.tg, table: e.table, q: newLedgerSQL(e.tg.dialect, e.table),
		lw: ledgerWindow{retention: 24 * time.Hour, skew: time.Minute}, ob: ob}
	var log syncBuffer
	srv, err := console.New(console.Config{Backend: b, Token: token, Log: slog.New(slog.NewTextHandler(&log, nil)), LoopbackOnly: true, Scrub: e.tg.scrub})
	if err != nil {
		t.Fatal(err)
	}
	ts := httptest.NewServer(srv)
	t.Cleanup(ts.Close)
	return ts, &log
}

// consoleGet fetches path and returns the status and body.
func consoleGet(t *testing.T, ts *httptest.Server, path string) (int, string) {
	t.Helper()
	res, err := ts.Client().Get(ts.URL + path)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	if err != nil {
		t.Fatal(err)
	}
	return res.StatusCode, string(b)
}

// consolePost posts form to path, as a same-origin page would.
func consolePost(t *testing.T, ts *httptest.Server, path string, form url.Values, header ...string) (int, string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, ts.URL+path, strings.NewReader(form.Encode()))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.Header.Set("Sec-Fetch-Site", "same-origin")
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	res, err := ts.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	if err != nil {
		t.Fatal(err)
	}
	return res.StatusCode, string(b)
}

var csrfRE = regexp.MustCompile(`name="csrf" value="([0-9a-f]{64})"`)

func consoleCSRF(t *testing.T, body string) string {
	t.Helper()
	m := csrfRE.FindStringSubmatch(body)
	if m == nil {
		t.Fatalf("no CSRF token in the page:\n%s", body)
	}
	return m[1]
}

// checkEscaped fails when body holds any hostile string unescaped, a raw
// control character, or a whole long value.
func checkEscaped(t *testing.T, page, body string) {
	t.Helper()
	for _, h := range consoleHostile {
		if strings.Contains(body, h) {
			t.Errorf("%s shows %q unescaped", page, h)
		}
	}
	for _, bad := range []string{"<script>window", "<img", "<svg", "onerror=\"", "\x1b", "\x00", "\u2028", "\u202e", consoleLong(300)} {
		if strings.Contains(body, bad) {
			t.Errorf("%s holds %q", page, bad)
		}
	}
}

// TestConsole: the console's pages on every database, over entries the
// ledger wrote (completed, pending, expired) and hostile rows: the
// figures, finding an entry by caller+method+key hash and by digest,
// every hostile value escaped, the outbox's dead messages, and the
// actions: refused read-only, without the CSRF token, from another origin
// or with a wrong token; a dry run, then a retry with its receipt logged.
// No page or log line holds a key or the token.
func TestConsole(t *testing.T) {
	for family, dsn := range operatorTargets(t) {
		t.Run(family, func(t *testing.T) {
			e := newOpEnv(t, family, dsn)
			now := time.Now()
			done := e.put(t, now.Add(-time.Minute), "tenant-a", opMethod, "console-key-done", false)
			e.put(t, now.Add(-2*time.Hour), "tenant-a", opMethod, "console-key-stuck", true)
			e.put(t, now.Add(-48*time.Hour), "tenant-b", opMethod, "console-key-old", false)
			hs := putHostile(t, e, outbox.TableFor(e.table), now)

			ts, _ := newConsoleServer(t, e, nil)
			code, body := consoleGet(t, ts, "/")
			if code != http.StatusOK {
				t.Fatalf("GET / = %d:\n%s", code, body)
			}
			checkEscaped(t, "the ledger page", body)
			for _, want := range []string{`id="entries">8<`, `id="expired">1<`, `id="pending">2<`, "&lt;script&gt;window.pwned=1&lt;/script&gt;",
				"the sweep is that far behind", "Partitions"} {
				if !strings.Contains(body, want) {
					t.Errorf("the ledger page lacks %q:\n%s", want, body)
				}
			}

			if family == "postgres" && !strings.Contains(body, "Partitioned by the key&#39;s birth") {
				t.Errorf("the ledger page lists no partitions of PostgreSQL's partitioned ledger:\n%s", body)
			}

			// Find by caller, method and the key's SHA-256 (what the
			// page's script sends), and by digest.
			_, body = consoleGet(t, ts, "/find")
			csrf := consoleCSRF(t, body)
			kh := sha256.Sum256([]byte("console-key-done"))
			id := done.ID()
			code, body = consolePost(t, ts, "/find", url.Values{"csrf": {csrf}, "caller": {"tenant-a"}, "method": {opMethod}, "key_sha256": {hex.EncodeToString(kh[:])}})
			if code != http.StatusOK || !strings.Contains(body, hex.EncodeToString(id[:])) || !strings.Contains(body, `id="entry-state">completed<`) {
				t.Errorf("find by key = %d:\n%s", code, body)
			}
			code, body = consolePost(t, ts, "/find", url.Values{"csrf": {csrf}, "caller": {"tenant-a"}, "method": {opMethod}, "key": {"console-key-done"}})
			if code != http.StatusBadRequest {
				t.Errorf("find with a raw key = %d, want 400:\n%s", code, body)
			}
			if code, _ = consolePost(t, ts, "/find", url.Values{"caller": {"tenant-a"}, "method": {opMethod}, "key_sha256": {hex.EncodeToString(kh[:])}}); code != http.StatusForbidden {
				t.Errorf("find without the CSRF token = %d, want 403", code)
			}
			if code, _ = consolePost(t, ts, "/find", url.Values{"csrf": {csrf}, "caller": {"tenant-a"}, "method": {opMethod}, "key_sha256": {hex.EncodeToString(kh[:])}},
				"Sec-Fetch-Site", "cross-site"); code != http.StatusForbidden {
				t.Errorf("find from another site = %d, want 403", code)
			}
			consoleFindFirstSent(t, e, ts, csrf, now, done)
			for i, hid := range hs.entryIDs {
				code, body = consoleGet(t, ts, "/entry?id="+hid)
				if code != http.StatusOK || !strings.Contains(body, "more bytes") || (i == 3 && !strings.Contains(body, `\x1b[31mred`)) {
					t.Errorf("GET /entry?id=%s = %d (want 200 and a cut preview):\n%.2000s", hid, code, body)
				}
				checkEscaped(t, "the entry page", body)
			}
			if code, _ = consoleGet(t, ts, "/entry?id="+strings.Repeat("ab", 32)); code != http.StatusNotFound {
				t.Errorf("an unknown entry = %d, want 404", code)
			}
			if code, _ = consoleGet(t, ts, "/entry?id=%3Cscript%3E"); code != http.StatusBadRequest {
				t.Errorf("a malformed id = %d, want 400", code)
			}

			// The outbox, read-only: the dead messages are listed, escaped,
			// with no action, and an action is refused.
			code, body = consoleGet(t, ts, "/outbox")
			if code != http.StatusOK || !strings.Contains(body, hs.deadIDs[0]) || strings.Contains(body, `name="step"`) {
				t.Errorf("GET /outbox (read-only) = %d:\n%.3000s", code, body)
			}
			checkEscaped(t, "the outbox page", body)
			if code, _ = consolePost(t, ts, "/outbox/dead", url.Values{"csrf": {csrf}, "id": {hs.deadIDs[0]},
				"action": {"retry"}, "step": {"confirm"}, "token": {"x"}}); code != http.StatusForbidden {
				t.Errorf("an action on a read-only console = %d, want 403", code)
			}
			req, _ := http.NewRequest(http.MethodGet, ts.URL+"/", nil)
			req.Host = "evil.example:80"
			if res, err := ts.Client().Do(req); err != nil || res.StatusCode != http.StatusMisdirectedRequest {
				t.Errorf("a request for another host name = %v %v, want 421", res, err)
			} else {
				res.Body.Close()
			}

			// With a token: dry run, wrong token, then the retry.
			token := []byte("console-test-token-0123456789")
			ts, log := newConsoleServer(t, e, token)
			_, body = consoleGet(t, ts, "/outbox")
			csrf = consoleCSRF(t, body)
			form := url.Values{"csrf": {csrf}, "id": {hs.deadIDs[1]}, "action": {"retry"}, "step": {"dry-run"}}
			code, body = consolePost(t, ts, "/outbox/dead", form)
			if code != http.StatusOK || !strings.Contains(body, "Dry run, nothing changed") {
				t.Errorf("dry run = %d:\n%.3000s", code, body)
			}
			checkEscaped(t, "the dry run", body)
			form.Set("step", "confirm")
			form.Set("token", "wrong-token-wrong-token")
			if code, _ = consolePost(t, ts, "/outbox/dead", form); code != http.StatusForbidden || !strings.Contains(log.String(), "wrong token") {
				t.Errorf("a wrong token = %d, want 403 and a log line:\n%s", code, log.String())
			}
			form.Set("token", string(token))
			code, body = consolePost(t, ts, "/outbox/dead", form)
			if code != http.StatusOK || !strings.Contains(body, "is an ordinary message again") {
				t.Errorf("retry = %d:\n%.3000s", code, body)
			}
			if !strings.Contains(log.String(), "console action done") || !strings.Contains(log.String(), hs.deadIDs[1]) {
				t.Errorf("no receipt in the log:\n%s", log.String())
			}
			if code, _ = consolePost(t, ts, "/outbox/dead", form); code != http.StatusNotFound {
				t.Errorf("a second retry = %d, want 404 (no longer dead)", code)
			}
			_, body = consoleGet(t, ts, "/outbox")
			if strings.Contains(body, `value="`+hs.deadIDs[1]+`"`) {
				t.Errorf("the retried message is still listed as dead")
			}
			for _, secret := range []string{"console-key-done", "console-key-stuck", "console-key-old", string(token)} {
				if strings.Contains(body, secret) || strings.Contains(log.String(), secret) {
					t.Errorf("a page or the log holds %q", secret)
				}
			}
		})
	}
}

// consoleFindFirstSent: an entry claimed with a key without a birth and a
// first-sent time (ledger.Identity.WithFirstSent) is found with the key's
// hash and that time as the header carried it, not without it nor with
// another time; a malformed time is refused; a first-sent time with a key
// the page says carries its own birth is ignored, as the servers ignore it
// (done is an entry claimed without one).
func consoleFindFirstSent(t *testing.T, e *opEnv, ts *httptest.Server, csrf string, now time.Time, done ledger.Identity) {
	t.Helper()
	sent := now.Add(-10 * time.Minute).Truncate(time.Second)
	id := e.putFirstSent(t, now.Add(-5*time.Minute), "tenant-a", opMethod, "console-key-sent", sent)
	if _, ok := id.Birth(); !ok {
		t.Fatal("an identity with a first-sent time has no birth")
	}
	kh := sha256.Sum256([]byte("console-key-sent"))
	find := func(firstSent, born string) (int, string) {
		t.Helper()
		return consolePost(t, ts, "/find", url.Values{"csrf": {csrf}, "caller": {"tenant-a"}, "method": {opMethod},
			"key_sha256": {hex.EncodeToString(kh[:])}, "first_sent": {firstSent}, "key_born": {born}})
	}
	want := id.ID()
	code, body := find(sent.UTC().Format(http.TimeFormat), "")
	if code != http.StatusOK || !strings.Contains(body, hex.EncodeToString(want[:])) || !strings.Contains(body, `id="entry-state">completed<`) {
		t.Errorf("find by key and first-sent time = %d, want the entry %x:\n%s", code, want, body)
	}
	if code, body = find("", ""); code != http.StatusNotFound {
		t.Errorf("find by key without its first-sent time = %d, want 404:\n%s", code, body)
	}
	if code, body = find(sent.Add(time.Second).UTC().Format(http.TimeFormat), ""); code != http.StatusNotFound || !strings.Contains(body, "this very value") {
		t.Errorf("find by key with another first-sent time = %d, want 404:\n%s", code, body)
	}
	if code, body = find("yesterday <script>", ""); code != http.StatusBadRequest || !strings.Contains(body, "IMF-fixdate") || strings.Contains(body, "<script>") {
		t.Errorf("find with a malformed first-sent time = %d, want 400:\n%s", code, body)
	}
	dh, dk := done.ID(), sha256.Sum256([]byte("console-key-done"))
	code, body = consolePost(t, ts, "/find", url.Values{"csrf": {csrf}, "caller": {"tenant-a"}, "method": {opMethod},
		"key_sha256": {hex.EncodeToString(dk[:])}, "first_sent": {sent.UTC().Format(http.TimeFormat)}, "key_born": {"1"}})
	if code != http.StatusOK || !strings.Contains(body, hex.EncodeToString(dh[:])) || !strings.Contains(body, `id="first-sent-ignored"`) {
		t.Errorf("find with a first-sent time for a key that carries its birth = %d, want the entry without it and a note:\n%s", code, body)
	}
}

// putFirstSent is put (completed) for the key sent with a first-sent time.
func (e *opEnv) putFirstSent(t *testing.T, at time.Time, caller, method, key string, sent time.Time) ledger.Identity {
	t.Helper()
	l, err := ledger.New(e.tg.dialect, ledger.WithTable(e.table), ledger.WithClock(func() time.Time { return at }))
	if err != nil {
		t.Fatal(err)
	}
	id, err := ledger.NewIdentity(caller, method, key)
	if err == nil {
		id, err = id.WithFirstSent(sent)
	}
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	tx, err := e.db.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback()
	c, err := l.Claim(ctx, tx, ledger.ClaimRequest{Identity: id, Fingerprint: ledger.FingerprintOf([]byte(key))})
	if err == nil {
		err = l.Complete(ctx, tx, c, ledger.Result{Response: []byte("ok-" + key), TypeName: "pay.v1.TransferReply"})
	}
	if err == nil {
		err = tx.Commit()
	}
	if err != nil {
		t.Fatal(err)
	}
	return id
}

// TestConsoleFlags: a non-loopback address needs --allow-remote; actions
// need a token of 16 bytes or more, from one place; the token is never
// printed.
func TestConsoleFlags(t *testing.T) {
	dsn := migrated(t)
	t.Setenv(consoleTokenEnv, "")
	for _, c := range []struct {
		args []string
		env  string
		want string
	}{
		{[]string{"--listen", "0.0.0.0:0"}, "", "--allow-remote"},
		{[]string{"--listen", ":0"}, "", "--allow-remote"},
		{[]string{"--listen", "nonsense"}, "", "host:port"},
		{[]string{"--allow-actions"}, "unset", "needs a token"},
		{[]string{"--allow-actions"}, "short-secret", "at least 16 bytes"},
		{[]string{"--token-file", "/nonexistent"}, "unset", "goes with --allow-actions"},
	} {
		if c.env == "unset" {
			t.Setenv(consoleTokenEnv, "x") // restored after the test
			os.Unsetenv(consoleTokenEnv)
		} else if c.env != "" {
			t.Setenv(consoleTokenEnv, c.env)
		}
		code, out, errs := runCmd(t, append([]string{"console", "--dsn", dsn}, c.args...)...)
		if code != 2 || !strings.Contains(errs, c.want) {
			t.Errorf("console %v = %d, stderr %q; want 2 and %q", c.args, code, errs, c.want)
		}
		if c.env != "" && c.env != "unset" && (strings.Contains(errs, c.env) || strings.Contains(out, c.env)) {
			t.Errorf("console %v printed the token", c.args)
		}
	}
}
