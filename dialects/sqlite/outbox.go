package sqlite

import (
	"github.com/opledger/opledger/dialects"
	"github.com/opledger/opledger/dialects/internal/outboxsql"
)

var _ dialects.Outboxer = Dialect{}

// OutboxQueries returns the outbox's SQL for table. SQLite has one writer
// at a time and no row locks: the batch locks nothing, and one relay per
// database delivers the outbox.
func (d Dialect) OutboxQueries(table string) dialects.OutboxQueries {
	return outboxsql.Queries(outboxsql.Dialect{Table: d.QuoteIdent(table), Ph: d.Placeholder, Octets: "length",
		OnConflict: "ON CONFLICT (id) DO NOTHING"})
}
