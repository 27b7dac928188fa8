package sqlite

import "github.com/opledger/opledger/dialects"

var _ dialects.Outboxer = Dialect{}

const outboxColumns = `seq, id, partition_key, topic, name, payload, created_at`

// OutboxQueries returns the outbox's SQL for table. SQLite has one writer
// at a time and no row locks: the batch locks nothing, and one relay per
// database delivers the outbox.
func (d Dialect) OutboxQueries(table string) dialects.OutboxQueries {
	t := d.QuoteIdent(table)
	return dialects.OutboxQueries{
		Insert: `INSERT INTO ` + t + ` (id, partition_key, topic, name, payload, created_at) ` +
			`VALUES (?, ?, ?, ?, ?, ?) ON CONFLICT (id) DO NOTHING`,
		Batch:  `SELECT ` + outboxColumns + ` FROM ` + t + ` ORDER BY seq LIMIT ?`,
		Upto:   `SELECT seq, partition_key FROM ` + t + ` WHERE seq <= ? ORDER BY seq`,
		Delete: `DELETE FROM ` + t + ` WHERE seq = ?`,
	}
}
