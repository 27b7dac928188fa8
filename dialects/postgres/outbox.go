package postgres

import "github.com/opledger/opledger/dialects"

var _ dialects.Outboxer = Dialect{}

const outboxColumns = `seq, id, partition_key, topic, name, payload, created_at`

// OutboxQueries returns the outbox's SQL for table: a locking batch (FOR
// UPDATE SKIP LOCKED), so that several relays share one outbox.
func (d Dialect) OutboxQueries(table string) dialects.OutboxQueries {
	t := d.QuoteIdent(table)
	return dialects.OutboxQueries{
		Insert: `INSERT INTO ` + t + ` (id, partition_key, topic, name, payload, created_at) ` +
			`VALUES ($1, $2, $3, $4, $5, $6) ON CONFLICT (id) DO NOTHING`,
		Batch:   `SELECT ` + outboxColumns + ` FROM ` + t + ` ORDER BY seq LIMIT $1 FOR UPDATE SKIP LOCKED`,
		Upto:    `SELECT seq, partition_key FROM ` + t + ` WHERE seq <= $1 ORDER BY seq`,
		Delete:  `DELETE FROM ` + t + ` WHERE seq = $1`,
		Locking: true,
	}
}
