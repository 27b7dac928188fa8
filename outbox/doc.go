// Package outbox is the transactional outbox of the kit: a message is
// written in the same transaction as the ledger claim and the business
// write, so it exists if and only if the operation committed, and a relay
// publishes it afterwards. Create the outbox with [New] and its relay with
// [NewRelay].
//
// Inside a keyed handler (txmiddleware or grpcint runs it, and its context
// carries the operation), enqueue with the handler's transaction:
//
//	id, err := ob.Enqueue(ctx, tx, outbox.Message{
//		Name:    "TransferCompleted",         // the message's name within the operation
//		Topic:   "payments.transfers",        // where the relay publishes it
//		Key:     req.GetFromAccount(),        // messages of one key keep their order
//		Payload: payload,
//	})
//
// The message's id is derived from the operation's identity and the
// message's name (MessageID), and inserted first against a unique
// constraint: a replayed operation does not run its handler, and a handler
// that runs again after a rollback writes the same id, so one operation
// produces one message of each name.
//
// A [Relay] ([NewRelay], [Relay.Run]; `opledger relay` on the command line) publishes
// committed messages to a Publisher, in order per partition key, at least
// once, in bounded batches, with backoff while the publisher fails, and
// deletes each one the publisher acknowledged. Several relays may share an
// outbox on PostgreSQL and MySQL 8 / MariaDB 10.6+ (FOR UPDATE SKIP
// LOCKED); on SQLite run one. A publisher to a broker that drops repeated
// message ids (outbox/natsjs: NATS JetStream with Nats-Msg-Id) turns the
// relay's at-least-once into one stored message per operation.
//
// A message the publisher refuses as undeliverable (its error matches
// ErrUndeliverable) is set aside in the table, dead, and holds back only
// the later messages of its own partition key until an operator retries
// it (RetryDead) or discards it (DiscardDead); every other key keeps
// flowing. With the publisher's limits (WithPublisherLimits and a
// publisher that implements Checker), Enqueue refuses such a message
// before it is written.
//
// The outbox's table, "<ledger table>_outbox" (TableFor), is the second
// migration of each dialect's set (package migrations), and its
// dead-message state the third, so that one `migrate up` creates the
// ledger and its outbox together. Its SQL comes
// from the dialect (dialectkit.Outboxer). The package imports no broker
// client. See docs/beyond-the-transaction.md.
package outbox
