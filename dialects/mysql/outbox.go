package mysql

import (
	"github.com/opledger/opledger/dialects"
	"github.com/opledger/opledger/dialects/internal/outboxsql"
)

var _ dialects.Outboxer = Dialect{}

// OutboxQueries returns the outbox's SQL for table: a locking batch (FOR
// UPDATE SKIP LOCKED, MySQL 8 and MariaDB 10.6 or later), so that several
// relays share one outbox. A duplicate id fails with ER_DUP_ENTRY, which
// leaves the transaction usable.
func (d Dialect) OutboxQueries(table string) dialects.OutboxQueries {
	return outboxsql.Queries(outboxsql.Dialect{Table: d.QuoteIdent(table), Ph: d.Placeholder, Octets: "LENGTH",
		Lock: "FOR UPDATE SKIP LOCKED"})
}
