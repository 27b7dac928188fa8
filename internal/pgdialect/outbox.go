package pgdialect

import (
	"github.com/opledger/opledger/internal/dialectkit"
	"github.com/opledger/opledger/internal/dialectkit/outboxsql"
)

var _ dialectkit.Outboxer = Dialect{}

// OutboxQueries returns the outbox's SQL for table: a locking batch (FOR
// UPDATE SKIP LOCKED), so that several relays share one outbox.
func (d Dialect) OutboxQueries(table string) dialectkit.OutboxQueries {
	return outboxsql.Queries(outboxsql.Dialect{Table: d.QuoteIdent(table), Ph: d.Placeholder, Octets: "octet_length",
		OnConflict: "ON CONFLICT (id) DO NOTHING", Lock: "FOR UPDATE SKIP LOCKED"})
}
