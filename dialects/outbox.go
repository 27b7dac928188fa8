package dialects

// Outboxer is implemented by dialects that carry the transactional
// outbox (package outbox): its table comes with the dialect's migrations
// (see [Schema]), named "<ledger table>_outbox", and its SQL comes from
// OutboxQueries.
type Outboxer interface {
	// OutboxQueries returns the outbox's SQL for the given (already
	// validated, unquoted) outbox table name.
	OutboxQueries(table string) OutboxQueries
}

// OutboxQueries holds the SQL text of every statement the outbox and its
// relay run. Messages are rows (seq, id, partition_key, topic, name,
// payload, created_at); seq is assigned by the database on insert, in
// increasing order.
type OutboxQueries struct {
	// Insert enqueues one message. Args: id, partition_key, topic, name,
	// payload, created_at. A conflict on id must either affect zero rows
	// or fail with an error classified as [ClassUniqueViolation] that
	// leaves the transaction usable.
	Insert string
	// Batch reads the oldest messages, in seq order. Arg: the batch size.
	// Columns: seq, id, partition_key, topic, name, payload, created_at.
	// When Locking is set it locks the rows it returns and skips rows
	// that another transaction holds (FOR UPDATE SKIP LOCKED).
	Batch string
	// Upto lists every message up to a seq, locked or not, in seq order.
	// Arg: seq. Columns: seq, partition_key. The relay reads it after
	// Batch to learn which of its rows are first in their partition.
	Upto string
	// Delete removes one delivered message. Arg: seq.
	Delete string
	// Locking says that Batch locks rows and skips locked ones, so that
	// several relays can share one outbox: the relay then runs Batch, Upto
	// and Delete in one READ COMMITTED transaction that lasts while it
	// publishes. Without it (SQLite, one writer at a time) the relay reads
	// without a transaction and deletes in a short one; run one relay per
	// database.
	Locking bool
}
