package mysql

import "github.com/opledger/opledger/dialects"

var _ dialects.Outboxer = Dialect{}

const outboxColumns = `seq, id, partition_key, topic, name, payload, created_at`

// OutboxQueries returns the outbox's SQL for table: a locking batch (FOR
// UPDATE SKIP LOCKED, MySQL 8 and MariaDB 10.6 or later), so that several
// relays share one outbox. A duplicate id fails with ER_DUP_ENTRY, which
// leaves the transaction usable.
func (d Dialect) OutboxQueries(table string) dialects.OutboxQueries {
	t := d.QuoteIdent(table)
	return dialects.OutboxQueries{
		Insert: `INSERT INTO ` + t + ` (id, partition_key, topic, name, payload, created_at) ` +
			`VALUES (?, ?, ?, ?, ?, ?)`,
		Batch:   `SELECT ` + outboxColumns + ` FROM ` + t + ` ORDER BY seq LIMIT ? FOR UPDATE SKIP LOCKED`,
		Upto:    `SELECT seq, partition_key FROM ` + t + ` WHERE seq <= ? ORDER BY seq`,
		Delete:  `DELETE FROM ` + t + ` WHERE seq = ?`,
		Locking: true,
	}
}
