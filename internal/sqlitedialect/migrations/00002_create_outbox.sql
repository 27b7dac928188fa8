-- opledger transactional outbox, SQLite: messages enqueued in the caller's
-- transaction beside the ledger claim, published by the relay and deleted
-- once the publisher acknowledged them.
-- seq orders the messages (AUTOINCREMENT: never reused, even after the table
-- was emptied); id is the message id, SHA-256 derived from the operation's
-- identity and the message's name: the unique constraint on it keeps an
-- operation from enqueueing a message twice. created_at is Unix microseconds.

-- +goose Up
CREATE TABLE {{.Ident "outbox"}} (
    seq           INTEGER PRIMARY KEY AUTOINCREMENT,
    id            BLOB    NOT NULL,
    partition_key TEXT    NOT NULL,
    topic         TEXT    NOT NULL,
    name          TEXT    NOT NULL,
    payload       BLOB    NOT NULL,
    created_at    INTEGER NOT NULL,
    CONSTRAINT {{.Ident "outbox_id_key"}} UNIQUE (id)
);

-- +goose Down
DROP TABLE {{.Ident "outbox"}};
