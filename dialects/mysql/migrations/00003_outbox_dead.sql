-- opledger transactional outbox, MySQL / MariaDB (InnoDB): the dead-message
-- state. attempts counts the relay's failed publishes of a message;
-- last_error is the publisher's last error. dead_at (Unix microseconds) is
-- set when the publisher refused the message as undeliverable: the relay then
-- sets it aside and holds back only the later messages of its partition key,
-- until an operator retries it (dead_at back to NULL) or discards it
-- (deleted). InnoDB has no partial index: the relay's batch looks up whether
-- an earlier message of a key is dead in (dead_at, partition_key), whose
-- entries also carry seq (the primary key): the live messages' entries (NULL)
-- come first and the lookup ranges over the dead ones only, however many
-- messages wait for one key. One ALTER TABLE, so that the change is one
-- statement (MySQL does not roll back DDL).
-- Down removes the state: dead messages become ordinary ones again, which
-- the relay publishes (and the publisher refuses) once more.

-- +goose Up
ALTER TABLE {{.Ident "outbox"}}
    ADD COLUMN attempts   INT     NOT NULL DEFAULT 0,
    ADD COLUMN last_error TEXT    CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NULL,
    ADD COLUMN dead_at    BIGINT  NULL,
    ADD INDEX {{.Ident "outbox_dead_idx"}} (dead_at, partition_key);

-- +goose Down
ALTER TABLE {{.Ident "outbox"}}
    DROP INDEX {{.Ident "outbox_dead_idx"}},
    DROP COLUMN dead_at,
    DROP COLUMN last_error,
    DROP COLUMN attempts;
