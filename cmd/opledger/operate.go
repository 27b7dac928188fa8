package main

import (
	"context"
	"database/sql"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/opledger/opledger/dialects"
	"github.com/opledger/opledger/internal/dialectkit"
	"github.com/opledger/opledger/ledger"

	"github.com/opledger/opledger/cmd/opledger/internal/console"
)

func init() {
	extraCommands["stats"] = command{"count the ledger's entries by state and by key birth, the oldest pending entry's age, the table's size, the window", runStats}
	extraCommands["evict"] = command{"delete one ledger entry (by caller, method and key) so that its key can run again", runEvict}
}

// keysNotShown is what every listing says about keys.
const keysNotShown = "keys are not shown: the ledger stores only the SHA-256 of each key, inside the entry id; " +
	"find one entry by its key with opledger inspect --caller C --method M --key K"

// ledgerSQL builds the operator commands' statements over the ledger's
// columns, with the dialect's quoting and placeholders.
type ledgerSQL struct {
	d     dialects.Dialect
	table string // quoted
}

func newLedgerSQL(d dialects.Dialect, table string) ledgerSQL {
	return ledgerSQL{d: d, table: d.QuoteIdent(table)}
}

// ph returns the placeholders 1..n.
func (q ledgerSQL) ph(n int) []any {
	out := make([]any, n)
	for i := range out {
		out[i] = q.d.Placeholder(i + 1)
	}
	return out
}

// stats is what opledger stats reports.
type stats struct {
	Table             string    `json:"table"`
	Entries           int64     `json:"entries"`
	Pending           int64     `json:"pending"`
	Completed         int64     `json:"completed"`
	Expired           int64     `json:"expired"`
	ExpiringNextHour  int64     `json:"expiring_next_hour"`
	OldestPendingAt   time.Time `json:"oldest_pending_created_at,omitzero"`
	OldestPendingAge  float64   `json:"oldest_pending_age_seconds"`
	TableBytes        int64     `json:"table_bytes"`
	IndexBytes        int64     `json:"index_bytes"`
	BytesPerEntry     float64   `json:"bytes_per_entry"`
	SizeEstimated     bool      `json:"size_estimated"`
	SizeUnavailable   string    `json:"size_unavailable,omitempty"`
	MeasuredAt        time.Time `json:"measured_at"`
	QueryMilliseconds int64     `json:"query_milliseconds"`

	// window is the ledger's window and the entries by key birth.
	window

	// Partitions are the table's partitions by key birth, when it is
	// partitioned (from the catalog: no scan).
	Partitions            []partitionStat `json:"partitions,omitempty"`
	PartitionsUnavailable string          `json:"partitions_unavailable,omitempty"`
}

// readStats counts the entries in one scan of the table. The counts by
// key birth ride on the same scan (one more SUM over born_at), so they cost
// no second pass and need no index on born_at; a table the migration
// 00004 has not reached (no born_at column) is reported without them.
func readStats(ctx context.Context, db *sql.DB, d dialects.Dialect, table string, now time.Time, lw ledgerWindow) (stats, error) {
	q := newLedgerSQL(d, table)
	s := stats{Table: table, MeasuredAt: now.UTC(), window: newWindow(lw, now)}
	born := ", COALESCE(SUM(CASE WHEN born_at <> 0 THEN 1 ELSE 0 END), 0)"
	if !hasBornAt(ctx, db, q) {
		born, s.BirthUnavailable = "", "the table has no born_at column: run opledger migrate up (migration 00004)"
	}
	p := q.ph(5)
	query := fmt.Sprintf("SELECT COUNT(*), "+
		"COALESCE(SUM(CASE WHEN expires_at <= %s THEN 1 ELSE 0 END), 0), "+
		"COALESCE(SUM(CASE WHEN expires_at > %s AND completed_at IS NULL THEN 1 ELSE 0 END), 0), "+
		"MIN(CASE WHEN expires_at > %s AND completed_at IS NULL THEN created_at END), "+
		"COALESCE(SUM(CASE WHEN expires_at > %s AND expires_at <= %s THEN 1 ELSE 0 END), 0)%s FROM %s",
		p[0], p[1], p[2], p[3], p[4], born, q.table)
	us := now.UnixMicro()
	var oldest sql.NullInt64
	dest := []any{&s.Entries, &s.Expired, &s.Pending, &oldest, &s.ExpiringNextHour}
	var withBirth int64
	if born != "" {
		dest = append(dest, &withBirth)
	}
	start := time.Now()
	if err := db.QueryRowContext(ctx, query, us, us, us, us, now.Add(time.Hour).UnixMicro()).Scan(dest...); err != nil {
		return s, err
	}
	s.QueryMilliseconds = time.Since(start).Milliseconds()
	if born != "" {
		s.WithBirth, s.WithoutBirth = &withBirth, new(s.Entries-withBirth)
	}
	s.Completed = s.Entries - s.Expired - s.Pending
	if oldest.Valid {
		s.OldestPendingAt = time.UnixMicro(oldest.Int64).UTC()
		s.OldestPendingAge = now.Sub(s.OldestPendingAt).Seconds()
	}
	if sz, ok := d.(dialectkit.Sizer); ok {
		ts, err := sz.TableSize(ctx, db, table)
		if err != nil {
			s.SizeUnavailable = oneLine(err)
		} else {
			s.TableBytes, s.IndexBytes, s.SizeEstimated = ts.Table, ts.Indexes, ts.Estimated
			if s.Entries > 0 {
				s.BytesPerEntry = float64(ts.Table+ts.Indexes) / float64(s.Entries)
			}
		}
	} else {
		s.SizeUnavailable = "the dialect cannot measure its tables (no dialectkit.Sizer)"
	}
	parts, err := readPartitions(ctx, db, d, table, lw)
	if err != nil {
		s.PartitionsUnavailable = oneLine(err)
	}
	s.Partitions = parts
	return s, nil
}

func runStats(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := newFlags("stats", stderr)
	dsn := fs.String("dsn", "", "database (default $OPLEDGER_DSN, else the SQLite file opledger.db)")
	table := fs.String("table", ledger.DefaultTable, "ledger table name")
	asJSON := fs.Bool("json", false, "print the figures as one JSON object")
	retention := fs.Duration("retention", 24*time.Hour, "the ledger's retention, as the servers' ledger.WithRetention")
	skew := fs.Duration("clock-skew", -1, "the ledger's clock skew, as the servers' ledger.WithClockSkew (default 1m, or a tenth of --retention when shorter)")
	if code, stop := parseFlags(fs, args, stdout); stop {
		return code
	}
	if fs.NArg() > 0 {
		return fail(stderr, "stats", unexpectedArg(fs))
	}
	if err := dialectkit.CheckTableName(*table); err != nil {
		return fail(stderr, "stats", err)
	}
	lw, err := (&windowFlags{retention: retention, skew: skew, resolve: new(time.Duration(0))}).window()
	if err != nil {
		return fail(stderr, "stats", err)
	}
	db, t, err := openExisting(ctx, dsnFrom(*dsn))
	if err != nil {
		return fail(stderr, "stats", err)
	}
	defer db.Close()
	s, err := readStats(ctx, db, t.dialect, *table, time.Now(), lw)
	if err != nil {
		return fail(stderr, "stats", t.scrubErr(err))
	}
	if *asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		if err := enc.Encode(s); err != nil {
			return fail(stderr, "stats", err)
		}
		return 0
	}
	var b strings.Builder
	fmt.Fprintf(&b, "%s: ledger table %s\n", t.display, *table)
	tw := tabwriter.NewWriter(&b, 0, 4, 2, ' ', 0)
	fmt.Fprintf(tw, "entries\t%d\n", s.Entries)
	fmt.Fprintf(tw, "  completed\t%d  (live, with a result: replayed to a retry)\n", s.Completed)
	fmt.Fprintf(tw, "  pending\t%d  (live, committed without a result: the key is stuck until it expires or is evicted)\n", s.Pending)
	fmt.Fprintf(tw, "  expired\t%d  (past retention: the next sweep deletes them)\n", s.Expired)
	fmt.Fprintf(tw, "expiring in the next hour\t%d\n", s.ExpiringNextHour)
	if s.OldestPendingAt.IsZero() {
		fmt.Fprintf(tw, "oldest pending entry\tnone\n")
	} else {
		fmt.Fprintf(tw, "oldest pending entry\t%s old  (created %s)\n", (time.Duration(s.OldestPendingAge) * time.Second).String(), s.OldestPendingAt.Format(time.RFC3339))
	}
	if s.SizeUnavailable != "" {
		fmt.Fprintf(tw, "size\tunavailable  (%s)\n", s.SizeUnavailable)
	} else {
		note := ""
		if s.SizeEstimated {
			note = "  (the database's estimates; ANALYZE TABLE refreshes them)"
		}
		fmt.Fprintf(tw, "size\ttable %s, indexes %s: %.0f bytes per entry%s\n", bytesIEC(s.TableBytes), bytesIEC(s.IndexBytes), s.BytesPerEntry, note)
	}
	s.window.print(tw, s.BirthUnavailable)
	printPartitions(tw, s.Partitions, s.PartitionsUnavailable)
	tw.Flush()
	fmt.Fprintf(&b, "(one scan of the table: %d ms; entries still being claimed in open transactions are not visible)\n", s.QueryMilliseconds)
	io.WriteString(stdout, b.String())
	return 0
}

// bytesIEC formats n bytes with a binary unit.
func bytesIEC(n int64) string { return console.BytesIEC(n) }

// listing is one entry as inspect lists it.
type listing struct {
	id                  []byte
	caller, method      string
	created, expires    int64
	completed, code, sz sql.NullInt64
}

// listEntries lists entries of method (all when "") that are pending and
// at least olderThan old (when pending), oldest first, at most limit.
func listEntries(ctx context.Context, db *sql.DB, d dialects.Dialect, table string, now time.Time, pending bool, olderThan time.Duration, method string, limit int) ([]listing, error) {
	q := newLedgerSQL(d, table)
	var (
		where []string
		args  []any
	)
	arg := func(v any) string { args = append(args, v); return d.Placeholder(len(args)) }
	if pending {
		where = append(where, "completed_at IS NULL", "expires_at > "+arg(now.UnixMicro()), "created_at <= "+arg(now.Add(-olderThan).UnixMicro()))
	}
	if method != "" {
		where = append(where, "method = "+arg(method))
	}
	query := "SELECT id, caller, method, created_at, completed_at, expires_at, code, LENGTH(response) FROM " + q.table
	if len(where) > 0 {
		query += " WHERE " + strings.Join(where, " AND ")
	}
	query += fmt.Sprintf(" ORDER BY created_at LIMIT %d", limit)
	rows, err := db.QueryContext(ctx, query, args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []listing
	for rows.Next() {
		var l listing
		if err := rows.Scan(&l.id, &l.caller, &l.method, &l.created, &l.completed, &l.expires, &l.code, &l.sz); err != nil {
			return nil, err
		}
		out = append(out, l)
	}
	return out, rows.Err()
}

func (l listing) state(now time.Time) string {
	switch {
	case l.expires <= now.UnixMicro():
		return "expired"
	case l.completed.Valid:
		return "completed"
	}
	return "pending"
}

func (l listing) result() string {
	if !l.completed.Valid {
		return "-"
	}
	return fmt.Sprintf("code %d, %d bytes", l.code.Int64, l.sz.Int64)
}

func printListing(w io.Writer, ls []listing, now time.Time, limit int) {
	fmt.Fprintln(w, keysNotShown)
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintf(tw, "ENTRY\tCALLER\tMETHOD\tSTATE\tCREATED\tAGE\tEXPIRES IN\tRESULT\n")
	for _, l := range ls {
		created := time.UnixMicro(l.created).UTC()
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", hex.EncodeToString(l.id[:min(len(l.id), 8)]), l.caller, l.method, l.state(now),
			created.Format(time.RFC3339), now.Sub(created).Round(time.Second), time.UnixMicro(l.expires).Sub(now).Round(time.Second), l.result())
	}
	tw.Flush()
	if len(ls) == 0 {
		fmt.Fprintln(w, "no entries match")
	} else if len(ls) == limit {
		fmt.Fprintf(w, "(the first %d, oldest first; --limit shows more)\n", limit)
	}
}

// evicted is the entry evict removed, as it was.
type evicted struct {
	listing
	found bool
}

// errHeld is evict's refusal: a transaction holds the entry.
var errHeld = errors.New("refused: a transaction holds this entry (an attempt is claiming, completing or sweeping it); nothing was removed; try again")

// evictEntry deletes the entry of id if it is still as read, in a
// transaction whose lock waits end after wait: a claim or completion in
// flight holds the row, and the delete is then refused instead of
// waiting.
func evictEntry(ctx context.Context, db *sql.DB, d dialects.Dialect, table string, id ledger.Identity, wait time.Duration) (evicted, error) {
	q := newLedgerSQL(d, table)
	digest := id.ID()
	var e evicted
	err := db.QueryRowContext(ctx, "SELECT id, caller, method, created_at, completed_at, expires_at, code, LENGTH(response) FROM "+
		q.table+" WHERE id = "+d.Placeholder(1), digest[:]).
		Scan(&e.id, &e.caller, &e.method, &e.created, &e.completed, &e.expires, &e.code, &e.sz)
	if errors.Is(err, sql.ErrNoRows) {
		return e, nil
	}
	if err != nil {
		return e, err
	}
	e.found = true
	var (
		tx      *sql.Tx
		release = func() {}
	)
	if lw, ok := d.(dialects.LockWaiter); ok {
		tx, release, err = lw.BeginBounded(ctx, db, nil, wait)
	} else {
		tx, err = db.BeginTx(ctx, nil)
	}
	if err != nil {
		if d.Classify(err) == dialects.ClassLockTimeout {
			return e, errHeld
		}
		return e, err
	}
	defer release()
	defer tx.Rollback()
	done := int64(-1)
	if e.completed.Valid {
		done = e.completed.Int64
	}
	p := q.ph(3)
	res, err := tx.ExecContext(ctx, fmt.Sprintf("DELETE FROM %s WHERE id = %s AND created_at = %s AND COALESCE(completed_at, -1) = %s", q.table, p[0], p[1], p[2]),
		digest[:], e.created, done)
	if err != nil {
		if c := d.Classify(err); c == dialects.ClassLockTimeout || c.Retryable() {
			return e, errHeld
		}
		return e, err
	}
	n, err := res.RowsAffected()
	if err != nil {
		return e, err
	}
	if n != 1 {
		return e, errors.New("refused: the entry changed while it was being evicted (claimed again or completed); nothing was removed; inspect it and try again")
	}
	if err := tx.Commit(); err != nil {
		return e, err
	}
	return e, nil
}

func runEvict(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := newFlags("evict", stderr)
	dsn := fs.String("dsn", "", "database (default $OPLEDGER_DSN, else the SQLite file opledger.db)")
	table := fs.String("table", ledger.DefaultTable, "ledger table name")
	caller := fs.String("caller", "", "caller fingerprint, as stored (see opledger inspect)")
	method := fs.String("method", "", "full method, /pkg.Service/Method")
	key := fs.String("key", "", "idempotency key (hashed before use; never printed)")
	wait := fs.Duration("wait", time.Second, "how long to wait for a transaction that holds the entry before refusing")
	if code, stop := parseFlags(fs, args, stdout); stop {
		return code
	}
	if fs.NArg() > 0 {
		return fail(stderr, "evict", unexpectedArg(fs))
	}
	if *wait <= 0 {
		return fail(stderr, "evict", errors.New("--wait must be positive"))
	}
	if err := dialectkit.CheckTableName(*table); err != nil {
		return fail(stderr, "evict", err)
	}
	id, err := ledger.NewIdentity(*caller, *method, *key)
	if err != nil {
		return fail(stderr, "evict", err)
	}
	db, t, err := openExisting(ctx, dsnFrom(*dsn))
	if err != nil {
		return fail(stderr, "evict", err)
	}
	defer db.Close()
	now := time.Now()
	e, err := evictEntry(ctx, db, t.dialect, *table, id, *wait)
	if errors.Is(err, errHeld) {
		fmt.Fprintf(stderr, "opledger evict: %s: %s\n", id, err)
		return 1
	}
	if err != nil {
		return fail(stderr, "evict", t.scrubErr(err))
	}
	if !e.found {
		fmt.Fprintf(stdout, "no committed entry for %s: nothing to evict (an attempt in flight holds its entry uncommitted, and cannot be evicted)\n", id)
		return 1
	}
	fmt.Fprintf(stdout, "evicted entry %s from %s:\n", hex.EncodeToString(e.id), *table)
	tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintf(tw, "  caller\t%s\n  method\t%s\n  state\t%s\n  created\t%s\n  expired\t%s\n  result\t%s\n", e.caller, e.method, e.state(now),
		time.UnixMicro(e.created).UTC().Format(time.RFC3339Nano), time.UnixMicro(e.expires).UTC().Format(time.RFC3339Nano), e.result())
	tw.Flush()
	fmt.Fprintln(stdout, "the next call with this key runs the operation again")
	return 0
}

// isTerminal reports whether w (or the writer it wraps: a
// maskingWriter) is a terminal (a character device).
func isTerminal(w io.Writer) bool {
	for {
		u, ok := w.(interface{ Unwrap() io.Writer })
		if !ok {
			break
		}
		w = u.Unwrap()
	}
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	fi, err := f.Stat()
	return err == nil && fi.Mode()&os.ModeCharDevice != 0 && fi.Mode()&os.ModeDevice != 0
}

// scrubErr returns err's message with the DSN's passwords removed.
func (t target) scrubErr(err error) error { return errors.New(t.scrub(err.Error())) }
