package keyedcore_test

import (
	"context"
	"database/sql"
	"errors"
	"strings"
	"testing"
	"time"

	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/opledger/opledger/internal/keybirth"
	"github.com/opledger/opledger/internal/keyedcore"
	"github.com/opledger/opledger/internal/testkit/testdb"
	"github.com/opledger/opledger/internal/txledger"
	"github.com/opledger/opledger/keyed"
	"github.com/opledger/opledger/ledger"
	"github.com/opledger/opledger/policy"
	"github.com/opledger/opledger/txmiddleware"
)

const (
	shortMethod  = "/pay.v1.Payments/Transfer" // a retention of its own
	longMethod   = "/pay.v1.Payments/Refund"   // the ledger's
	strictMethod = "/pay.v1.Payments/Payout"   // refuses keys without a birth
)

// windowEnv is a core on SQLite with a ledger of the default window (24 h,
// skew 1 min) and a catalog whose Transfer has a retention of 1 h.
type windowEnv struct {
	s        *keyedcore.Server
	db       *sql.DB
	table    string
	store    *ledger.Store
	skew     time.Duration
	reader   *sdkmetric.ManualReader
	executed int
}

func newWindowEnv(t testing.TB) *windowEnv {
	t.Helper()
	tg := testdb.Targets()[0]
	db := tg.Open(t, 4)
	table := testdb.NewTable(t, db, tg.Dialect)
	store, err := ledger.New(tg.Dialect, ledger.WithTable(table))
	if err != nil {
		t.Fatal(err)
	}
	cat, err := policy.NewCatalog(
		policy.MethodPolicy{FullMethod: shortMethod, Kind: policy.KindKeyed, Retention: time.Hour},
		policy.MethodPolicy{FullMethod: longMethod, Kind: policy.KindKeyed},
		policy.MethodPolicy{FullMethod: strictMethod, Kind: policy.KindKeyed, UnknownBirth: policy.RefuseUnknownBirth},
	)
	if err != nil {
		t.Fatal(err)
	}
	tx, err := keyedcore.SQL(db, store)
	if err != nil {
		t.Fatal(err)
	}
	reader := sdkmetric.NewManualReader()
	s, err := keyedcore.NewServer(tx, keyedcore.ServerConfig{Catalog: cat,
		Telemetry: &keyedcore.Telemetry{MeterProvider: sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader)), Scope: "test"}})
	if err != nil {
		t.Fatal(err)
	}
	_, skew, _ := txledger.Window(store)
	return &windowEnv{s: s, db: db, table: table, store: store, skew: skew, reader: reader}
}

// entries counts the ledger's entries.
func (e *windowEnv) entries(t *testing.T) int {
	t.Helper()
	var n int
	if err := e.db.QueryRow("SELECT COUNT(*) FROM " + e.store.Dialect().QuoteIdent(e.table)).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// call identifies and runs one call (a resolve when resolve), and ends it.
func (e *windowEnv) call(t *testing.T, method, key string, firstSent []string, resolve bool) keyedcore.Answer {
	t.Helper()
	ctx := context.Background()
	ctx, c := e.s.Begin(ctx, method, resolve)
	id, a := c.Identify("tenant-a", true, []string{key}, firstSent, nil)
	if a.Outcome == 0 {
		if resolve {
			a = c.Resolve(ctx, id)
		} else {
			a = c.Run(ctx, ledger.ClaimRequest{Identity: id, Fingerprint: ledger.FingerprintOf([]byte("transfer 100"))},
				func(context.Context) (ledger.Result, error) {
					e.executed++
					return ledger.Result{Response: []byte("done")}, nil
				})
		}
	}
	c.End(ctx, a)
	return a
}

// TestWindowConfig: a method's retention longer than the ledger's, not
// longer than its skew, or given while the ledger does not state its
// window is refused at construction.
func TestWindowConfig(t *testing.T) {
	tg := testdb.Targets()[0]
	db := tg.Open(t, 2)
	store, err := ledger.New(tg.Dialect, ledger.WithTable(testdb.NewTable(t, db, tg.Dialect)), ledger.WithRetention(2*time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	tx, err := keyedcore.SQL(db, store)
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := tx.(txledger.ResultSizer); !ok {
		t.Error("keyedcore.SQL lost the ledger's result limit")
	}
	if r, k, ok := txledger.Window(tx); !ok || r != 2*time.Hour || k != time.Minute {
		t.Errorf("keyedcore.SQL states the window %v, %v, %v; want 2h, 1m", r, k, ok)
	}
	for _, c := range []struct {
		name      string
		tx        keyed.Transactions
		retention time.Duration
		ok        bool
	}{
		{"shorter", tx, time.Hour, true},
		{"the ledger's", tx, 2 * time.Hour, true},
		{"longer", tx, 3 * time.Hour, false},
		{"within the skew", tx, time.Minute, false},
		{"negative", tx, -time.Hour, false},
		{"no window stated", keyed.SQL(db, noWindow{store}), time.Hour, false},
		{"none of its own, no window stated", keyed.SQL(db, noWindow{store}), 0, true},
	} {
		cat, err := policy.NewCatalog(policy.MethodPolicy{FullMethod: shortMethod, Kind: policy.KindKeyed, Retention: c.retention})
		if err != nil {
			if !c.ok {
				continue // the catalog refuses it itself
			}
			t.Fatal(err)
		}
		_, err = keyedcore.NewServer(c.tx, keyedcore.ServerConfig{Catalog: cat})
		if (err == nil) != c.ok || (err != nil && !errors.Is(err, txmiddleware.ErrInvalidConfig)) {
			t.Errorf("%s: %v", c.name, err)
		}
	}
}

// noWindow is a ledger that does not state its window.
type noWindow struct{ ledger.Ledger }

// TestFirstSent: the first-sent header gives a key without a birth of its
// own its birth, as part of the identity; malformed or repeated, it is
// refused as an invalid key; beside a UUIDv7 key it is checked and
// ignored.
func TestFirstSent(t *testing.T) {
	e := newWindowEnv(t)
	ctx := context.Background()
	now := time.Now().UTC().Truncate(time.Second)
	sent := keybirth.FormatFirstSent(now.Add(-time.Minute))
	uuid7 := keybirth.New(now.Add(-2 * time.Minute))
	for _, c := range []struct {
		name      string
		key       string
		firstSent []string
		outcome   keyed.Outcome
		birth     time.Time
	}{
		{"random key", "k", nil, 0, time.Time{}},
		{"random key, first-sent", "k", []string{sent}, 0, now.Add(-time.Minute)},
		{"UUIDv7 key, first-sent", uuid7, []string{sent}, 0, now.Add(-2 * time.Minute)},
		{"malformed", "k", []string{"yesterday"}, keyed.KeyInvalid, time.Time{}},
		{"RFC 3339", "k", []string{now.Format(time.RFC3339)}, keyed.KeyInvalid, time.Time{}},
		{"twice", "k", []string{sent, sent}, keyed.KeyInvalid, time.Time{}},
		{"UUIDv7 key, malformed first-sent", uuid7, []string{"x"}, keyed.KeyInvalid, time.Time{}},
	} {
		_, call := e.s.Begin(ctx, longMethod, false)
		id, a := call.Identify("tenant-a", true, []string{c.key}, c.firstSent, nil)
		if a.Outcome != c.outcome {
			t.Errorf("%s: %v (%s), want %v", c.name, a.Outcome, a.Detail, c.outcome)
			continue
		}
		if c.outcome != 0 {
			if !strings.Contains(a.Detail, keybirth.FirstSentHeader) {
				t.Errorf("%s: detail %q does not name the header", c.name, a.Detail)
			}
			continue
		}
		b, ok := id.Birth()
		if ok != !c.birth.IsZero() || !b.Equal(c.birth) {
			t.Errorf("%s: birth %v, %v; want %v", c.name, b, ok, c.birth)
		}
	}
	// The first-sent time is part of the identity: a resolve with the
	// call's finds its answer, one with another time does not.
	if a := e.call(t, longMethod, "k", []string{sent}, false); a.Outcome != keyed.Executed {
		t.Fatalf("call: %v (%v)", a.Outcome, a.Err)
	}
	if a := e.call(t, longMethod, "k", []string{sent}, true); a.Outcome != keyed.Replayed {
		t.Errorf("resolve with the call's first-sent: %v (%v)", a.Outcome, a.Err)
	}
	if a := e.call(t, longMethod, "k", []string{keybirth.FormatFirstSent(now.Add(-time.Hour))}, true); a.Outcome != keyed.NotFound {
		t.Errorf("resolve with another first-sent: %v (%v)", a.Outcome, a.Err)
	}
}

// TestUnknownBirthPolicy: a method whose policy refuses keys without a
// birth refuses a random key sent without a first-sent time, and takes
// one with it, or a UUIDv7 key; the ledger is not asked.
func TestUnknownBirthPolicy(t *testing.T) {
	e := newWindowEnv(t)
	a := e.call(t, strictMethod, "random", nil, false)
	if a.Outcome != keyed.KeyInvalid || !strings.Contains(a.Detail, "UUIDv7") || !strings.Contains(a.Detail, keybirth.FirstSentHeader) || a.Lifetime != 0 {
		t.Fatalf("random key: %v (%q, lifetime %v)", a.Outcome, a.Detail, a.Lifetime)
	}
	if e.executed != 0 || e.entries(t) != 0 {
		t.Fatalf("refused, but %d runs, %d entries", e.executed, e.entries(t))
	}
	if a := e.call(t, strictMethod, "random", nil, true); a.Outcome != keyed.KeyInvalid {
		t.Errorf("resolve of a random key: %v", a.Outcome)
	}
	if a := e.call(t, strictMethod, "random", []string{keybirth.FormatFirstSent(time.Now())}, false); a.Outcome != keyed.Executed {
		t.Errorf("random key with first-sent: %v (%v)", a.Outcome, a.Err)
	}
	if a := e.call(t, strictMethod, keyed.NewKey(), nil, false); a.Outcome != keyed.Executed {
		t.Errorf("UUIDv7 key: %v (%v)", a.Outcome, a.Err)
	}
	// Another method accepts it, as before.
	if a := e.call(t, longMethod, "random", nil, false); a.Outcome != keyed.Executed {
		t.Errorf("random key on a method that accepts it: %v (%v)", a.Outcome, a.Err)
	}
}

// TestMethodRetention: a key born before its method's own window is
// refused as expired before the claim (no entry, no run), a call and a
// resolve alike; inside it, the call runs; every answer that reached the
// ledger states the method's lifetime.
func TestMethodRetention(t *testing.T) {
	e := newWindowEnv(t)
	old := keybirth.New(time.Now().Add(-2 * time.Hour))
	for _, resolve := range []bool{false, true} {
		a := e.call(t, shortMethod, old, nil, resolve)
		if a.Outcome != keyed.KeyExpired || a.Lifetime != time.Hour-e.skew {
			t.Fatalf("resolve %v: %v (%v), lifetime %v; want expired, %v", resolve, a.Outcome, a.Err, a.Lifetime, time.Hour-e.skew)
		}
	}
	if e.executed != 0 || e.entries(t) != 0 {
		t.Fatalf("expired, but %d runs, %d entries", e.executed, e.entries(t))
	}
	// The ledger's own window (24 h) still honours it on another method.
	if a := e.call(t, longMethod, old, nil, false); a.Outcome != keyed.Executed || a.Lifetime != 24*time.Hour-e.skew {
		t.Errorf("the ledger's method: %v (%v), lifetime %v", a.Outcome, a.Err, a.Lifetime)
	}
	fresh := keyed.NewKey()
	if a := e.call(t, shortMethod, fresh, nil, false); a.Outcome != keyed.Executed || a.Lifetime != time.Hour-e.skew {
		t.Errorf("fresh key: %v (%v), lifetime %v", a.Outcome, a.Err, a.Lifetime)
	}
	if a := e.call(t, shortMethod, fresh, nil, false); a.Outcome != keyed.Replayed || a.Lifetime != time.Hour-e.skew {
		t.Errorf("replay: %v, lifetime %v", a.Outcome, a.Lifetime)
	}
	if a := e.call(t, shortMethod, keyed.NewKey(), nil, true); a.Outcome != keyed.NotFound || a.Lifetime != time.Hour-e.skew {
		t.Errorf("resolve of a fresh key: %v, lifetime %v", a.Outcome, a.Lifetime)
	}
	// A refusal before the ledger states none.
	_, call := e.s.Begin(context.Background(), shortMethod, false)
	if _, a := call.Identify("tenant-a", true, nil, nil, nil); a.Outcome != keyed.KeyMissing || a.Lifetime != 0 {
		t.Errorf("no key: %v, lifetime %v", a.Outcome, a.Lifetime)
	}
}

// TestLedgerWindow: the ledger's ErrKeyExpired is KeyExpired, for a call
// (nothing run, nothing stored) and for a resolve (never NotFound); a key
// born in the future past the skew is KeyInvalid.
func TestLedgerWindow(t *testing.T) {
	e := newWindowEnv(t)
	for _, c := range []struct {
		name    string
		key     string
		sent    []string
		outcome keyed.Outcome
	}{
		{"UUIDv7 born before the window", keybirth.New(time.Now().Add(-48 * time.Hour)), nil, keyed.KeyExpired},
		{"first-sent before the window", "k", []string{keybirth.FormatFirstSent(time.Now().Add(-48 * time.Hour))}, keyed.KeyExpired},
		{"UUIDv7 born in the future", keybirth.New(time.Now().Add(time.Hour)), nil, keyed.KeyInvalid},
	} {
		for _, resolve := range []bool{false, true} {
			a := e.call(t, longMethod, c.key, c.sent, resolve)
			if a.Outcome != c.outcome {
				t.Errorf("%s (resolve %v): %v (%v), want %v", c.name, resolve, a.Outcome, a.Err, c.outcome)
			}
			if c.outcome == keyed.KeyExpired && (!errors.Is(a.Err, ledger.ErrKeyExpired) || a.Lifetime != 24*time.Hour-e.skew) {
				t.Errorf("%s (resolve %v): err %v, lifetime %v", c.name, resolve, a.Err, a.Lifetime)
			}
		}
	}
	if e.executed != 0 || e.entries(t) != 0 {
		t.Fatalf("refused, but %d runs, %d entries", e.executed, e.entries(t))
	}
}

// TestBirthAttribute: opledger.server.calls counts calls by where their
// key's birth came from.
func TestBirthAttribute(t *testing.T) {
	e := newWindowEnv(t)
	e.call(t, longMethod, keyed.NewKey(), nil, false)
	e.call(t, longMethod, "k1", []string{keybirth.FormatFirstSent(time.Now())}, false)
	e.call(t, longMethod, "k2", nil, false)
	e.call(t, longMethod, "k3", nil, false)
	var rm metricdata.ResourceMetrics
	if err := e.reader.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	got := map[string]int64{}
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			if m.Name != "opledger.server.calls" {
				continue
			}
			for _, dp := range m.Data.(metricdata.Sum[int64]).DataPoints {
				v, _ := dp.Attributes.Value(keyedcore.BirthAttr)
				got[v.AsString()] += dp.Value
			}
		}
	}
	want := map[string]int64{keyedcore.BirthKey: 1, keyedcore.BirthFirstSent: 1, keyedcore.BirthUnknown: 2}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("opledger.key.birth: %v, want %v", got, want)
			break
		}
	}
}

// FuzzIdentifyWindow drives Identify with any key and first-sent values,
// on a method with a retention of its own: it never panics, a refusal is
// an invalid or expired key whose message does not hold the key, and an
// identity's birth is the key's own, else the first-sent time.
func FuzzIdentifyWindow(f *testing.F) {
	e := newWindowEnv(f)
	now := time.Now()
	for _, seed := range []struct{ key, sent, second string }{
		{"k", "", ""},
		{"k", keybirth.FormatFirstSent(now), ""},
		{"k", keybirth.FormatFirstSent(now.Add(-3 * time.Hour)), ""},
		{keybirth.New(now), keybirth.FormatFirstSent(now), ""},
		{keybirth.New(now.Add(-3 * time.Hour)), "", ""},
		{"k", "Sun, 06 Dec 2026 12:00:00 GMT", "Sun, 06 Dec 2026 12:00:00 GMT"},
		{"k", "Sun, 06 Dec 2026 12:00:00 UTC", ""},
		{"", "x", ""},
	} {
		f.Add(seed.key, seed.sent, seed.second)
	}
	f.Fuzz(func(t *testing.T, key, sent, second string) {
		var firstSent []string
		if sent != "" {
			firstSent = append(firstSent, sent)
		}
		if second != "" {
			firstSent = append(firstSent, second)
		}
		_, call := e.s.Begin(context.Background(), shortMethod, false)
		id, a := call.Identify("tenant-a", true, []string{key}, firstSent, nil)
		if a.Outcome != 0 {
			switch a.Outcome {
			case keyed.KeyInvalid, keyed.KeyExpired:
			default:
				t.Fatalf("key %q, first-sent %q: %v", key, firstSent, a.Outcome)
			}
			if len(key) >= 8 && strings.Contains(a.Detail, key) {
				t.Fatalf("the message holds the key: %q", a.Detail)
			}
			return
		}
		b, ok := id.Birth()
		if own, has := keybirth.Birth(key); has {
			if !ok || !b.Equal(own.UTC().Truncate(time.Microsecond)) && !b.Equal(own) {
				t.Fatalf("key %q: birth %v, %v; want the key's %v", key, b, ok, own)
			}
			return
		}
		if len(firstSent) == 1 {
			want, err := keybirth.ParseFirstSent(firstSent[0])
			if err != nil || !ok || !b.Equal(want) {
				t.Fatalf("first-sent %q: birth %v, %v (parse %v, %v)", firstSent[0], b, ok, want, err)
			}
		} else if ok {
			t.Fatalf("key %q without first-sent has a birth %v", key, b)
		}
	})
}
