// Package outboxsql writes the outbox's statements (dialectkit.OutboxQueries)
// for the kit's dialects, whose SQL differs only in a few places.
package outboxsql

import "github.com/opledger/opledger/internal/dialectkit"

// Dialect is how one dialect's outbox SQL differs.
type Dialect struct {
	// Table is the quoted outbox table.
	Table string
	// Ph returns the n-th placeholder.
	Ph func(n int) string
	// Octets is the SQL function that returns a blob's length in bytes.
	Octets string
	// OnConflict follows the insert's VALUES ("" when a duplicate fails).
	OnConflict string
	// Lock follows the batch's LIMIT ("" when the batch locks nothing).
	Lock string
}

// Queries returns the outbox's statements for d.
func Queries(d Dialect) dialectkit.OutboxQueries {
	t, ph := d.Table, d.Ph
	insert := `INSERT INTO ` + t + ` (id, partition_key, topic, name, payload, created_at) VALUES (` +
		ph(1) + `, ` + ph(2) + `, ` + ph(3) + `, ` + ph(4) + `, ` + ph(5) + `, ` + ph(6) + `)`
	if d.OnConflict != "" {
		insert += " " + d.OnConflict
	}
	batch := `SELECT seq, id, partition_key, topic, name, payload, created_at, attempts FROM ` + t + ` o ` +
		`WHERE dead_at IS NULL AND NOT EXISTS (SELECT 1 FROM ` + t + ` d ` +
		`WHERE d.partition_key = o.partition_key AND d.dead_at IS NOT NULL AND d.seq < o.seq) ` +
		`ORDER BY seq LIMIT ` + ph(1)
	if d.Lock != "" {
		batch += " " + d.Lock
	}
	// The dead messages chosen by where, each with the count of its key's
	// later messages: one join, not a count per dead message (the table
	// has no index on partition_key for live messages).
	dead := func(where string) string {
		cols := `d.seq, d.id, d.partition_key, d.topic, d.name, d.size, d.created_at, d.attempts, d.last_error, d.dead_at`
		return `SELECT ` + cols + `, COUNT(w.seq) FROM (SELECT seq, id, partition_key, topic, name, ` + d.Octets + `(payload) AS size, ` +
			`created_at, attempts, last_error, dead_at FROM ` + t + ` WHERE ` + where + `) d ` +
			`LEFT JOIN ` + t + ` w ON w.partition_key = d.partition_key AND w.seq > d.seq GROUP BY ` + cols + ` ORDER BY d.seq`
	}
	return dialectkit.OutboxQueries{
		Insert:   insert,
		Batch:    batch,
		Upto:     `SELECT seq, partition_key FROM ` + t + ` WHERE seq <= ` + ph(1) + ` ORDER BY seq`,
		Delete:   `DELETE FROM ` + t + ` WHERE seq = ` + ph(1),
		Fail:     `UPDATE ` + t + ` SET attempts = attempts + 1, last_error = ` + ph(1) + `, dead_at = ` + ph(2) + ` WHERE seq = ` + ph(3),
		Dead:     dead(`dead_at IS NOT NULL ORDER BY seq LIMIT ` + ph(1)),
		DeadByID: dead(`id = ` + ph(1) + ` AND dead_at IS NOT NULL`),
		Revive:   `UPDATE ` + t + ` SET dead_at = NULL WHERE id = ` + ph(1) + ` AND dead_at IS NOT NULL`,
		Discard:  `DELETE FROM ` + t + ` WHERE id = ` + ph(1) + ` AND dead_at IS NOT NULL`,
		Count:    `SELECT COUNT(*), COALESCE(SUM(CASE WHEN dead_at IS NOT NULL THEN 1 ELSE 0 END), 0) FROM ` + t,
		Locking:  d.Lock != "",
	}
}
