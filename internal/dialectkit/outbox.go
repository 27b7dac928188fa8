package dialectkit

// Outboxer is implemented by dialects that carry the transactional
// outbox (package outbox): its table comes with the dialect's migrations
// (see [dialects.Schema]), named "<ledger table>_outbox", and its SQL comes from
// OutboxQueries.
type Outboxer interface {
	// OutboxQueries returns the outbox's SQL for the given (already
	// validated, unquoted) outbox table name.
	OutboxQueries(table string) OutboxQueries
}

// OutboxQueries holds the SQL text of every statement the outbox and its
// relay run. Messages are rows (seq, id, partition_key, topic, name,
// payload, created_at, attempts, last_error, dead_at); seq is assigned by
// the database on insert, in increasing order. A message is dead (set
// aside as undeliverable) while dead_at is not NULL.
type OutboxQueries struct {
	// Insert enqueues one message. Args: id, partition_key, topic, name,
	// payload, created_at. A conflict on id must either affect zero rows
	// or fail with an error classified as [dialects.ClassUniqueViolation] that
	// leaves the transaction usable.
	Insert string
	// Batch reads the oldest messages that may be published, in seq
	// order: not dead, and with no dead message of their partition key
	// before them (a dead message holds back the rest of its key only).
	// Arg: the batch size. Columns: seq, id, partition_key, topic, name,
	// payload, created_at, attempts. When Locking is set it locks the rows
	// it returns and skips rows that another transaction holds (FOR UPDATE
	// SKIP LOCKED).
	Batch string
	// Upto lists every message up to a seq, locked or dead or not, in seq
	// order. Arg: seq. Columns: seq, partition_key. The relay reads it
	// after Batch to learn which of its rows are first in their partition.
	Upto string
	// Delete removes one delivered message. Arg: seq.
	Delete string
	// Fail records a failed publish of one message: attempts + 1 and
	// last_error, and dead_at (NULL for a failure the relay retries, a
	// time for a message it sets aside). Args: last_error, dead_at, seq.
	Fail string
	// Dead lists the dead messages, in seq order. Arg: the most to list.
	// Columns: seq, id, partition_key, topic, name, the payload's length
	// in bytes, created_at, attempts, last_error, dead_at, and how many
	// later messages of the same partition key wait behind it.
	Dead string
	// DeadByID reads the dead message with an id, with Dead's columns.
	// Arg: id.
	DeadByID string
	// Revive makes the dead message with an id an ordinary one again
	// (dead_at NULL), affecting no row when no dead message has the id.
	// Arg: id.
	Revive string
	// Discard deletes the dead message with an id, affecting no row when
	// no dead message has the id. Arg: id.
	Discard string
	// Count counts the messages. No args. Columns: all messages, dead
	// messages.
	Count string
	// Locking says that Batch locks rows and skips locked ones, so that
	// several relays can share one outbox: the relay then runs Batch, Upto,
	// Delete and Fail in one READ COMMITTED transaction that lasts while
	// it publishes. Without it (SQLite, one writer at a time) the relay
	// reads without a transaction and deletes in a short one; run one
	// relay per database.
	Locking bool
}
