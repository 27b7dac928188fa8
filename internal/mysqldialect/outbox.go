package mysqldialect

import (
	"github.com/opledger/opledger/internal/dialectkit"
	"github.com/opledger/opledger/internal/dialectkit/outboxsql"
)

var _ dialectkit.Outboxer = Dialect{}

// OutboxQueries returns the outbox's SQL for table: a locking batch (FOR
// UPDATE SKIP LOCKED, MySQL 8 and MariaDB 10.6 or later), so that several
// relays share one outbox. A duplicate id fails with ER_DUP_ENTRY, which
// leaves the transaction usable.
//
// The TiDB variant's batch locks with a plain FOR UPDATE: TiDB (v8.5)
// parses SKIP LOCKED and ignores it, so that such a batch returns rows
// another transaction holds locked, without waiting and without skipping
// them, and two relays would take the same messages. With FOR UPDATE a
// second relay waits for the first one's batch: relays sharing an outbox
// on TiDB take turns.
func (d Dialect) OutboxQueries(table string) dialectkit.OutboxQueries {
	lock := "FOR UPDATE SKIP LOCKED"
	if d.tidb {
		lock = "FOR UPDATE"
	}
	return outboxsql.Queries(outboxsql.Dialect{Table: d.QuoteIdent(table), Ph: d.Placeholder, Octets: "LENGTH",
		Lock: lock})
}
