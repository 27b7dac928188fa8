package conformance_test

// The outside-dialect proof: a dialect written outside the kit, by
// wrapping an existing one under another name and forwarding the public
// optional interfaces, gets migrations, the ledger and the whole
// conformance suite (capabilities included) with no edit inside the kit. The dialects and assertions use only the kit's
// exported API (internal/testkit/testdb merely opens PostgreSQL), as another
// module would.

import (
	"context"
	"crypto/rand"
	"database/sql"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/opledger/opledger/conformance"
	"github.com/opledger/opledger/dialects"
	"github.com/opledger/opledger/dialects/postgres"
	"github.com/opledger/opledger/internal/migrationfs"
	"github.com/opledger/opledger/internal/testkit/testdb"
	"github.com/opledger/opledger/ledger"
	"github.com/opledger/opledger/migrations"
)

// pgCompatible is a third party's dialect for a database that speaks
// PostgreSQL's SQL: everything is the wrapped dialect's (queries and
// classification, promoted by embedding; migrations and the lock-wait
// bound, forwarded), except the name.
type pgCompatible struct{ dialects.Dialect }

func (pgCompatible) Name() string { return "acme-pg" }

func (p pgCompatible) Migrations() dialects.Migrations {
	return p.Dialect.(dialects.Schema).Migrations()
}

func (p pgCompatible) BeginBounded(ctx context.Context, db *sql.DB, opts *sql.TxOptions, d time.Duration) (*sql.Tx, func(), error) {
	return p.Dialect.(dialects.LockWaiter).BeginBounded(ctx, db, opts, d)
}

// bareDialect implements dialects.Dialect and nothing else: none of the
// optional interfaces (Schema, LockWaiter, Sessions, Described), whatever
// the dialect it forwards to has.
type bareDialect struct{ d dialects.Dialect }

func (b bareDialect) Name() string                      { return "bare" }
func (b bareDialect) QuoteIdent(name string) string     { return b.d.QuoteIdent(name) }
func (b bareDialect) Placeholder(n int) string          { return b.d.Placeholder(n) }
func (b bareDialect) Queries(t string) dialects.Queries { return b.d.Queries(t) }
func (b bareDialect) Classify(err error) dialects.Class { return b.d.Classify(err) }

// postgresTarget returns the PostgreSQL target (pgx) of testdb. Its Open
// skips without OPLEDGER_TEST_POSTGRES_DSN, and fails instead with
// OPLEDGER_TEST_REQUIRE_DBS=1.
func postgresTarget(t *testing.T) testdb.Target {
	t.Helper()
	for _, tg := range testdb.Targets() {
		if tg.Family() == "postgres" && strings.HasSuffix(tg.Name, "/pgx") {
			return tg
		}
	}
	t.Fatal("testdb has no PostgreSQL (pgx) target")
	return testdb.Target{}
}

// TestOutsideDialect: a wrapper of postgres.New() named "acme-pg"
// migrates, claims, completes and replays, and passes the whole suite
// with the capabilities derived from it (the bounded lock wait of
// in-progress) and the isolation levels its author declares: the kill
// fault, which needs the kit's own session view, is skipped.
func TestOutsideDialect(t *testing.T) {
	t.Parallel()
	var d dialects.Dialect = pgCompatible{postgres.New()}
	// What the kit finds on the wrapper by type assertion alone.
	for name, ok := range map[string]bool{
		"dialects.Schema":     implements[dialects.Schema](d),
		"dialects.LockWaiter": implements[dialects.LockWaiter](d),
	} {
		if !ok {
			t.Fatalf("the wrapper does not implement %s", name)
		}
	}
	caps := conformance.DefaultCapabilities(d)
	if !slices.Equal(caps.Levels, []sql.IsolationLevel{sql.LevelDefault}) || caps.KillConnections {
		t.Fatalf("capabilities derived from the wrapper: %+v; want the default level and no kill", caps)
	}
	caps.Levels = []sql.IsolationLevel{sql.LevelReadCommitted, sql.LevelRepeatableRead, sql.LevelSerializable}

	db := postgresTarget(t).Open(t, conformance.DefaultConcurrency+4)
	target := func() conformance.Target {
		tg := conformance.StoreTarget("acme-pg", db, d)
		tg.Capabilities = &caps
		return tg
	}
	ctx := context.Background()

	t.Run("migrations", func(t *testing.T) {
		table := "opl_acme_" + strings.ToLower(rand.Text()[:10])
		m, err := migrations.New(db, d, migrations.WithTable(table))
		if err != nil {
			t.Fatalf("migrations.New: %v", err)
		}
		t.Cleanup(func() {
			db.Exec("DROP TABLE IF EXISTS " + d.QuoteIdent(table))
			db.Exec("DROP TABLE IF EXISTS " + d.QuoteIdent(migrationfs.VersionTable(table)))
		})
		up, err := m.Up(ctx)
		if err != nil || len(up) == 0 {
			t.Fatalf("Up: %v, %v", up, err)
		}
		st, err := m.Status(ctx)
		if err != nil || len(st) == 0 || !st[0].Applied {
			t.Fatalf("Status after Up: %+v, %v", st, err)
		}
		exerciseLedger(t, db, d, table)
		if _, err := m.Down(ctx); err != nil {
			t.Fatalf("Down: %v", err)
		}
		st, err = m.Status(ctx)
		if err != nil || len(st) == 0 || st[0].Applied {
			t.Fatalf("Status after Down: %+v, %v", st, err)
		}
		var n int
		if err := db.QueryRow("SELECT count(*) FROM information_schema.tables WHERE table_name = $1", table).Scan(&n); err != nil || n != 0 {
			t.Fatalf("the ledger table is still there after Down (%d, %v)", n, err)
		}
	})

	t.Run("suite", func(t *testing.T) {
		// Every case at every level; fewer herd keys than TestStore,
		// which measures the Store on PostgreSQL: the point here is the
		// wrapper.
		start := time.Now()
		conformance.Run(t, target(), conformance.WithKeys(min(keys(t), 10)))
		t.Logf("suite took %v", time.Since(start).Round(time.Millisecond))
	})

	// Run reports a case skipped inside as a skipped subtest; Check shows
	// it. The cases that need a capability must have run, not skipped.
	t.Run("capabilities-ran", func(t *testing.T) {
		rep := conformance.Check(ctx, target(), conformance.WithCases("in-progress", "faults", "snapshot"))
		want := []string{"snapshot/repeatable_read", "snapshot/serializable", "in-progress", "faults"}
		var got []string
		for _, r := range rep.Results {
			got = append(got, r.Name)
			if r.Verdict != conformance.Pass {
				t.Errorf("%s: %s %v", r.Name, r.Verdict, r.Messages)
			}
			if r.Name == "faults" && strings.Contains(r.Figures, "killed") {
				t.Errorf("faults killed a connection without the kit's session view: %s", r.Figures)
			}
			if r.Name == "in-progress" && !strings.Contains(r.Figures, "ErrInProgress") {
				t.Errorf("in-progress: %s", r.Figures)
			}
		}
		if !slices.Equal(got, want) {
			t.Errorf("cases %v, want %v", got, want)
		}
		if rep.Dialect != "acme-pg" {
			t.Errorf("report's dialect %q, want acme-pg", rep.Dialect)
		}
		if t.Failed() {
			t.Log(describe(rep))
		}
	})
}

func implements[I any](d dialects.Dialect) bool {
	_, ok := d.(I)
	return ok
}

// exerciseLedger claims, completes, commits and replays one operation
// through ledger.New(d) on table.
func exerciseLedger(t *testing.T, db *sql.DB, d dialects.Dialect, table string) {
	t.Helper()
	ctx := context.Background()
	s, err := ledger.New(d, ledger.WithTable(table))
	if err != nil {
		t.Fatalf("ledger.New: %v", err)
	}
	if s.Dialect() != d {
		t.Fatalf("the store's dialect is %v, want the wrapper", s.Dialect())
	}
	req := ledger.ClaimRequest{Identity: testdb.ID(t, "acme", "/acme.v1.Payments/Charge", "order-1"), Fingerprint: ledger.FingerprintOf([]byte("charge 10"))}
	res := ledger.Result{Code: 0, Response: []byte("charged"), TypeName: "acme.v1.ChargeResponse"}
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback()
	c, err := s.Claim(ctx, tx, req)
	if err != nil || !c.Acquired() {
		tx.Rollback()
		t.Fatalf("first claim: %v, %v; want acquired", c, err)
	}
	if err := s.Complete(ctx, tx, c, res); err != nil {
		tx.Rollback()
		t.Fatalf("Complete: %v", err)
	}
	if err := tx.Commit(); err != nil {
		t.Fatalf("commit: %v", err)
	}
	tx, err = db.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback()
	c, err = s.Claim(ctx, tx, req)
	if err != nil || c.Outcome != ledger.Replay || string(c.Result.Response) != "charged" || c.Result.TypeName != res.TypeName {
		t.Fatalf("second claim: %+v, %v; want a replay of %q", c, err, res.Response)
	}
	if en, err := s.Lookup(ctx, db, req.Identity); err != nil || en.State != ledger.Completed {
		t.Fatalf("Lookup: %+v, %v", en, err)
	}
}

// TestBareDialectHasNoMigrations: the kit's migrations refuse a dialect
// that ships none, with ErrNoMigrations (SQLite: no server needed).
func TestBareDialectHasNoMigrations(t *testing.T) {
	t.Parallel()
	tg := testdb.Targets()[0]
	d := bareDialect{tg.Dialect}
	db := tg.Open(t, 4)
	if _, err := migrations.New(db, d); !errors.Is(err, migrations.ErrNoMigrations) {
		t.Fatalf("migrations.New with a dialect without dialects.Schema: %v, want ErrNoMigrations", err)
	}
	if _, err := migrationfs.Files(d, "opl_bare"); !errors.Is(err, migrations.ErrNoMigrations) {
		t.Fatalf("migrationfs.Files: %v, want ErrNoMigrations", err)
	}
	// Without Setup the suite has no way to create its tables: every case
	// fails its set-up, saying so.
	rep := conformance.Check(context.Background(), conformance.StoreTarget("bare", db, d), conformance.WithCases("atomicity"))
	if len(rep.Results) != 1 || rep.Results[0].Verdict != conformance.Fail ||
		!strings.Contains(strings.Join(rep.Results[0].Messages, " "), "set-up") {
		t.Fatalf("suite on a dialect without migrations and without Setup: %s", describe(rep))
	}
}

// TestBareDialect: a dialect with none of the optional interfaces, its
// table created by the target's Setup, passes the suite on PostgreSQL at
// the default level, with in-progress skipped (no way to bound a lock
// wait), the connection kill skipped (no sessions), and mustWait falling
// back to its timer.
func TestBareDialect(t *testing.T) {
	t.Parallel()
	d := bareDialect{postgres.New()}
	caps := conformance.DefaultCapabilities(d)
	if !slices.Equal(caps.Levels, []sql.IsolationLevel{sql.LevelDefault}) || caps.KillConnections || caps.BeginBounded != nil {
		t.Fatalf("capabilities of a bare dialect: %+v; want the default level only, no kill, no bounded begin", caps)
	}
	const conc = 6
	db := postgresTarget(t).Open(t, conc+2)
	if _, err := migrations.New(db, d); !errors.Is(err, migrations.ErrNoMigrations) {
		t.Fatalf("migrations.New: %v, want ErrNoMigrations", err)
	}
	tg := conformance.StoreTarget("bare-pg", db, d)
	tg.Setup = func(ctx context.Context, db *sql.DB, table string) (func(context.Context) error, error) {
		q := d.QuoteIdent(table)
		for _, stmt := range []string{
			"CREATE TABLE " + q + " (id bytea PRIMARY KEY, caller text NOT NULL, method text NOT NULL, " +
				"request_fp bytea NOT NULL, code integer, response bytea, response_type text, " +
				"created_at bigint NOT NULL, completed_at bigint, expires_at bigint NOT NULL, born_at bigint NOT NULL DEFAULT 0)",
			"CREATE INDEX " + d.QuoteIdent(table+"_expires_idx") + " ON " + q + " (expires_at)",
		} {
			if _, err := db.ExecContext(ctx, stmt); err != nil {
				return nil, err
			}
		}
		return func(ctx context.Context) error {
			_, err := db.ExecContext(ctx, "DROP TABLE "+q)
			return err
		}, nil
	}
	rep := conformance.Check(context.Background(), tg, conformance.WithConcurrency(conc), conformance.WithKeys(8))
	t.Logf("bare dialect on PostgreSQL:\n%s", describe(rep))
	seen := map[string]conformance.CaseResult{}
	for _, r := range rep.Results {
		seen[r.Name] = r
		switch r.Name {
		case "in-progress":
			if r.Verdict != conformance.Skip || !strings.Contains(strings.Join(r.Messages, " "), "no dialects.LockWaiter") {
				t.Errorf("in-progress: %s %v; want a skip naming dialects.LockWaiter", r.Verdict, r.Messages)
			}
		case "snapshot":
			if r.Verdict != conformance.Skip {
				t.Errorf("snapshot: %s %v; want a skip (default level only)", r.Verdict, r.Messages)
			}
		case "window-partition-drop-under-claims":
			if r.Verdict != conformance.Skip || !strings.Contains(strings.Join(r.Messages, " "), "not partitioned") {
				t.Errorf("%s: %s %v; want a skip (the bare table is not partitioned)", r.Name, r.Verdict, r.Messages)
			}
		case "faults":
			if r.Verdict != conformance.Pass || !strings.Contains(r.Figures, "connection kill skipped") {
				t.Errorf("faults: %s, figures %q; want a pass with the kill skipped", r.Verdict, r.Figures)
			}
		default:
			if r.Verdict != conformance.Pass {
				t.Errorf("%s: %s %v", r.Name, r.Verdict, r.Messages)
			}
		}
	}
	for _, name := range []string{"herd/default", "wait-then-commit/default", "three-waiter-rollback/default", "in-progress", "faults"} {
		if _, ok := seen[name]; !ok {
			t.Errorf("no result for %s", name)
		}
	}
	if r := seen["wait-then-commit/default"]; !strings.Contains(r.Figures, "none returned within") {
		t.Errorf("wait-then-commit without dialectkit.Sessions: figures %q; want mustWait's timer", r.Figures)
	}
}
