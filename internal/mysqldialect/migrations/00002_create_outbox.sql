-- opledger transactional outbox, MySQL / MariaDB (InnoDB): messages enqueued
-- in the caller's transaction beside the ledger claim, published by the relay
-- and deleted once the publisher acknowledged them.
-- seq orders the messages (AUTO_INCREMENT, assigned on insert); id is the
-- message id, SHA-256 derived from the operation's identity and the message's
-- name: the unique key on it keeps an operation from enqueueing a message
-- twice. Text columns are binary-collated, so they compare bytes. created_at
-- is Unix microseconds.

-- +goose Up
CREATE TABLE {{.Ident "outbox"}} (
    seq           BIGINT        NOT NULL AUTO_INCREMENT,
    id            BINARY(32)    NOT NULL,
    partition_key VARCHAR(255)  CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL,
    topic         VARCHAR(255)  CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL,
    name          VARCHAR(512)  CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL,
    payload       LONGBLOB      NOT NULL,
    created_at    BIGINT        NOT NULL,
    PRIMARY KEY (seq),
    UNIQUE KEY {{.Ident "outbox_id_key"}} (id)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin;

-- +goose Down
DROP TABLE {{.Ident "outbox"}};
