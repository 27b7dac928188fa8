// Package pgdialect is the kit's PostgreSQL dialect, which
// dialects/postgres returns (postgres.New); its package doc describes the
// SQL. The kit's own code uses this package where it needs the concrete
// type and its optional interfaces (internal/dialectkit).
package pgdialect

import (
	"errors"
	"strconv"
	"strings"

	"github.com/opledger/opledger/dialects"
	"github.com/opledger/opledger/internal/dialectkit"
)

// Dialect is the PostgreSQL dialect. The zero value is ready to use.
type Dialect struct{}

var (
	_ dialects.Dialect         = Dialect{}
	_ dialectkit.RecordQuerier = Dialect{}
	_ dialectkit.BirthReader   = Dialect{}
)

// New returns the PostgreSQL dialect.
func New() Dialect { return Dialect{} }

// Name returns "postgres".
func (Dialect) Name() string { return "postgres" }

// Placeholder returns "$n".
func (Dialect) Placeholder(n int) string { return "$" + strconv.Itoa(n) }

// QuoteIdent quotes name with double quotes.
func (Dialect) QuoteIdent(name string) string {
	return `"` + strings.ReplaceAll(name, `"`, `""`) + `"`
}

const columns = `request_fp, code, response, response_type, created_at, completed_at, expires_at`

// Queries returns the ledger's SQL for table. Its inserts end in ON
// CONFLICT DO NOTHING without a conflict target: the primary key of a
// table partitioned by born_at is (id, born_at), and no unique index
// covers id alone (born_at comes from the key's identity, so the two are
// unique together exactly when id is).
func (d Dialect) Queries(table string) dialects.Queries {
	return d.queries(table, "")
}

// BirthQueries returns Select, Complete and Lookup with born_at in their
// WHERE (see [dialectkit.BirthReader]): on a table partitioned by born_at
// each reads one partition. They are pruned by the hour of birth
// (PruneByHour): a prepared statement's generic plan (pgx caches its
// statements) on a table of a hundred partitions would otherwise lock
// every partition at each execution, which cost claims about a third of
// their rate on the partitioned table (docs/benchmarks.md).
func (d Dialect) BirthQueries(table string) dialectkit.BirthQueries {
	t := d.QuoteIdent(table)
	return dialectkit.BirthQueries{
		Select: `SELECT ` + columns + ` FROM ` + t + ` WHERE id = $1 AND born_at = $2`,
		Complete: `UPDATE ` + t + ` SET code = $1, response = $2, response_type = $3, completed_at = $4 ` +
			`WHERE id = $5 AND born_at = $6 AND completed_at IS NULL`,
		Lookup:      `SELECT ` + columns + ` FROM ` + t + ` WHERE id = $1 AND born_at = $2`,
		PruneByHour: true,
		ClaimHour:   ` WHERE id = $1 AND born_at = $7`,
	}
}

// insertColumns is the column list of the claim's insert.
const insertColumns = ` (id, caller, method, request_fp, created_at, expires_at, born_at) `

// queries returns the ledger's SQL for table; lw, when not empty, is the
// lock_timeout (in milliseconds) that the claim statements set for the
// rest of the transaction before they can wait.
func (d Dialect) queries(table, lw string) dialects.Queries {
	t := d.QuoteIdent(table)
	var with, from string
	values := `VALUES ($1, $2, $3, $4, $5, $6, $7)`
	if lw != "" {
		with = lockWaitCTE(lw)
		values, from = `SELECT $1, $2, $3, $4, $5, $6, $7 FROM lw`, ` FROM lw`
	}
	claimWith := `WITH `
	if lw != "" {
		claimWith = with + `, `
	}
	return dialects.Queries{
		Insert: with + `INSERT INTO ` + t + insertColumns + values + ` ON CONFLICT DO NOTHING`,
		// The outer query reads the statement's snapshot, taken before the
		// insert: it shows an entry committed before the statement began,
		// and not one whose claimant the insert waited for. It reads only
		// after a conflict: NOT EXISTS (SELECT 1 FROM ins) is a one-time
		// filter above the index scan, so an acquisition reads nothing
		// (and takes no SIRead lock under SERIALIZABLE).
		Claim: claimWith + `ins AS (INSERT INTO ` + t + insertColumns + values + ` ON CONFLICT DO NOTHING RETURNING 1) ` +
			`SELECT EXISTS (SELECT 1 FROM ins), e.request_fp, e.code, e.response, e.response_type, e.created_at, e.completed_at, e.expires_at ` +
			`FROM (SELECT 1) AS one LEFT JOIN (SELECT * FROM ` + t + ` WHERE id = $1 AND born_at = $7 AND NOT EXISTS (SELECT 1 FROM ins)) AS e ON true`,
		Select: `SELECT ` + columns + ` FROM ` + t + ` WHERE id = $1`,
		TakeOver: with + `UPDATE ` + t + ` SET request_fp = $1, created_at = $2, expires_at = $3, ` +
			`code = NULL, response = NULL, response_type = NULL, completed_at = NULL` + from + ` ` +
			`WHERE id = $4 AND expires_at <= $5`,
		Complete: `UPDATE ` + t + ` SET code = $1, response = $2, response_type = $3, completed_at = $4 ` +
			`WHERE id = $5 AND completed_at IS NULL`,
		Lookup: `SELECT ` + columns + ` FROM ` + t + ` WHERE id = $1`,
		// SKIP LOCKED: never wait on (or delete) a row another transaction
		// is taking it over; it is picked up by a later sweep if still expired.
		Sweep: `DELETE FROM ` + t + ` WHERE id IN (SELECT id FROM ` + t +
			` WHERE expires_at <= $1 LIMIT $2 FOR UPDATE SKIP LOCKED)`,
		CountExpired: `SELECT count(*) FROM ` + t + ` WHERE expires_at <= $1`,
	}
}

// RecordQueries returns the SQL of the ledger's Record for table: INSERT
// … ON CONFLICT DO NOTHING of the completed entry; on a conflict the
// ledger reads the existing entry with a separate SELECT; and TakeOver for
// an expired entry. A duplicate still uncommitted in another transaction
// makes the insert wait; under READ COMMITTED it then inserts nothing and
// the SELECT, a statement of its own, sees the winner; under REPEATABLE
// READ and SERIALIZABLE it fails with 40001.
//
// Record is optimised for what claim at commit is for, recording: the
// plain insert, and the take-over a separate UPDATE. A one-statement form
// like the claim's would slow every recorded entry, and a take-over inside
// the insert (ON CONFLICT DO UPDATE … WHERE expires_at <= now) locks the
// conflicting row even when it is live, so that concurrent replays of one
// key queue behind each other (figures in docs/benchmarks.md).
func (d Dialect) RecordQueries(table string) dialectkit.RecordQueries {
	return d.recordQueries(table, "")
}

// recordQueries returns the SQL of Record for table; lw, when not empty,
// is the lock_timeout (in milliseconds) that Insert and TakeOver set for
// the rest of the transaction before they can wait.
func (d Dialect) recordQueries(table, lw string) dialectkit.RecordQueries {
	t := d.QuoteIdent(table)
	var with, from string
	if lw != "" {
		with, from = lockWaitCTE(lw), ` FROM lw`
	}
	return dialectkit.RecordQueries{
		Insert: d.recordInsert(table, lw, true),
		TakeOver: with + `UPDATE ` + t + ` SET request_fp = $1, code = $2, response = $3, response_type = $4, ` +
			`created_at = $5, completed_at = $6, expires_at = $7` + from + ` WHERE id = $8 AND expires_at <= $9`,
	}
}

// recordInsert is the insert of a completed entry: ON CONFLICT DO
// NOTHING when onConflict is set, else failing on a conflict; lw, when not
// empty, is the lock_timeout (in milliseconds) it sets for the rest of
// the transaction before it can wait.
func (d Dialect) recordInsert(table, lw string, onConflict bool) string {
	values := `VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11)`
	with := ""
	if lw != "" {
		with, values = lockWaitCTE(lw), `SELECT $1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11 FROM lw`
	}
	insert := with + `INSERT INTO ` + d.QuoteIdent(table) + ` (id, caller, method, request_fp, code, response, response_type, created_at, completed_at, expires_at, born_at) ` + values
	if onConflict {
		insert += ` ON CONFLICT DO NOTHING`
	}
	return insert
}

// lockWaitCTE is the CTE that sets lock_timeout to lw milliseconds for the
// rest of the transaction, before the statement it starts can wait.
func lockWaitCTE(lw string) string {
	return `WITH lw AS (SELECT set_config('lock_timeout', '` + lw + `', true)) `
}

type sqlStater interface{ SQLState() string }

// Classify maps SQLSTATE codes: 23505 unique violation; 40001
// serialization failure; 40P01 deadlock; 55P03 lock timeout and 57014
// statement timeout or cancel; class 08 and 57P01–57P03 connection
// failures, as well as broken connections reported by the drivers
// (driver.ErrBadConn from lib/pq, "conn closed" from pgx, network errors).
func (Dialect) Classify(err error) dialects.Class {
	if err == nil {
		return dialects.ClassOther
	}
	var s sqlStater
	if errors.As(err, &s) {
		return classifyState(s.SQLState())
	}
	if c := dialectkit.ClassifyConnection(err); c != dialects.ClassOther {
		return c
	}
	// pgx reports a statement on a connection that broke under it (for
	// example during COMMIT) as an unexported error reading "conn closed".
	if strings.Contains(err.Error(), "conn closed") {
		return dialects.ClassConnection
	}
	return dialects.ClassOther
}

func classifyState(code string) dialects.Class {
	switch {
	case code == "23505":
		return dialects.ClassUniqueViolation
	case code == "40001":
		return dialects.ClassSerialization
	case code == "40P01":
		return dialects.ClassDeadlock
	case code == "55P03" || code == "57014":
		return dialects.ClassLockTimeout
	case strings.HasPrefix(code, "08") || code == "57P01" || code == "57P02" || code == "57P03":
		return dialects.ClassConnection
	}
	return dialects.ClassOther
}
