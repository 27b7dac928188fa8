// Package console is opledger console's web server: pages over the ledger,
// the outbox and the window, rendered with html/template from assets
// embedded in the binary (no build step, one small script that hashes a
// key in the browser). Everything the pages show from the database is
// attacker-controlled text: the templates escape it, control characters
// are shown as escapes and long values are cut. The server is read-only
// unless it was given a token; every action is a POST that carries the
// page's CSRF token and the operator's token, is refused from another
// origin, shows a dry run first, and is logged as a receipt.
package console

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"embed"
	"encoding/hex"
	"errors"
	"fmt"
	"html/template"
	"io/fs"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"time"

	"github.com/opledger/opledger/internal/keybirth"
	"github.com/opledger/opledger/internal/ledgerkit"
	"github.com/opledger/opledger/ledger"
	"github.com/opledger/opledger/outbox"
)

//go:embed assets
var assets embed.FS

// MinTokenLen is the shortest token accepted for actions, in bytes.
const MinTokenLen = 16

// Config configures a Server.
type Config struct {
	// Backend reads the database and acts on it.
	Backend Backend
	// Token, when not nil, enables the actions: each must carry it. It
	// is never shown or logged.
	Token []byte
	// Log receives one record per action (and per refused one). Nothing
	// else is logged.
	Log *slog.Logger
	// LoopbackOnly refuses requests whose Host is not a loopback name
	// (a page of another site that rebinds its name to 127.0.0.1).
	LoopbackOnly bool
	// Scrub removes secrets (a DSN's password) from a database error
	// before a page shows it.
	Scrub func(string) string
	// Now is the clock (time.Now when nil).
	Now func() time.Time
	// PageTimeout bounds each page's queries (5s when zero).
	PageTimeout time.Duration
}

// Server serves the console's pages.
type Server struct {
	cfg     Config
	tokenH  [32]byte
	csrf    string
	pages   map[string]*template.Template
	handler http.Handler
}

// New returns the console's server.
func New(cfg Config) (*Server, error) {
	if cfg.Backend == nil || cfg.Log == nil {
		return nil, errors.New("console: a backend and a logger are required")
	}
	if cfg.Token != nil && len(cfg.Token) < MinTokenLen {
		return nil, fmt.Errorf("console: the token must be at least %d bytes", MinTokenLen)
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Scrub == nil {
		cfg.Scrub = func(s string) string { return s }
	}
	if cfg.PageTimeout <= 0 {
		cfg.PageTimeout = 5 * time.Second
	}
	var b [32]byte
	if _, err := rand.Read(b[:]); err != nil {
		return nil, err
	}
	s := &Server{cfg: cfg, csrf: hex.EncodeToString(b[:])}
	if cfg.Token != nil {
		s.tokenH = sha256.Sum256(cfg.Token)
	}
	var err error
	if s.pages, err = parsePages(); err != nil {
		return nil, err
	}
	static, err := fs.Sub(assets, "assets/static")
	if err != nil {
		return nil, err
	}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /{$}", s.overview)
	mux.HandleFunc("GET /outbox", s.outbox)
	mux.HandleFunc("GET /find", s.find)
	mux.HandleFunc("POST /find", s.findByKey)
	mux.HandleFunc("GET /entry", s.entryByID)
	mux.HandleFunc("POST /outbox/dead", s.deadAction)
	mux.Handle("GET /static/", http.StripPrefix("/static/", http.FileServerFS(static)))
	s.handler = http.NewCrossOriginProtection().Handler(mux)
	return s, nil
}

// ServeHTTP serves a page, with headers that keep the browser from
// running or loading anything but the console's own script and style.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	h := w.Header()
	h.Set("Content-Security-Policy", "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; "+
		"form-action 'self'; frame-ancestors 'none'; base-uri 'none'")
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Referrer-Policy", "no-referrer")
	h.Set("Cache-Control", "no-store")
	h.Set("X-Frame-Options", "DENY")
	if s.cfg.LoopbackOnly && !loopbackHost(r.Host) {
		http.Error(w, "refused: this console answers only to a loopback host name (127.0.0.1, [::1] or localhost)", http.StatusMisdirectedRequest)
		return
	}
	s.handler.ServeHTTP(w, r)
}

// loopbackHost reports whether the Host header names the loopback.
func loopbackHost(hostport string) bool {
	host, _, err := net.SplitHostPort(hostport)
	if err != nil {
		host = hostport
	}
	host = strings.TrimSuffix(strings.TrimPrefix(host, "["), "]")
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// page is what every template gets.
type page struct {
	Title   string
	Nav     string
	CSRF    string
	Actions bool
	Data    any
	Error   string
	Status  int
}

func (s *Server) render(w http.ResponseWriter, name string, p page) {
	p.CSRF, p.Actions = s.csrf, s.cfg.Token != nil
	if p.Status == 0 {
		p.Status = http.StatusOK
	}
	var buf bytes.Buffer
	if err := s.pages[name].ExecuteTemplate(&buf, "layout", p); err != nil {
		http.Error(w, "console: rendering the page failed", http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.WriteHeader(p.Status)
	w.Write(buf.Bytes())
}

func (s *Server) fail(w http.ResponseWriter, title string, status int, err error) {
	s.render(w, "error", page{Title: title, Status: status, Error: s.cfg.Scrub(err.Error())})
}

func (s *Server) ctx(r *http.Request) (context.Context, context.CancelFunc) {
	return context.WithTimeout(r.Context(), s.cfg.PageTimeout)
}

func (s *Server) overview(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := s.ctx(r)
	defer cancel()
	start := time.Now()
	v, err := s.cfg.Backend.Ledger(ctx, s.cfg.Now())
	if err != nil {
		s.fail(w, "Ledger", http.StatusInternalServerError, err)
		return
	}
	v.Took = time.Since(start)
	s.render(w, "overview", page{Title: "Ledger", Nav: "ledger", Data: v})
}

func (s *Server) outbox(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := s.ctx(r)
	defer cancel()
	start := time.Now()
	v, err := s.cfg.Backend.Outbox(ctx, s.cfg.Now())
	if err != nil {
		s.fail(w, "Outbox", http.StatusInternalServerError, err)
		return
	}
	v.Took = time.Since(start)
	s.render(w, "outbox", page{Title: "Outbox", Nav: "outbox", Data: v})
}

// findForm is the find page's form as given back.
type findForm struct {
	Caller, Method, FirstSent, ID string
	// FirstSentIgnored: a first-sent time was given with a key that
	// carries its own birth (a UUIDv7), which the servers ignore too.
	FirstSentIgnored bool
	Searched         bool
	Entry            *Entry
}

func (s *Server) find(w http.ResponseWriter, r *http.Request) {
	s.render(w, "find", page{Title: "Find an entry", Nav: "find", Data: findForm{}})
}

// findByKey finds the entry of caller, method and the key's SHA-256
// (key_sha256, 64 hex digits), which the page's script computed in the
// browser: the raw key never reaches the server. A first-sent time
// (first_sent) is part of the identity of a key without a birth of its
// own; the script says whether the key has one (key_born).
func (s *Server) findByKey(w http.ResponseWriter, r *http.Request) {
	if !s.checkCSRF(w, r) {
		return
	}
	f := findForm{Caller: r.PostFormValue("caller"), Method: r.PostFormValue("method"), FirstSent: strings.TrimSpace(r.PostFormValue("first_sent"))}
	if r.PostForm.Has("key") {
		s.fail(w, "Find an entry", http.StatusBadRequest, errors.New("refused: the form sent a raw key; the page hashes the key in the browser (its script did not run)"))
		return
	}
	kh, err := hex.DecodeString(r.PostFormValue("key_sha256"))
	if err != nil || len(kh) != sha256.Size {
		s.fail(w, "Find an entry", http.StatusBadRequest, errors.New("key_sha256 must be the key's SHA-256 in 64 hex digits (the page's script computes it)"))
		return
	}
	// The caller and method are checked as the ledger checks them; the
	// key stands in for one the ledger would accept.
	if _, err := ledger.NewIdentity(f.Caller, f.Method, "k"); err != nil {
		s.fail(w, "Find an entry", http.StatusBadRequest, err)
		return
	}
	id, err := f.digest([32]byte(kh), r.PostFormValue("key_born") == "1")
	if err != nil {
		s.fail(w, "Find an entry", http.StatusBadRequest, err)
		return
	}
	s.showEntry(w, r, f, id)
}

// digest returns the entry id of the form's caller and method and the
// key's hash, as the servers compute it: with the first-sent time, when
// one was given for a key that carries no birth of its own
// (ledger.Identity.WithFirstSent, from the header's value as
// keybirth.ParseFirstSent reads it); without it otherwise.
func (f *findForm) digest(keyHash [32]byte, keyBorn bool) ([32]byte, error) {
	switch {
	case f.FirstSent == "":
		return ledgerkit.Digest(f.Caller, f.Method, keyHash), nil
	case keyBorn:
		f.FirstSentIgnored = true
		return ledgerkit.Digest(f.Caller, f.Method, keyHash), nil
	}
	t, err := keybirth.ParseFirstSent(f.FirstSent)
	if err != nil {
		return [32]byte{}, fmt.Errorf("first sent: %w", err)
	}
	return ledgerkit.DigestFirstSent(f.Caller, f.Method, keyHash, t.UnixMicro()), nil
}

func (s *Server) entryByID(w http.ResponseWriter, r *http.Request) {
	f := findForm{ID: r.URL.Query().Get("id")}
	id, err := hex.DecodeString(f.ID)
	if err != nil || len(id) != 32 {
		s.fail(w, "Find an entry", http.StatusBadRequest, errors.New("id must be an entry id (its digest) in 64 hex digits"))
		return
	}
	s.showEntry(w, r, f, [32]byte(id))
}

func (s *Server) showEntry(w http.ResponseWriter, r *http.Request, f findForm, id [32]byte) {
	ctx, cancel := s.ctx(r)
	defer cancel()
	e, err := s.cfg.Backend.Entry(ctx, id, s.cfg.Now())
	if err != nil {
		s.fail(w, "Find an entry", http.StatusInternalServerError, err)
		return
	}
	f.Searched, f.Entry = true, e
	if f.ID == "" {
		f.ID = hex.EncodeToString(id[:])
	}
	status := http.StatusOK
	if e == nil {
		status = http.StatusNotFound
	}
	s.render(w, "find", page{Title: "Find an entry", Nav: "find", Data: f, Status: status})
}

// checkCSRF refuses a POST without the page's CSRF token.
func (s *Server) checkCSRF(w http.ResponseWriter, r *http.Request) bool {
	r.Body = http.MaxBytesReader(w, r.Body, 64<<10)
	if err := r.ParseForm(); err != nil {
		s.fail(w, "Refused", http.StatusBadRequest, errors.New("the form could not be read"))
		return false
	}
	if subtle.ConstantTimeCompare([]byte(r.PostFormValue("csrf")), []byte(s.csrf)) != 1 {
		s.fail(w, "Refused", http.StatusForbidden, errors.New("refused: the form's CSRF token is missing or stale; reload the page"))
		return false
	}
	return true
}

// deadPlan is the dead-message action page: a dry run or a receipt.
type deadPlan struct {
	Action  string // retry or discard
	Message outbox.DeadMessage
	Found   bool
	Done    bool
	At      time.Time
}

// deadAction retries or discards one dead message: step dry-run shows
// what would change; step confirm, with the token, does it and logs the
// receipt.
func (s *Server) deadAction(w http.ResponseWriter, r *http.Request) {
	if !s.checkCSRF(w, r) {
		return
	}
	if s.cfg.Token == nil {
		s.fail(w, "Refused", http.StatusForbidden, errors.New("refused: actions are disabled (start opledger console with --allow-actions and a token)"))
		return
	}
	action, id, step := r.PostFormValue("action"), r.PostFormValue("id"), r.PostFormValue("step")
	if action != "retry" && action != "discard" {
		s.fail(w, "Refused", http.StatusBadRequest, errors.New("action must be retry or discard"))
		return
	}
	if raw, err := hex.DecodeString(id); err != nil || len(raw) != 32 {
		s.fail(w, "Refused", http.StatusBadRequest, errors.New("id must be a message id in 64 hex digits"))
		return
	}
	ctx, cancel := s.ctx(r)
	defer cancel()
	switch step {
	case "dry-run":
		v, err := s.cfg.Backend.Outbox(ctx, s.cfg.Now())
		if err != nil {
			s.fail(w, "Outbox", http.StatusInternalServerError, err)
			return
		}
		p := deadPlan{Action: action}
		for _, m := range v.Dead {
			if m.ID == id {
				p.Message, p.Found = m, true
			}
		}
		if !p.Found {
			p.Message.ID = id
		}
		s.render(w, "dead", page{Title: "Dry run: " + action, Nav: "outbox", Data: p})
	case "confirm":
		th := sha256.Sum256([]byte(r.PostFormValue("token")))
		if subtle.ConstantTimeCompare(th[:], s.tokenH[:]) != 1 {
			s.cfg.Log.Warn("console action refused: wrong token", "action", action, "message", id, "remote", r.RemoteAddr)
			s.fail(w, "Refused", http.StatusForbidden, errors.New("refused: wrong token; nothing was changed"))
			return
		}
		act := s.cfg.Backend.RetryDead
		if action == "discard" {
			act = s.cfg.Backend.DiscardDead
		}
		m, err := act(ctx, id)
		if err != nil {
			s.cfg.Log.Warn("console action failed", "action", action, "message", id, "remote", r.RemoteAddr, "error", s.cfg.Scrub(err.Error()))
			status := http.StatusInternalServerError
			if errors.Is(err, outbox.ErrNotDead) {
				status = http.StatusNotFound
			}
			s.fail(w, "Not done", status, err)
			return
		}
		p := deadPlan{Action: action, Message: m, Found: true, Done: true, At: s.cfg.Now().UTC()}
		s.cfg.Log.Info("console action done", "action", action, "message", m.ID, "seq", m.Seq, "topic", m.Topic, "name", m.Name,
			"attempts", m.Attempts, "waiting_behind", m.Waiting, "remote", r.RemoteAddr)
		s.render(w, "dead", page{Title: "Receipt: " + action, Nav: "outbox", Data: p})
	default:
		s.fail(w, "Refused", http.StatusBadRequest, errors.New("step must be dry-run or confirm"))
	}
}
