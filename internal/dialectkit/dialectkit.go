// Package dialectkit is the kit's own side of the dialect seam: the
// optional interfaces that the kit's dialects (internal/pgdialect,
// internal/mysqldialect, internal/sqlitedialect) implement beyond
// [dialects.Dialect], [dialects.Schema] and [dialects.LockWaiter], and the
// helpers the ledger, the runners, the outbox, the conformance suite and
// opledger call on a dialect. Nothing here is part of the kit's API: a
// dialect of another module implements the public interfaces of package
// dialects only (docs/adr/0005-dialect-seam.md).
//
// Each optional interface is found with a type assertion; each entry says
// who calls it and what a dialect without it gets:
//   - [RecordQuerier]: the ledger's Record (claim at commit) in one
//     statement. Without it Record claims and completes: two statements.
//   - [StatementBounder]: the ledger's SQL with lock waits bounded inside
//     its own statements, for ClaimRequest.LockWait; txmiddleware then
//     prefers it to [dialects.LockWaiter].
//   - [Pipeliner]: forms of Complete and Record safe to send with COMMIT
//     in one round trip (package pgxledger).
//   - [TxChecker]: refuses a transaction mode in which a claim is unsafe
//     (TiDB's optimistic transactions), with [dialects.ErrUnsuitableTx].
//   - [Outboxer]: the SQL of the transactional outbox (package outbox).
//   - [Observed]: db.system.name and db.response.status_code, through
//     [SystemNameOf] and [StatusCodeOf].
//   - [ErrorExplainer]: what a driver's error means for the user's setup,
//     through [Explain].
//   - [PoolingChecker]: probes the driver through a connection pooler.
//   - [Sessions]: the database's view of sessions and lock waits, for the
//     conformance suite.
//   - [Described]: the database's [Traits], through [TraitsOf].
//   - [Sizer]: a table's bytes, for opledger stats.
package dialectkit

import (
	"context"
	"database/sql/driver"
	"errors"
	"fmt"
	"io"
	"net"
	"regexp"
	"syscall"

	"github.com/opledger/opledger/dialects"
)

// ClassifyConnection recognises connection failures common to every
// driver: driver.ErrBadConn, io.ErrUnexpectedEOF, io.EOF, net.Error and
// connection resets. Dialects call it after their own codes.
func ClassifyConnection(err error) dialects.Class {
	if err == nil {
		return dialects.ClassOther
	}
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return dialects.ClassOther
	}
	var ne net.Error
	if errors.Is(err, driver.ErrBadConn) || errors.Is(err, io.ErrUnexpectedEOF) ||
		errors.Is(err, io.EOF) || errors.Is(err, syscall.ECONNRESET) ||
		errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, syscall.EPIPE) || errors.As(err, &ne) {
		return dialects.ClassConnection
	}
	return dialects.ClassOther
}

// DefaultTable is the ledger's table when none is configured; the ledger,
// migrations and outbox all default to it (ledger.DefaultTable is the same
// constant).
const DefaultTable = "opledger_operations"

// MaxTableNameLen is the longest table name accepted, leaving room for the
// suffixes of index and version-table names within every database's limit.
const MaxTableNameLen = 48

var identRE = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)

// ErrBadTableName is returned (wrapped) for a table name that is not a
// plain identifier.
var ErrBadTableName = errors.New("invalid table name")

// CheckTableName reports whether name is a plain SQL identifier: a letter
// or underscore, then letters, digits or underscores, at most
// [MaxTableNameLen] bytes. Schema-qualified names are not accepted; set the
// schema through the connection (PostgreSQL search_path) instead.
func CheckTableName(name string) error {
	if len(name) == 0 || len(name) > MaxTableNameLen || !identRE.MatchString(name) {
		return fmt.Errorf("%w %q: want a letter or underscore followed by letters, digits or underscores, at most %d bytes",
			ErrBadTableName, truncate(name, 64), MaxTableNameLen)
	}
	return nil
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}
