package sqlitedialect

import (
	"github.com/opledger/opledger/internal/dialectkit"
	"github.com/opledger/opledger/internal/dialectkit/outboxsql"
)

var _ dialectkit.Outboxer = Dialect{}

// OutboxQueries returns the outbox's SQL for table. SQLite has one writer
// at a time and no row locks: the batch locks nothing, and one relay per
// database delivers the outbox.
func (d Dialect) OutboxQueries(table string) dialectkit.OutboxQueries {
	return outboxsql.Queries(outboxsql.Dialect{Table: d.QuoteIdent(table), Ph: d.Placeholder, Octets: "length",
		OnConflict: "ON CONFLICT (id) DO NOTHING"})
}
