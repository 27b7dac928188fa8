package conformance

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io/fs"
	"sort"
	"strings"
	"time"

	"github.com/opledger/opledger/dialects"
	"github.com/opledger/opledger/internal/conformancekit"
	"github.com/opledger/opledger/internal/dialectkit"
	"github.com/opledger/opledger/internal/migrationfs"
	"github.com/opledger/opledger/ledger"
	"github.com/opledger/opledger/migrations"
)

// Target is one database and one ledger implementation to run the suite
// against.
type Target struct {
	// Name labels the target in reports ("postgres/pgx", "sqlite").
	Name string
	// DB is the pool the suite runs on. It should allow at least
	// concurrency+2 open connections; with fewer, the cases lower the
	// concurrency to fit and say so.
	DB *sql.DB
	// Dialect is the database's dialect. The suite writes its own SQL
	// with its Placeholder and QuoteIdent, recognises retryable errors
	// with its Classify, creates scratch tables from its migrations
	// (dialects.Schema) and derives the default capabilities from it.
	Dialect dialects.Dialect
	// NewLedger constructs the ledger under test for one case. It must use
	// cfg's table, retention, clock and result size limit.
	NewLedger func(cfg LedgerConfig) (ledger.Ledger, error)
	// Setup creates the ledger table for one case and returns how to drop
	// it. When nil the suite runs the Up sections of the dialect's
	// migrations (rendered for the table name) and their Down sections
	// afterwards.
	Setup func(ctx context.Context, db *sql.DB, table string) (teardown func(context.Context) error, err error)
	// Capabilities gate the cases that need them. Nil means
	// DefaultCapabilities(Dialect).
	Capabilities *Capabilities
	// Order is the order of the protocol the cases' units of work run in:
	// ClaimFirst (the zero value) or ClaimAtCommit, for which the ledger
	// must have a Record method, as ledger.Store has. Run the suite once per order the
	// application uses (see [Target.AtCommit]).
	Order Order

	// api is the transaction API of a target over another API (pgx); nil
	// for database/sql.
	api txAPI
	// pipelined: the units run through the ledger's pipelined forms.
	pipelined bool
}

// theAPI returns the target's transaction API.
func (tg *Target) theAPI() txAPI {
	if tg.api != nil {
		return tg.api
	}
	return sqlAPI{tg: tg}
}

// Order is the order in which a unit of work touches the ledger.
type Order int

const (
	// ClaimFirst: Claim, then (on acquisition) the business write and
	// Complete, then COMMIT; a replay commits the transaction's other
	// writes.
	ClaimFirst Order = iota
	// ClaimAtCommit: the business write first, then ledger.Recorder's
	// Record as the last statement; COMMIT when it recorded, ROLLBACK on
	// a replay (see txmiddleware.WithClaimAtCommit). Cases that only make
	// sense claim first (no-poisoning) skip.
	ClaimAtCommit
)

// String returns "claim-first" or "claim-at-commit".
func (o Order) String() string {
	switch o {
	case ClaimFirst:
		return "claim-first"
	case ClaimAtCommit:
		return "claim-at-commit"
	}
	return fmt.Sprintf("Order(%d)", int(o))
}

// AtCommit returns a copy of tg that runs the suite claim at commit, named
// tg.Name + "/claim-at-commit".
func (tg Target) AtCommit() Target {
	tg.Order = ClaimAtCommit
	tg.Name += "/" + ClaimAtCommit.String()
	return tg
}

// LedgerConfig is what a case asks of the ledger under test.
type LedgerConfig struct {
	// Table is the case's scratch table, already migrated.
	Table string
	// Retention is how long an entry lives after its claim.
	Retention time.Duration
	// Clock replaces time.Now; the expiry cases move it forward.
	Clock func() time.Time
	// MaxResultSize is the longest Result.Response the ledger must accept;
	// one byte more must be refused with ledger.ErrInvalid.
	MaxResultSize int
}

// Capabilities say what the target offers. Cases that need a missing
// capability skip with a reason. Start from [DefaultCapabilities] to
// change one.
type Capabilities struct {
	// Levels are the isolation levels to test, the first being the one
	// single-level cases use. Empty means sql.LevelDefault only.
	Levels []sql.IsolationLevel
	// KillConnections means the suite may terminate a session in the
	// middle of a transaction through the dialect's dialectkit.Sessions
	// (PostgreSQL pg_terminate_backend, MySQL KILL). The database user
	// needs the right to do so.
	KillConnections bool
	// BeginBounded begins a transaction whose lock waits end after about
	// half a second (at most one second) with an error the ledger reports
	// as ledger.ErrInProgress (or, where the database waits at BEGIN, a
	// BEGIN that fails with a lock timeout), and returns a function that
	// releases whatever it set up, called after the transaction ends. Nil
	// means the dialect's dialects.LockWaiter with a 0.5 s bound; a
	// dialect with neither skips the in-progress case.
	BeginBounded func(ctx context.Context, db *sql.DB) (*sql.Tx, func(), error)
}

// StoreTarget returns a Target that runs the suite against the kit's own
// *ledger.Store on db, with the default capabilities for d. Extra options
// are applied after the suite's table, retention, clock and size limit.
func StoreTarget(name string, db *sql.DB, d dialects.Dialect, opts ...ledger.Option) Target {
	return Target{
		Name:    name,
		DB:      db,
		Dialect: d,
		NewLedger: func(cfg LedgerConfig) (ledger.Ledger, error) {
			return ledger.New(d, append([]ledger.Option{
				ledger.WithTable(cfg.Table),
				ledger.WithRetention(cfg.Retention),
				ledger.WithClock(cfg.Clock),
				ledger.WithMaxResultSize(cfg.MaxResultSize),
			}, opts...)...)
		},
	}
}

// DefaultCapabilities returns what the suite assumes of a database from
// its dialect's optional interfaces, never from its name: the isolation
// levels the kit's own dialects declare (PostgreSQL: READ COMMITTED,
// REPEATABLE READ, SERIALIZABLE; MySQL: REPEATABLE READ, READ COMMITTED;
// SQLite and a dialect of another module: the default level only) and
// KillConnections for the kit's own dialects that can kill a session
// (PostgreSQL, MySQL). BeginBounded is left nil, so that the in-progress
// case uses the dialect's [dialects.LockWaiter], or skips without one.
func DefaultCapabilities(d dialects.Dialect) Capabilities {
	if d == nil {
		return Capabilities{Levels: []sql.IsolationLevel{sql.LevelDefault}}
	}
	_, kill := d.(dialectkit.Sessions)
	return Capabilities{Levels: dialectkit.TraitsOf(d).IsolationLevels, KillConnections: kill}
}

// caps returns the target's capabilities, derived from the dialect when
// none were given.
func (tg *Target) caps() Capabilities {
	if tg.Capabilities != nil {
		return *tg.Capabilities
	}
	return DefaultCapabilities(tg.Dialect)
}

func (tg *Target) validate() error {
	switch {
	case tg.DB == nil:
		return errors.New("conformance: target has no DB")
	case tg.Dialect == nil:
		return errors.New("conformance: target has no dialect")
	case tg.NewLedger == nil && tg.api == nil:
		return errors.New("conformance: target has no NewLedger")
	case tg.pipelined && tg.api == nil:
		return errors.New("conformance: a database/sql target cannot be pipelined (a pgx target can: pgxledger/pgxconformance)")
	case tg.Order != ClaimFirst && tg.Order != ClaimAtCommit:
		return fmt.Errorf("conformance: target has an unknown order %d", int(tg.Order))
	}
	return nil
}

func (tg *Target) levels() []sql.IsolationLevel {
	if lv := tg.caps().Levels; len(lv) > 0 {
		return lv
	}
	return []sql.IsolationLevel{sql.LevelDefault}
}

// setup creates the scratch table: the target's Setup hook, or the
// kit's migrations rendered for the table name. The Up sections run
// directly, without goose's version table or its advisory lock: the table
// name is unique to the case, so nothing else can be migrating it, and the
// lock (shared by every opledger migration on the server) would make cases
// wait on unrelated migrations.
func (tg *Target) setup(ctx context.Context, table string) (func(context.Context) error, error) {
	if tg.Setup != nil {
		return tg.Setup(ctx, tg.DB, table)
	}
	up, down, err := scratchSQL(tg.Dialect, table)
	if err != nil {
		return nil, err
	}
	if up == nil {
		return tg.setupWithGoose(ctx, table)
	}
	for i, stmt := range up {
		if _, err := tg.DB.ExecContext(ctx, stmt); err != nil {
			if i > 0 {
				tg.undoScratch(ctx, down)
			}
			return nil, fmt.Errorf("%w (in %q)", err, firstLine(stmt))
		}
	}
	return func(ctx context.Context) error {
		for _, stmt := range down {
			if _, err := tg.DB.ExecContext(ctx, stmt); err != nil {
				return err
			}
		}
		return nil
	}, nil
}

// undoScratch removes what a set-up that failed part-way created (MySQL
// and TiDB commit each DDL statement at once): it runs every Down
// statement, last migration first, and goes on past the ones that fail
// because their object was never created. The scratch names belong to
// the case alone, so nothing else is touched.
func (tg *Target) undoScratch(ctx context.Context, down []string) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), teardownLimit)
	defer cancel()
	for _, stmt := range down {
		_, _ = tg.DB.ExecContext(ctx, stmt)
	}
}

// scratchSQL returns the statements of every migration's Up section in
// order and of every Down section in reverse order. It returns nil
// statements when a file must run outside a transaction (goose's NO
// TRANSACTION annotation), which only goose's runner honours.
func scratchSQL(d dialects.Dialect, table string) (up, down []string, err error) {
	fsys, err := migrationfs.Files(d, table)
	if err != nil {
		return nil, nil, err
	}
	names, err := fs.Glob(fsys, "*.sql")
	if err != nil {
		return nil, nil, err
	}
	sort.Strings(names)
	for _, n := range names {
		b, err := fs.ReadFile(fsys, n)
		if err != nil {
			return nil, nil, err
		}
		src := string(b)
		if strings.Contains(src, "+goose NO TRANSACTION") {
			return nil, nil, nil
		}
		_, rest, ok := strings.Cut(src, "-- +goose Up")
		if !ok {
			return nil, nil, fmt.Errorf("migration %s has no Up section", n)
		}
		u, d, _ := strings.Cut(rest, "-- +goose Down")
		up = append(up, statements(u)...)
		down = append(statements(d), down...)
	}
	return up, down, nil
}

// statements splits SQL into statements at semicolons that end a line,
// dropping comment lines; text between goose's StatementBegin and
// StatementEnd annotations (a DO block, say) is one statement, as goose
// reads it.
func statements(src string) []string {
	var out []string
	var cur strings.Builder
	block := false
	for _, line := range strings.Split(src, "\n") {
		trimmed := strings.TrimSpace(line)
		switch trimmed {
		case "-- +goose StatementBegin":
			block = true
			continue
		case "-- +goose StatementEnd":
			block = false
			if s := strings.TrimSpace(cur.String()); s != "" {
				out = append(out, s)
			}
			cur.Reset()
			continue
		}
		if trimmed == "" || strings.HasPrefix(trimmed, "--") {
			continue
		}
		cur.WriteString(line)
		cur.WriteString("\n")
		if !block && strings.HasSuffix(trimmed, ";") {
			out = append(out, strings.TrimSpace(cur.String()))
			cur.Reset()
		}
	}
	if s := strings.TrimSpace(cur.String()); s != "" {
		out = append(out, s)
	}
	return out
}

func firstLine(s string) string {
	l, _, _ := strings.Cut(s, "\n")
	return l
}

// setupWithGoose applies the migrations through package migrations.
func (tg *Target) setupWithGoose(ctx context.Context, table string) (func(context.Context) error, error) {
	m, err := migrations.New(tg.DB, tg.Dialect, migrations.WithTable(table))
	if err != nil {
		return nil, err
	}
	if _, err := m.Up(ctx); err != nil {
		return nil, err
	}
	return func(ctx context.Context) error {
		_, err := m.Down(ctx)
		if _, derr := tg.DB.ExecContext(ctx, "DROP TABLE "+tg.Dialect.QuoteIdent(migrationfs.VersionTable(table))); err == nil {
			err = derr
		}
		return err
	}, nil
}

// poolingCheckLimit bounds the driver-settings probe.
const poolingCheckLimit = 30 * time.Second

// checkPooling runs the dialect's probe for the driver settings a
// connection pooler needs (dialectkit.PoolingChecker), before any case: a
// driver that prepares statements behind PgBouncer in transaction mode
// would otherwise fail the cases at random. The error is a set-up error
// (its message starts with "set-up:", which `opledger conformance` reports
// as such, with exit status 2).
func (tg *Target) checkPooling(ctx context.Context) error {
	pc, ok := tg.Dialect.(dialectkit.PoolingChecker)
	if !ok {
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, poolingCheckLimit)
	defer cancel()
	if err := pc.CheckPooling(ctx, tg.DB); err != nil {
		return fmt.Errorf("set-up: the driver is not configured for what lies between it and the database: %w", err)
	}
	return nil
}

// checkTx runs the dialect's transaction check (dialectkit.TxChecker) on a
// transaction of the target's database, before any case: a database whose
// transactions the ledger refuses (TiDB's optimistic ones, or pessimistic
// ones with lazy unique checks) would otherwise fail every case with the
// same refusal. Its error is a set-up error, as checkPooling's (see
// txCheckError).
func (tg *Target) checkTx(ctx context.Context) error {
	tc, ok := tg.Dialect.(dialectkit.TxChecker)
	if !ok {
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, poolingCheckLimit)
	defer cancel()
	tx, err := tg.DB.BeginTx(ctx, nil)
	if err != nil {
		return txCheckError(err)
	}
	defer tx.Rollback()
	return txCheckError(tc.CheckTx(ctx, tx))
}

// txCheckError classifies what checkTx met: nil for a suitable
// transaction; a set-up error for a refusal (dialects.ErrUnsuitableTx,
// whose message names the setting to change), and for a check that could
// not run (the database, or a dialect that does not fit the server).
func txCheckError(err error) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, dialects.ErrUnsuitableTx):
		return fmt.Errorf("set-up: the database's transactions are unsuitable for the ledger, so every case would fail: %w", err)
	}
	return fmt.Errorf("set-up: cannot check the database's transactions (dialectkit.TxChecker): %w", err)
}

// probe runs the checks that must pass before any case: checkPooling and
// checkTx.
func (tg *Target) probe(ctx context.Context) error {
	if err := tg.checkPooling(ctx); err != nil {
		return err
	}
	return tg.checkTx(ctx)
}

// beginBoundedSQL returns a database/sql target's bounded-wait
// transaction starter, or a reason why there is none.
func (tg *Target) beginBoundedSQL() (func(context.Context, *sql.DB) (*sql.Tx, func(), error), string) {
	if b := tg.caps().BeginBounded; b != nil {
		return b, ""
	}
	if lw, ok := tg.Dialect.(dialects.LockWaiter); ok {
		return func(ctx context.Context, db *sql.DB) (*sql.Tx, func(), error) {
			return lw.BeginBounded(ctx, db, nil, conformancekit.BoundedWait)
		}, ""
	}
	return nil, fmt.Sprintf("dialect %q cannot bound a lock wait (no dialects.LockWaiter): set Capabilities.BeginBounded", tg.Dialect.Name())
}
