package conformance

import (
	"bytes"
	"errors"
	"fmt"
	"math"
	"strings"
	"sync"

	"github.com/opledger/opledger/internal/ledgerkit"
	"github.com/opledger/opledger/ledger"
)

// claimWith runs one unit of work for an arbitrary identity: claim, and on
// acquisition complete with r; retryable failures retry.
func (e *env) claimWith(id ledger.Identity, f ledger.Fingerprint, r ledger.Result) (*ledger.Claim, error) {
	var last error
	for attempt := 0; attempt < maxAttempts; attempt++ {
		c, _, err := e.runUnit(e.ctx, e.level, ledger.ClaimRequest{Identity: id, Fingerprint: f}, "", 0, r, true)
		if err == nil || !e.retryable(err) {
			return c, err
		}
		last = err
	}
	return nil, last
}

func caseIdentity(e *env) {
	const rounds = 3
	for r := range rounds {
		e.identityRound(fmt.Sprintf("shared-key-%d", r))
		if e.t.Failed() {
			return
		}
	}
	e.figure("%d rounds × 5 concurrent claims of one key: another caller, another method and an HTTP route acquired independently, another request ErrKeyReused, the same request replayed", rounds)
}

// identityVariant is a claim of the identity-isolation case that shares
// the original's key.
type identityVariant struct {
	name string
	id   ledger.Identity
	fp   ledger.Fingerprint
	res  ledger.Result
	want string // "acquire", "replay", "reused"
}

// identityRound claims key for one caller and method, then claims it
// concurrently for another caller, another method, an HTTP route, another
// request and the same request, and checks each outcome and entry.
func (e *env) identityRound(key string) {
	mk := func(caller, method string) ledger.Identity {
		id, err := ledger.NewIdentity(caller, method, key)
		if err != nil {
			e.t.Fatalf("identity: %v", err)
		}
		return id
	}
	f1, f2 := ledger.FingerprintOf([]byte("request one")), ledger.FingerprintOf([]byte("request two"))
	base := mk("tenant-a", suiteMethod)
	resBase := ledger.Result{Code: 1, Response: []byte("tenant-a " + key), TypeName: suiteType}
	if _, err := e.claimWith(base, f1, resBase); err != nil {
		e.t.Fatalf("set-up: %v", err)
	}
	vs := []identityVariant{
		{"another caller", mk("tenant-b", suiteMethod), f1, ledger.Result{Code: 2, Response: []byte("tenant-b " + key), TypeName: suiteType}, "acquire"},
		{"another method", mk("tenant-a", "/opledger.conformance.v1.Suite/Other"), f1, ledger.Result{Code: 3, Response: []byte("other method " + key), TypeName: suiteType}, "acquire"},
		{"an HTTP route", mk("tenant-a", "POST /opledger/conformance/{id}"), f1, ledger.Result{Code: 201, Response: []byte("http route " + key), TypeName: suiteType}, "acquire"},
		{"another request", base, f2, ledger.Result{Response: []byte("must not be stored")}, "reused"},
		{"the same request", base, f1, ledger.Result{Response: []byte("must not be stored")}, "replay"},
	}
	got, errs := e.claimAll(vs)
	for i, v := range vs {
		c, err := got[i], errs[i]
		switch v.want {
		case "acquire":
			if err != nil || !won(c) {
				e.t.Errorf("same key, %s: %v %v; want an independent acquisition", v.name, c, err)
			}
		case "reused":
			if !errors.Is(err, ledger.ErrKeyReused) {
				e.t.Errorf("same key, %s: %v %v; want ErrKeyReused", v.name, c, err)
			}
		case "replay":
			if err != nil || won(c) || !sameResult(c.Result, resBase) {
				e.t.Errorf("same key, %s: %v %v; want a replay of %q", v.name, c, err, resBase.Response)
			}
		}
	}
	for _, v := range append([]identityVariant{{"the original", base, f1, resBase, "acquire"}}, vs[:3]...) {
		en, err := e.l.Lookup(e.ctx, v.id)
		if err != nil || !sameResult(en.Result, v.res) || en.Fingerprint != v.fp {
			e.t.Errorf("Lookup of %s: %+v, %v; want its own result %q", v.name, en, err, v.res.Response)
		}
	}
}

// claimAll claims every variant at once and returns the outcomes in order.
func (e *env) claimAll(vs []identityVariant) ([]*ledger.Claim, []error) {
	var (
		wg    sync.WaitGroup
		start = make(chan struct{})
		got   = make([]*ledger.Claim, len(vs))
		errs  = make([]error, len(vs))
	)
	for i, v := range vs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			got[i], errs[i] = e.claimWith(v.id, v.fp, v.res)
		}()
	}
	close(start)
	wg.Wait()
	return got, errs
}

func caseFidelity(e *env) {
	max := e.maxResult()
	all := make([]byte, 1024)
	for i := range all {
		all[i] = byte(i)
	}
	big := bytes.Repeat([]byte{0, 0xff, 'x', 0x80, '\n'}, max/5+1)[:max]
	cases := []struct {
		name string
		r    ledger.Result
	}{
		{"nil response", ledger.Result{}},
		{"empty response", ledger.Result{Code: 5, Response: []byte{}, TypeName: "google.rpc.Status"}},
		{"every byte value", ledger.Result{Code: 13, Response: all, TypeName: "pkg.Tÿpe_ü.Reply"}},
		{"largest code", ledger.Result{Code: math.MaxInt32, Response: []byte("x"), TypeName: suiteType}},
		{"maximum size", ledger.Result{Code: 16, Response: big, TypeName: strings.Repeat("T", ledgerkit.MaxTypeNameLen)}},
	}
	replayers := minInt(4, e.conc)
	for i, c := range cases {
		key := fmt.Sprintf("fidelity-%d", i)
		if err := e.claimOnce(e.l, key, c.r); err != nil {
			e.t.Errorf("%s: store: %v", c.name, err)
			continue
		}
		var wg sync.WaitGroup
		errs := make([]error, replayers)
		for w := range replayers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				errs[w] = e.replayEquals(key, c.r)
			}()
		}
		wg.Wait()
		for w, err := range errs {
			if err != nil {
				e.t.Errorf("%s, replayer %d: %v", c.name, w, err)
			}
		}
		if en, err := e.lookup(key); err != nil || !equalResult(en.Result, c.r) {
			e.t.Errorf("%s: Lookup: %v; result differs from what was stored", c.name, err)
		}
	}
	// One byte over the limit is refused and nothing is stored.
	key := "fidelity-over"
	e.storeOver(key, append(append([]byte(nil), big...), 'y'), max)
	e.expectNothing(key, "result over the limit refused")
	e.figure("%d results (empty, nil, binary, code %d, %d bytes) replayed exactly to %d concurrent replayers; %d bytes refused", len(cases), math.MaxInt32, max, replayers, max+1)
}

// storeOver tries to store a result of over bytes (past the limit max) as
// key's and reports anything but ErrInvalid.
func (e *env) storeOver(key string, over []byte, max int) {
	switch {
	case e.pipelined:
		c, _, err := e.runUnit(e.ctx, e.level, e.req(key), "", 0, ledger.Result{Response: over}, true)
		if !errors.Is(err, ledger.ErrInvalid) {
			e.t.Errorf("a result of %d bytes (limit %d), pipelined: %v %v, want ErrInvalid", len(over), max, c, err)
		}
	case e.atCommit:
		tx, err := e.begin(e.ctx)
		if err != nil {
			e.t.Fatalf("begin: %v", err)
		}
		if c, err := record(e.ctx, e.l, tx, e.req(key), ledger.Result{Response: over}); !errors.Is(err, ledger.ErrInvalid) {
			e.t.Errorf("Record with %d bytes (limit %d): %v %v, want ErrInvalid", len(over), max, c, err)
		}
		tx.Rollback()
	default:
		tx, err := e.begin(e.ctx)
		if err != nil {
			e.t.Fatalf("begin: %v", err)
		}
		cl, err := claim(e.ctx, e.l, tx, e.req(key))
		if err != nil || !cl.Acquired() {
			tx.Rollback()
			e.t.Fatalf("claim: %v %v", cl, err)
		}
		if err := e.l.Complete(e.ctx, tx, cl, ledger.Result{Response: over}); !errors.Is(err, ledger.ErrInvalid) {
			e.t.Errorf("Complete with %d bytes (limit %d): %v, want ErrInvalid", len(over), max, err)
		}
		tx.Rollback()
	}
}

func (e *env) replayEquals(key string, want ledger.Result) error {
	c, won, err := e.runUnit(e.ctx, e.level, e.req(key), "", 0, ledger.Result{Response: []byte("must not be stored")}, false)
	if err != nil {
		return err
	}
	if won {
		return errors.New("acquired a completed key")
	}
	if !equalResult(c.Result, want) {
		return fmt.Errorf("replayed code %d, type %q, %d bytes; want code %d, type %q, %d bytes (or different bytes)",
			c.Result.Code, c.Result.TypeName, len(c.Result.Response), want.Code, want.TypeName, len(want.Response))
	}
	return nil
}

// equalResult compares results, nil and empty responses being equal.
func equalResult(a, b ledger.Result) bool {
	return a.Code == b.Code && a.TypeName == b.TypeName && bytes.Equal(a.Response, b.Response)
}
