package main

import (
	"bufio"
	"context"
	"database/sql"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	gomysql "github.com/go-sql-driver/mysql"

	"github.com/opledger/opledger/internal/testkit/testdb"
	"github.com/opledger/opledger/keyed"
	"github.com/opledger/opledger/ledger"
	"github.com/opledger/opledger/outbox"
	"github.com/opledger/opledger/txmiddleware"
)

// consoleScreenshotsEnv names a directory where TestConsoleBrowser saves
// its screenshots (docs/images holds the ones docs/operations.md shows);
// without it they go to a temporary directory.
const consoleScreenshotsEnv = "OPLEDGER_CONSOLE_SCREENSHOTS"

// chromiumPath finds Debian's chromium; without it the browser test
// skips, unless OPLEDGER_TEST_REQUIRE_DBS=1 (CI), where it fails.
func chromiumPath(t *testing.T) string {
	t.Helper()
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	if os.Getenv(testdb.EnvRequire) == "1" {
		t.Fatalf("no chromium on PATH, and %s=1 requires the browser test (apt-get install chromium)", testdb.EnvRequire)
	}
	t.Skip("no chromium on PATH (apt-get install chromium)")
	return ""
}

// freshDatabase returns a DSN of a new, empty database on dsn's server
// (dropped at the end), or a new SQLite file, so that the demo's default
// tables are the test's own.
func freshDatabase(t *testing.T, family, dsn string) string {
	t.Helper()
	if family == "sqlite" {
		return "sqlite:" + filepath.Join(t.TempDir(), "console.db")
	}
	ctx := context.Background()
	name := fmt.Sprintf("opl_console_%d", time.Now().UnixNano()%1_000_000_000)
	db, tg, err := openDB(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if _, err := db.ExecContext(ctx, "CREATE DATABASE "+tg.dialect.QuoteIdent(name)); err != nil {
		t.Fatal(err)
	}
	var fresh string
	switch family {
	case "postgres":
		u, err := url.Parse(dsn)
		if err != nil {
			t.Fatal(err)
		}
		u.Path = "/" + name
		fresh = u.String()
	default:
		cfg, err := gomysql.ParseDSN(dsn)
		if err != nil {
			t.Fatal(err)
		}
		cfg.DBName = name
		fresh = cfg.FormatDSN()
	}
	t.Cleanup(func() {
		db, tg, err := openDB(context.Background(), dsn)
		if err != nil {
			t.Error(err)
			return
		}
		defer db.Close()
		drop := "DROP DATABASE " + tg.dialect.QuoteIdent(name)
		if family == "postgres" {
			drop += " WITH (FORCE)"
		}
		if _, err := db.ExecContext(context.Background(), drop); err != nil {
			t.Error(err)
		}
	})
	return fresh
}

// gatePublisher refuses messages as undeliverable until open, then
// delivers them to delivered.
type gatePublisher struct {
	mu        sync.Mutex
	open      bool
	delivered chan string
}

func (p *gatePublisher) Publish(ctx context.Context, e outbox.Envelope) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.open {
		return fmt.Errorf("%w: the broker refuses topic %s (a test's gate)", outbox.ErrUndeliverable, e.Topic)
	}
	select {
	case p.delivered <- e.ID:
	default:
	}
	return nil
}

func (p *gatePublisher) setOpen() {
	p.mu.Lock()
	p.open = true
	p.mu.Unlock()
}

// startConsole runs opledger console as a user would (the token in
// $OPLEDGER_CONSOLE_TOKEN) and returns its address and its log.
func startConsole(t *testing.T, dsn string) (base string, log *syncBuffer) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	pr, pw := io.Pipe()
	log = &syncBuffer{}
	done := make(chan int, 1)
	go func() {
		done <- run(ctx, []string{"console", "--dsn", dsn, "--listen", "127.0.0.1:0", "--allow-actions"}, pw, log)
		pw.Close()
	}()
	t.Cleanup(func() {
		cancel()
		if code := <-done; code != 0 {
			t.Errorf("console exited %d: %s", code, log.String())
		}
	})
	line, err := bufio.NewReader(pr).ReadString('\n')
	go io.Copy(io.Discard, pr)
	if err != nil {
		t.Fatalf("console printed no address: %v; stderr %s", err, log.String())
	}
	i, j := strings.Index(line, "http://"), strings.Index(line, "/ (")
	if i < 0 || j < i {
		t.Fatalf("console's first line: %q", line)
	}
	return line[i:j], log
}

// TestConsoleBrowser: opledger console in headless Chromium, on every
// database, over a database the demo filled (with --chain: the outbox
// too) and hostile rows: no page runs a script a hostile value carries
// (window.pwned stays undefined) and the values are shown as text; an
// entry is found by its key, hashed in the page (the request never holds
// the key); a dead outbox message is retried with the token (dry run,
// then the receipt) and the relay delivers it. Screenshots are saved
// (docs/images with OPLEDGER_CONSOLE_SCREENSHOTS=docs/images).
func TestConsoleBrowser(t *testing.T) {
	chrome := chromiumPath(t)
	for family, dsn := range operatorTargets(t) {
		t.Run(family, func(t *testing.T) {
			testdb.Reserve(t, family, 6)
			dsn := freshDatabase(t, family, dsn)
			if code, out, errs := runCmd(t, "demo", "--dsn", dsn, "--calls", "60", "--outage-calls", "10", "--chain"); code != 0 {
				t.Fatalf("demo: %d\n%s\n%s", code, out, errs)
			}
			ctx := context.Background()
			db, tg, err := openDB(ctx, dsn)
			if err != nil {
				t.Fatal(err)
			}
			defer db.Close()
			e := &opEnv{dsn: dsn, table: ledger.DefaultTable, db: db, tg: tg}
			now := time.Now()
			found := e.put(t, now.Add(-time.Minute), "tenant-browser", opMethod, "browser-key-1", false)
			sent := now.Add(-10 * time.Minute).Truncate(time.Second)
			foundSent := e.putFirstSent(t, now.Add(-time.Minute), "tenant-browser", opMethod, "browser-key-sent", sent)
			v7Key := keyed.NewKey() // a UUIDv7: it carries its birth
			foundV7 := e.put(t, now, "tenant-browser", opMethod, v7Key, false)
			hs := putHostile(t, e, outbox.TableFor(e.table), now)

			// A message the broker refuses: the relay sets it aside (dead).
			ob, err := outbox.New(tg.dialect)
			if err != nil {
				t.Fatal(err)
			}
			pub := &gatePublisher{delivered: make(chan string, 16)}
			deadID := enqueueOne(t, db, tg, ob, outbox.Message{Name: "TransferCompleted", Topic: "payments.refused", Key: "account-42", Payload: []byte(`{"amount":5}`)})
			rctx, stopRelay := context.WithCancel(ctx)
			relay, err := outbox.NewRelay(db, ob, pub, outbox.WithPollInterval(50*time.Millisecond))
			if err != nil {
				t.Fatal(err)
			}
			relayDone := make(chan error, 1)
			go func() { relayDone <- relay.Run(rctx) }()
			defer func() {
				stopRelay()
				if err := <-relayDone; err != nil && !errors.Is(err, context.Canceled) {
					t.Error(err)
				}
			}()
			waitDead(t, db, ob, deadID)
			pub.setOpen()

			token := "browser-test-token-0123456789"
			t.Setenv(consoleTokenEnv, token)
			base, log := startConsole(t, dsn)

			shots := os.Getenv(consoleScreenshotsEnv)
			if shots == "" {
				shots = t.TempDir()
			} else if err := os.MkdirAll(shots, 0o755); err != nil {
				t.Fatal(err)
			}
			opts := append(chromedp.DefaultExecAllocatorOptions[:], chromedp.ExecPath(chrome), chromedp.Flag("headless", true), chromedp.NoSandbox,
				chromedp.DisableGPU, chromedp.Flag("disable-quic", true), chromedp.NoFirstRun, chromedp.Flag("disable-background-networking", true),
				chromedp.Flag("disable-component-update", true), chromedp.Flag("disable-sync", true), chromedp.UserDataDir(t.TempDir()),
				chromedp.WindowSize(1280, 900))
			actx, cancelA := chromedp.NewExecAllocator(ctx, opts...)
			defer cancelA()
			bctx, cancelB := chromedp.NewContext(actx)
			defer cancelB()
			// The first run starts the browser, on a context without a
			// timeout (a timeout there would stop the browser); each step
			// after it has one.
			if err := chromedp.Do(bctx, chromedp.Navigate(base+"/")); err != nil {
				t.Fatal(err)
			}
			do := func(what string, steps ...chromedp.Action[chromedp.Void]) {
				t.Helper()
				sctx, cancel := context.WithTimeout(bctx, time.Minute)
				defer cancel()
				if err := chromedp.Do(sctx, steps...); err != nil {
					t.Fatalf("browser: %s: %v\nconsole log:\n%s", what, err, log.String())
				}
			}
			text := func(sel string) string {
				t.Helper()
				sctx, cancel := context.WithTimeout(bctx, time.Minute)
				defer cancel()
				v, err := chromedp.Run(sctx, chromedp.Text(chromedp.CSS(sel)))
				if err != nil {
					t.Fatalf("browser: the text of %s: %v", sel, err)
				}
				return v
			}
			shot := func(name string) chromedp.Action[chromedp.Void] {
				return chromedp.Func(func(ctx context.Context, tg *chromedp.Target) error {
					png, err := chromedp.FullScreenshot(100)(ctx, tg)
					if err != nil {
						return err
					}
					if family != "postgres" && os.Getenv(consoleScreenshotsEnv) != "" {
						return nil // the documented screenshots are PostgreSQL's
					}
					return os.WriteFile(filepath.Join(shots, name), png, 0o644)
				})
			}
			notPwned := func(page string) chromedp.Action[chromedp.Void] {
				return chromedp.Func(func(ctx context.Context, tg *chromedp.Target) error {
					pwned, err := chromedp.Evaluate[bool](`typeof window.pwned !== "undefined"`)(ctx, tg)
					if err != nil {
						return err
					}
					if pwned {
						return fmt.Errorf("%s ran a hostile value's script (window.pwned is set)", page)
					}
					return nil
				})
			}
			id := found.ID()
			retryBtn := fmt.Sprintf(`//form[input[@name="id" and @value="%s"] and input[@name="action" and @value="retry"]]/button`, deadID)

			do("the ledger page", chromedp.WaitVisible(chromedp.CSS("#states")), notPwned("the ledger page"), shot("console-ledger.png"))
			pendingText := text("#oldest-pending")

			do("find by key", chromedp.Navigate(base+"/find"), chromedp.WaitVisible(chromedp.CSS("#find-key")),
				chromedp.SendKeys(chromedp.CSS("#caller"), "tenant-browser"), chromedp.SendKeys(chromedp.CSS("#method"), opMethod),
				chromedp.SendKeys(chromedp.CSS("#key"), "browser-key-1"), chromedp.Click(chromedp.CSS("#find-by-key")),
				chromedp.WaitVisible(chromedp.CSS("#entry-id")), notPwned("the find page"), shot("console-find.png"))
			entryID := text("#entry-id")
			findSent := func(what, key string) string {
				t.Helper()
				do(what, chromedp.Navigate(base+"/find"), chromedp.WaitVisible(chromedp.CSS("#find-key")),
					chromedp.SendKeys(chromedp.CSS("#caller"), "tenant-browser"), chromedp.SendKeys(chromedp.CSS("#method"), opMethod),
					chromedp.SendKeys(chromedp.CSS("#key"), key), chromedp.SendKeys(chromedp.CSS("#first_sent"), sent.UTC().Format(http.TimeFormat)),
					chromedp.Click(chromedp.CSS("#find-by-key")), chromedp.WaitVisible(chromedp.CSS("#entry-id")))
				return text("#entry-id")
			}
			sentID := findSent("find by key and first-sent time", "browser-key-sent")
			v7ID := findSent("find by a UUIDv7 key with a first-sent time", v7Key)
			do("the first-sent time ignored", chromedp.WaitVisible(chromedp.CSS("#first-sent-ignored")))

			do("a hostile entry", chromedp.Navigate(base+"/entry?id="+hs.entryIDs[1]), chromedp.WaitVisible(chromedp.CSS("#entry-caller")),
				notPwned("a hostile entry's page"))
			entryCaller := text("#entry-caller")

			do("the outbox", chromedp.Navigate(base+"/outbox"), chromedp.WaitVisible(chromedp.CSS("#dead")), notPwned("the outbox page"),
				shot("console-outbox.png"))
			deadText := text("#dead")
			do("retry: the dry run", chromedp.Click(chromedp.Search(retryBtn)), chromedp.WaitVisible(chromedp.CSS("#confirm")), notPwned("the dry run"),
				chromedp.SendKeys(chromedp.CSS("#token"), token), shot("console-dry-run.png"))
			do("retry: confirm", chromedp.Click(chromedp.CSS("#do-it")), chromedp.WaitVisible(chromedp.CSS("#receipt")), notPwned("the receipt"),
				shot("console-receipt.png"))
			receipt := text("#receipt")
			if !strings.Contains(pendingText, "<script>window.pwned=1</script>") {
				t.Errorf("the ledger page does not show the hostile caller as text: %q", pendingText)
			}
			if entryID != hex.EncodeToString(id[:]) {
				t.Errorf("found entry %q, want %x", entryID, id)
			}
			if want := foundSent.ID(); sentID != hex.EncodeToString(want[:]) {
				t.Errorf("found entry %q by key and first-sent time, want %x", sentID, want)
			}
			if want := foundV7.ID(); v7ID != hex.EncodeToString(want[:]) {
				t.Errorf("found entry %q by a UUIDv7 key and a first-sent time, want %x (the key's own birth)", v7ID, want)
			}
			if entryCaller != consoleHostile[1] {
				t.Errorf("a hostile caller shows as %q, want the text %q", entryCaller, consoleHostile[1])
			}
			if !strings.Contains(deadText, deadID) || !strings.Contains(deadText, "a test's gate") || !strings.Contains(deadText, "<script>window.pwned=1</script>") {
				t.Errorf("the dead messages: %q", deadText)
			}
			if !strings.Contains(receipt, "is an ordinary message again") {
				t.Errorf("receipt: %q", receipt)
			}
			select {
			case got := <-pub.delivered:
				if got != deadID {
					t.Errorf("delivered %s, want %s", got, deadID)
				}
			case <-time.After(30 * time.Second):
				t.Fatal("the retried message was not delivered")
			}
			do("the outbox after the delivery", chromedp.Navigate(base+"/outbox"), chromedp.WaitVisible(chromedp.CSS("#dead")))
			afterText := text("main")
			if strings.Contains(afterText, deadID) || strings.Contains(afterText, "account-42") {
				t.Errorf("the delivered message is still in the outbox page: %q", afterText)
			}
			l := log.String()
			if !strings.Contains(l, "console action done") || !strings.Contains(l, deadID) || strings.Contains(l, token) || strings.Contains(l, "browser-key-1") {
				t.Errorf("console log (want one receipt, no token, no key):\n%s", l)
			}
		})
	}
}

// enqueueOne commits one keyed operation that enqueues m, and returns
// the message's id.
func enqueueOne(t *testing.T, db *sql.DB, tg target, ob *outbox.Outbox, m outbox.Message) string {
	t.Helper()
	store, err := ledger.New(tg.dialect)
	if err != nil {
		t.Fatal(err)
	}
	r, err := txmiddleware.New(db, store)
	if err != nil {
		t.Fatal(err)
	}
	id, err := ledger.NewIdentity("tenant-browser", "/pay.v1.Payments/Transfer", "browser-outbox-key")
	if err != nil {
		t.Fatal(err)
	}
	var msgID string
	if _, err := r.Run(context.Background(), ledger.ClaimRequest{Identity: id, Fingerprint: ledger.FingerprintOf(m.Payload)},
		func(ctx context.Context, tx *sql.Tx) (ledger.Result, error) {
			var err error
			msgID, err = ob.Enqueue(ctx, tx, m)
			return ledger.Result{}, err
		}); err != nil {
		t.Fatal(err)
	}
	return msgID
}

// waitDead waits until the outbox lists id as dead: the database's own
// view of the relay's work.
func waitDead(t *testing.T, db *sql.DB, ob *outbox.Outbox, id string) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		dead, err := ob.Dead(context.Background(), db, 100)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range dead {
			if m.ID == id {
				return
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("message %s was not set aside as dead", id)
		}
		// Each read is a query: the loop waits on the database, paced by
		// its own round trips.
	}
}
